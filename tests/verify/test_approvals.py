"""Approvals bind the manifest: a spec-only change needs the designated approvers again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.attest.manifest import spec_sha256
from specbundle.record import BundleRecord
from specbundle.sign import sign_bundle
from specbundle.verify import BundleVerificationFailed, verify_bundle
from tests.lib.bundles import Signed, make_signed
from tests.lib.policy import policy_doc, write_policy

#: Spec-only changes a designated approver never saw (engine arguments, K, thresholds).
CHANGES = {
    "k": lambda spec: spec["speculative"].update(num_speculative_tokens=9),
    "threshold": lambda spec: spec.setdefault("admission", {}).update(
        min_throughput_ratio_lower_bound=0.1),
    "extra_args": lambda spec: spec["engines"]["vllm"].update(extra_args=["--enforce-eager"]),
}


def _approved(tmp: Path) -> tuple[Signed, attest.SigningKey]:
    """Version 1, signed by the release key and the designated ML lead (pair binding)."""
    s = make_signed(tmp)
    ml = attest.generate_key("ecdsa-p256")
    write_policy(s.policy_path, policy_doc(
        {"release": s.key, "ml-lead": ml},
        require={"pair-binding": {"threshold": 1, "signers": ["ml-lead"]},
                 "scan-result": {"threshold": 1}, "fetch-provenance": {"threshold": 1}}))
    sign_bundle(s.mirror, "pair", [s.key, ml])
    assert verify_bundle(s.mirror, "pair", s.policy).version == 2
    return s, ml


def _change_spec(s: Signed, change: str) -> None:
    rec = s.mirror.load_bundle("pair")
    spec = json.loads(json.dumps(rec.spec))
    CHANGES[change](spec)
    with s.mirror.lock():
        s.mirror.save_bundle(BundleRecord(rec.name, spec, rec.target, rec.draft, rec.created,
                                          rec.tool_version, rec.extra_blobs))


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_spec_change_signed_by_other_in_scope_keys_fails(tmp_path: Path, change: str) -> None:
    s, ml = _approved(tmp_path)
    _change_spec(s, change)
    sign_bundle(s.mirror, "pair", [s.key])  # the release key alone: in scope, not designated
    with pytest.raises(BundleVerificationFailed) as err:
        verify_bundle(s.mirror, "pair", s.policy)
    (p,) = err.value.report.problems
    assert (p.kind, p.subject, p.expected, p.actual) == (
        "unmet-threshold", "manifest", "1 of them", "0")
    assert "pair-binding approvers" in p.message
    # the benign twin: the designated approver signs the new spec too
    sign_bundle(s.mirror, "pair", [s.key, ml])
    v = verify_bundle(s.mirror, "pair", s.policy)
    assert v.version == 4 and v.manifest.spec_sha256 == spec_sha256(v.record.spec)


def _strip_signer(s: Signed, fingerprint: str, version_spec: str) -> None:
    """Drop one signature from the statements that name ``version_spec`` (the log is not
    authenticated as a whole: a mirror writer can do this)."""
    log = attest.attestations_path(s.mirror, "pair")
    out = []
    for line in log.read_bytes().splitlines():
        env = json.loads(line)
        if version_spec.encode() in attest.Envelope.from_json(env).payload:
            env["signatures"] = [x for x in env["signatures"] if x["keyid"] != fingerprint]
            if not env["signatures"]:
                continue
        out.append(json.dumps(env).encode())
    log.write_bytes(b"\n".join(out) + b"\n")


def test_an_approval_of_an_earlier_spec_does_not_count(tmp_path: Path) -> None:
    s, ml = _approved(tmp_path)
    _change_spec(s, "k")
    sign_bundle(s.mirror, "pair", [s.key, ml])
    new_spec = verify_bundle(s.mirror, "pair", s.policy).manifest.spec_sha256
    # the designated approver's statements for the new spec are removed; those it made for
    # the earlier spec name the same artifacts, but another spec
    _strip_signer(s, ml.fingerprint, new_spec)
    with pytest.raises(BundleVerificationFailed) as err:
        verify_bundle(s.mirror, "pair", s.policy)
    probs = err.value.report.problems
    assert {(p.kind, p.subject.split(" for ")[0]) for p in probs} == {
        ("unmet-threshold", "pair-binding")}
    assert all("approves another spec" in p.message for p in probs)
