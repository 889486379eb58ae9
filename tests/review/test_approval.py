"""Approval status: each requirement says who signed, who still must, and what it covers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.review import approval_status
from specbundle.sign import sign_bundle
from specbundle.verify import BundleVerificationFailed, load_policy, verify_bundle
from tests.lib.cli import run_cli
from tests.lib.policy import policy_doc, write_policy
from tests.lib.versions import Versions


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


def test_stale_signature_is_named_not_counted(tmp_path: Path) -> None:
    v = Versions(tmp_path)
    v.sign()
    doc = policy_doc({"release": v.key})
    doc["require"] = {"pair-binding": {"threshold": 1, "max_age": "30d"}}
    st = approval_status(v.mirror, "pair", load_policy(write_policy(tmp_path / "age.yaml", doc)),
                         now=datetime.now(UTC) + timedelta(days=31))
    (pair,) = [r for r in st.requirements if r.kind == "pair-binding" and "target" in r.subject]
    assert pair.signed == [] and pair.not_counted == ["release (older than max_age)"]
    assert pair.missing == ["release"] and not st.satisfied


def test_designated_approvers_must_sign_the_manifest_and_this_spec(tmp_path: Path) -> None:
    """v1 approved by release and security; v2 (another K) signed by release only: security's
    old pair binding approves another spec, and security has not signed the v2 manifest."""
    v = Versions(tmp_path)
    security = attest.generate_key("ecdsa-p256")
    v.sign()
    sign_bundle(v.mirror, "pair", [v.key, security])  # v2: same spec, both approvers
    v.sign(k=7)  # v3: K changed, release alone
    doc = policy_doc({"release": v.key, "security": security})
    doc["require"] = {"pair-binding": {"threshold": 2, "signers": ["release", "security"]}}
    policy = load_policy(write_policy(tmp_path / "p.yaml", doc))
    st = approval_status(v.mirror, "pair", policy)
    with pytest.raises(BundleVerificationFailed):  # the one verifier agrees
        verify_bundle(v.mirror, "pair", policy)
    by = {(r.kind, r.subject.split()[0]): r for r in st.requirements}
    designated = by[("manifest", "pair-binding")]
    assert designated.signed == ["release"] and designated.missing == ["security"]
    pair = by[("pair-binding", "target")]
    assert pair.signed == ["release"] and pair.missing == ["security"]
    assert pair.not_counted == ["security (approves another spec)"]


def test_a_statement_dated_in_the_future_is_not_counted_here_either(tmp_path: Path) -> None:
    """The old approval copy had no clock-skew rule: it listed statements the verifier
    refuses (dated beyond the skew) as approvals. Both apply the verifier's rule now."""
    v = Versions(tmp_path)
    v.sign()
    doc = policy_doc({"release": v.key})
    doc["require"] = {"pair-binding": {"threshold": 1}}
    policy = load_policy(write_policy(tmp_path / "skew.yaml", doc))
    before = datetime.now(UTC) - timedelta(days=2)  # every statement is two days ahead
    with pytest.raises(BundleVerificationFailed, match="in the future"):
        verify_bundle(v.mirror, "pair", policy, now=before)
    st = approval_status(v.mirror, "pair", policy, now=before)
    (pair,) = [r for r in st.requirements if r.kind == "pair-binding" and "target" in r.subject]
    assert pair.signed == [] and pair.not_counted == ["release (dated in the future)"]
    assert not st.satisfied
    twin = approval_status(v.mirror, "pair", policy)  # benign twin: the right clock
    assert twin.satisfied
