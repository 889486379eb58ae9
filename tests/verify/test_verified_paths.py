"""A verified bundle names the trees verify hashed, never the ``snapshots/<commit>`` view.

The view is a link the mirror's writer flips; verify does not read through it, so a link
re-pointed at another folder must not become the path a later stage is handed.
"""

from __future__ import annotations

from pathlib import Path

from specbundle.verify import verify_bundle
from tests.lib.bundles import Signed


def test_verified_paths_are_the_hashed_trees_even_with_a_repointed_view(
        signed: Signed, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.json").write_text("{}")
    for art in signed.record.artifacts:
        view = signed.mirror.snapshot_dir(art.repo, art.commit)
        view.unlink()
        view.symlink_to(elsewhere, target_is_directory=True)
    vb = verify_bundle(signed.mirror, signed.name, signed.policy)
    for art in signed.record.artifacts:
        path = vb.paths[art.role]
        assert path == signed.mirror.artifact_dir(art)
        assert elsewhere not in path.resolve().parents and path.resolve() != elsewhere
