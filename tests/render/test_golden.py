"""Golden manifests for every engine x target (refresh with SPECBUNDLE_UPDATE_GOLDENS=1).

The goldens are the reviewed form of what a user deploys; any change to a flag, an env var
or a template shows up here as a diff. Mirror paths are normalised to GOLDEN_ROOT.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specbundle.bundle import read_unsigned
from specbundle.mirror import Mirror
from specbundle.render import TARGETS, render_bundle
from specbundle.spec import EngineName
from tests.lib.bundles import DIGEST, GOLDEN_ROOT, BundleFactory

GOLDEN_DIR = Path(__file__).parents[1] / "golden" / "render"
UPDATE = os.environ.get("SPECBUNDLE_UPDATE_GOLDENS") == "1"


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("engine", [e.value for e in EngineName])
def test_manifest_matches_golden(mirror: Mirror, bundle: BundleFactory, engine: str,
                                 target: str) -> None:
    bundle()
    res = render_bundle(read_unsigned(mirror, "llama-pair"), engine, target, image_digest=DIGEST)
    manifest = res.files[0]
    text = manifest.read_text().replace(str(mirror.root), GOLDEN_ROOT)
    golden = GOLDEN_DIR / engine / target / manifest.name
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.is_file(), f"no golden {golden}; run with SPECBUNDLE_UPDATE_GOLDENS=1"
    assert text == golden.read_text(), f"{engine}/{target} differs from {golden}"
    assert str(mirror.root) not in golden.read_text()
