"""Committed goldens (tests/golden/sign-v1) must keep verifying in every future version."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specbundle.attest import load_public_key
from specbundle.mirror import Mirror
from specbundle.verify import load_policy, verify_bundle, verify_model

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sign-v1"


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    dest = tmp_path / "sign-v1"
    shutil.copytree(GOLDEN, dest, symlinks=True)  # never let a test touch the committed copy
    return dest


def test_golden_bundle_still_verifies(golden: Path) -> None:
    vb = verify_bundle(Mirror.open(golden / "mirror"), "golden", load_policy(golden / "trust.yaml"))
    assert vb.report.ok and vb.report.files_checked == 10
    assert set(vb.report.statement_signers) == {"fetch-provenance", "scan-result",
                                                "pair-binding"}


@pytest.mark.parametrize("sig", ["model.sig", "reference.sig"])
def test_golden_model_signatures_still_verify(golden: Path, sig: str) -> None:
    other = "reference.sig" if sig == "model.sig" else "model.sig"
    res = verify_model(golden / "model", load_public_key(golden / "key.pub"),
                       signature=golden / "model" / sig, ignore_paths=[other])
    assert len(res.manifest.resources) == 5
