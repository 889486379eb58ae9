"""``diff`` against a registry version on a deployment node, whose mirror is mounted read-only.

Runs on the host (``ci/test.sh``'s host-only list): a read-only bind mount needs ``mount``,
which an unprivileged namespace refuses. The registry is on loopback.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lib.cli import run_cli
from tests.lib.fs import read_only_view
from tests.lib.registry import Registry, registry_available, run_registry
from tests.lib.versions import mirror_state, registry_gap


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    if not registry_available():
        pytest.skip("docker-registry not installed (ci/install-registry.sh)")
    with run_registry(tmp_path / "registry") as reg:
        yield reg


def test_a_read_only_mirror_compares_against_the_registry(
        registry: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The registry's version is staged in a private folder outside the mirror (removed
    after), and the mirror is not touched."""
    gap = registry_gap(tmp_path, registry.host, capsys)
    looks = set(Path(tempfile.gettempdir()).glob("specbundle-look-*"))
    before = mirror_state(gap.iso)
    with read_only_view(gap.iso.root, tmp_path / "ro") as ro:
        code, out, err = run_cli(capsys, "diff", "pair", "current", f"oci://{gap.repo}:v2",
                                 "--json", "--mirror", str(ro), "--plain-http", "--trust",
                                 str(gap.v.policy_path))
    assert code == 0, err
    assert json.loads(out)["new"]["version"] == 2
    assert mirror_state(gap.iso) == before
    assert set(Path(tempfile.gettempdir()).glob("specbundle-look-*")) == looks
