"""Approval status: each requirement says who signed, who still must, and what it covers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.review import approval_status
from specbundle.sign import sign_bundle
from specbundle.verify import load_policy
from tests.clihelp import run_cli
from tests.review.builders import Versions
from tests.sign.helpers import policy_doc, write_policy


@pytest.fixture
def two_of_two(tmp_path: Path) -> tuple[Versions, attest.SigningKey, Path]:
    """Signed by release only, under a policy that needs release *and* security."""
    v = Versions(tmp_path)
    v.sign()
    security = attest.generate_key("ecdsa-p256")
    doc = policy_doc({"release": v.key, "security": security})
    doc["require"] = {"pair-binding": {"threshold": 2},
                      "scan-result": {"threshold": 1, "signers": ["security"]},
                      "fetch-provenance": {"threshold": 1}}
    return v, security, write_policy(tmp_path / "two.yaml", doc)


def test_names_who_still_must_sign(two_of_two: tuple[Versions, attest.SigningKey, Path]
                                   ) -> None:
    v, _, path = two_of_two
    st = approval_status(v.mirror, "pair", load_policy(path))
    assert not st.satisfied
    by = {(r.kind, r.subject.split()[0]): r for r in st.requirements}
    man = by[("manifest", "bundle")]
    assert man.signed == ["release"] and man.missing == ["security"] and man.still_needed == 1
    assert man.covers.startswith("whole manifest")
    assert by[("model.sig", "target")].satisfied
    assert by[("model.sig", "target")].covers.startswith("artifact files")
    scan = by[("scan-result", "draft")]
    assert scan.signed == [] and scan.missing == ["security"]
    assert scan.not_counted == ["release (not an eligible signer)"]
    assert by[("fetch-provenance", "target")].satisfied


def test_second_signature_completes_it(two_of_two: tuple[Versions, attest.SigningKey, Path]
                                       ) -> None:
    v, security, path = two_of_two
    sign_bundle(v.mirror, "pair", [v.key, security])
    assert approval_status(v.mirror, "pair", load_policy(path)).satisfied


def test_verify_exit_3_says_what_is_missing(
        two_of_two: tuple[Versions, attest.SigningKey, Path],
        capsys: pytest.CaptureFixture[str]) -> None:
    v, _, path = two_of_two
    code, out, _ = run_cli(capsys, "verify", "pair", "--mirror", str(v.mirror.root),
                           "--trust", str(path))
    assert code == 3
    assert "approvals of pair v1" in out and "1 more of: security" in out
    code, out, _ = run_cli(capsys, "verify", "pair", "--mirror", str(v.mirror.root),
                           "--trust", str(path), "--json")
    doc = json.loads(out)
    assert code == 3 and doc["ok"] is False and doc["approval"]["satisfied"] is False
    assert {r["kind"] for r in doc["approval"]["requirements"] if not r["satisfied"]} == {
        "manifest", "pair-binding", "scan-result"}
