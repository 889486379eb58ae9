"""Audit renders the verifier's verdict on each attestation line: no second signer rule.

The old audit copy required a statement's key to be scoped to *every* repo of the bundle,
while the verifier counts a per-artifact statement for the artifact it names when the key is
scoped to that artifact's repo: a key trusted for the target alone signed a target statement
that verify counted and audit failed. Both now apply :func:`eligible_signers`.
"""

from __future__ import annotations

from pathlib import Path

from specbundle import attest
from specbundle.attest.mirrored import bundle_manifest
from specbundle.audit import audit_bundle
from specbundle.mirror import Mirror
from specbundle.record import BundleRecord
from specbundle.sign import sign_bundle
from specbundle.verify import load_policy, verify_bundle
from specbundle.verify.eligibility import eligible_signers
from specbundle.verify.revocations import Revocation
from tests.lib.bundles import pulled_bundle, write_scan_report
from tests.lib.policy import policy_doc, write_policy
from tests.lib.versions import Versions


def _target_provenance(mirror: Mirror, rec: BundleRecord) -> attest.Statement:
    """The fetch provenance ``sign`` wrote for the bundle's target."""
    root = bundle_manifest(mirror, rec.target).root_digest
    (st,) = [st for e in attest.read_attestations(mirror, "pair")
             if (st := attest.parse_statement(e.payload)).predicate_type
             == attest.SLSA_PROVENANCE_V1 and root in st.digests("sha256")]
    return st


def test_a_target_only_key_counts_in_verify_and_in_audit_alike(tmp_path: Path) -> None:
    mirror = Mirror.open(tmp_path / "mirror", create=True)
    rec = pulled_bundle(tmp_path, mirror, "pair")
    write_scan_report(mirror, "pair")
    release, narrow = attest.generate_key("ecdsa-p256"), attest.generate_key("ecdsa-p256")
    sign_bundle(mirror, "pair", [release])
    doc = policy_doc({"release": release, "narrow": narrow})
    doc["keys"][1]["repos"] = ["org/target"]  # type: ignore[index]
    policy = load_policy(write_policy(tmp_path / "trust.yaml", doc))
    # the target's fetch provenance, signed again by the key trusted for the target only
    with mirror.lock():
        line = attest.append_attestation(mirror, "pair", attest.sign_statement(
            _target_provenance(mirror, rec), [narrow]))
    vb = verify_bundle(mirror, "pair", policy)
    (verdict,) = [v for v in vb.report.statements if v.line == line]
    assert verdict.ok and verdict.counted == {narrow.fingerprint}
    assert narrow.fingerprint in vb.report.statement_signers["fetch-provenance"]["target"]
    (audited,) = [a for a in audit_bundle(mirror, "pair", policy).attestations
                  if a.line == line]
    assert audited.link.status == "ok", audited.link.detail
    # the same key for the whole bundle (a manifest, both repos) is out of scope: one rule
    whole = eligible_signers(policy, {narrow.fingerprint}, bundle="pair",
                             repos=tuple(a.repo for a in rec.artifacts), revoked={})
    assert not whole.counted and "out of scope" in whole.excluded[narrow.fingerprint]


def test_audit_fails_a_line_the_verifier_excludes_and_says_why(tmp_path: Path) -> None:
    """A twin: a key scoped to another bundle signs the same statement; both refuse it."""
    mirror = Mirror.open(tmp_path / "mirror", create=True)
    pulled_bundle(tmp_path, mirror, "pair")
    write_scan_report(mirror, "pair")
    release, other = attest.generate_key("ecdsa-p256"), attest.generate_key("ecdsa-p256")
    sign_bundle(mirror, "pair", [release])
    doc = policy_doc({"release": release, "other": other})
    doc["keys"][1]["bundles"] = ["another-bundle"]  # type: ignore[index]
    policy = load_policy(write_policy(tmp_path / "trust.yaml", doc))
    first = attest.read_attestations(mirror, "pair")[0]
    with mirror.lock():
        line = attest.append_attestation(mirror, "pair", attest.sign_statement(
            attest.parse_statement(first.payload), [other]))
    vb = verify_bundle(mirror, "pair", policy)
    (verdict,) = [v for v in vb.report.statements if v.line == line]
    assert not verdict.ok and "out of scope" in str(verdict.reason)
    (audited,) = [a for a in audit_bundle(mirror, "pair", policy).attestations
                  if a.line == line]
    assert audited.link.status == "failed" and "out of scope" in audited.link.detail


def test_an_earlier_versions_approvals_are_superseded_not_failed(tmp_path: Path) -> None:
    """v2 changes only the spec: v1's pair binding and scan result approve another spec. The verifier does
    not count them (its rule) and says so; audit shows them as superseded, not as a break."""
    v = Versions(tmp_path)
    v.sign()
    v.sign(k=7)
    policy = load_policy(v.policy_path)
    vb = verify_bundle(v.mirror, "pair", policy)
    old = [s for s in vb.report.statements if s.superseded]
    assert {s.kind for s in old} == {"pair-binding", "scan-result"}
    assert all(not s.ok and "approves another spec" in str(s.reason) for s in old)
    audited = {a.line: a for a in audit_bundle(v.mirror, "pair", policy).attestations}
    assert all(audited[s.line].link.status == "ok"
               and audited[s.line].link.detail.startswith("superseded") for s in old)
    assert all(a.link.status == "ok" for a in audited.values())


def test_a_line_a_revoked_key_cosigned_counts_as_the_verifier_counts_it(tmp_path: Path) -> None:
    """A line signed by an eligible key and by a revoked one: the verifier counts it on the
    eligible signature, and audit says so (ok, the revoked signature named, not counted); its
    twin, signed by the revoked key alone, fails in both."""
    mirror = Mirror.open(tmp_path / "mirror", create=True)
    rec = pulled_bundle(tmp_path, mirror, "pair")
    write_scan_report(mirror, "pair")
    release, gone = attest.generate_key("ecdsa-p256"), attest.generate_key("ecdsa-p256")
    sign_bundle(mirror, "pair", [release])
    policy = load_policy(write_policy(tmp_path / "trust.yaml",
                                      policy_doc({"release": release, "gone": gone})))
    st = _target_provenance(mirror, rec)
    with mirror.lock():
        both = attest.append_attestation(mirror, "pair", attest.sign_statement(st, [release, gone]))
        alone = attest.append_attestation(mirror, "pair", attest.sign_statement(st, [gone]))
    revoked = {gone.fingerprint: Revocation(None, gone.fingerprint, "key leaked",
                                            "2026-12-01T00:00:00Z", frozenset(), "0" * 64)}
    vb = verify_bundle(mirror, "pair", policy, revoked={gone.fingerprint: "key leaked"})
    verdicts = {v.line: v for v in vb.report.statements}
    assert verdicts[both].ok and verdicts[both].counted == {release.fingerprint}
    assert not verdicts[alone].ok
    audited = {a.line: a.link for a in audit_bundle(mirror, "pair", policy,
                                                    revoked=revoked).attestations}
    assert audited[both].status == "ok"
    assert "key leaked" in audited[both].detail and "not counted" in audited[both].detail
    assert audited[alone].status == "failed" and "key leaked" in audited[alone].detail
