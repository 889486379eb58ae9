"""Committed goldens (tests/golden/sign-v1) must keep verifying in every future version."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from specbundle.attest import load_public_key
from specbundle.errors import SpecError
from specbundle.mirror import Mirror
from specbundle.verify import BundleVerificationFailed, load_policy, verify_bundle, verify_model

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sign-v1"


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    dest = tmp_path / "sign-v1"
    shutil.copytree(GOLDEN, dest, symlinks=True)  # never let a test touch the committed copy
    return dest


def test_golden_v1_bundle_is_refused_with_a_re_sign_message(golden: Path) -> None:
    """sign-v1 bundles carry no signed manifest: their spec and thresholds were unsigned, so
    they are refused (never half-trusted) with one clear instruction: re-sign."""
    with pytest.raises(SpecError, match="both repos and bundles"):
        load_policy(golden / "trust.yaml")  # v1 policies scoped keys by repos alone
    doc = yaml.safe_load((golden / "trust.yaml").read_text())
    for k in doc["keys"]:
        k["bundles"] = ["*"]
    (golden / "trust.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(BundleVerificationFailed) as err:
        verify_bundle(Mirror.open(golden / "mirror"), "golden",
                      load_policy(golden / "trust.yaml"))
    (p,) = err.value.report.problems
    assert (p.kind, p.subject) == ("unsigned-manifest", "manifest")
    assert "re-sign it with `specbundle sign`" in p.message and err.value.exit_code == 3


@pytest.mark.parametrize("sig", ["model.sig", "reference.sig"])
def test_golden_model_signatures_still_verify(golden: Path, sig: str) -> None:
    other = "reference.sig" if sig == "model.sig" else "model.sig"
    res = verify_model(golden / "model", load_public_key(golden / "key.pub"),
                       signature=golden / "model" / sig, ignore_paths=[other])
    assert len(res.manifest.resources) == 5
