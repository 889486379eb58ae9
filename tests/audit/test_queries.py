"""The auditor's cross-bundle questions, answered from a real mirror with signed admissions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from specbundle.attest import (
    SLSA_VSA_V1,
    Envelope,
    SigningKey,
    Statement,
    append_attestation,
    artifact_subjects,
    generate_key,
    sign_statement,
)
from specbundle.attest.mirrored import bundle_manifest
from specbundle.audit import audit
from specbundle.audit.queries import (
    admissions_older_than,
    admitted_by,
    bundles_using_digest,
    no_longer_verifying,
)
from specbundle.digest import sha256_bytes
from specbundle.errors import UsageError
from specbundle.mirror import versions
from specbundle.pull import pull_bundle
from tests.lib.chain import Chain
from tests.lib.models import small_pair
from tests.lib.policy import policy_for
from tests.lib.specs import bundle_spec

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _current_manifest(chain: Chain, name: str) -> str:
    v = versions.current_version(chain.mirror, name)
    assert v is not None
    data = versions.read_manifest(chain.mirror, name, v)
    assert data is not None
    return sha256_bytes(Envelope.from_json(json.loads(data)).payload)


def admit(chain: Chain, key: SigningKey, *, when: datetime, result: str = "PASSED",
          name: str = "pair", manifest: str | None = None) -> None:
    """Append an admission VSA the way the admit stage does (attest API)."""
    rec = chain.mirror.load_bundle(name)
    subjects = [s for a in rec.artifacts
                for s in artifact_subjects(a.repo, bundle_manifest(chain.mirror, a).root_digest,
                                           a.commit, a.commit_kind)]
    st = Statement.build(subjects, SLSA_VSA_V1, {
        "verifier": {"id": "https://specbundle.dev/admit"},
        "timeVerified": when.isoformat().replace("+00:00", "Z"),
        "resourceUri": f"specbundle:bundle/{name}",
        "policy": {"uri": "trust.yaml", "digest": {"sha256": chain.policy.digest}},
        "inputAttestations": [], "verificationResult": result,
        "verifiedLevels": ["SLSA_BUILD_LEVEL_UNEVALUATED"],
        "specbundle": {"manifestSha256": manifest or _current_manifest(chain, name)}})
    with chain.mirror.lock():
        append_attestation(chain.mirror, name, sign_statement(st, [key]))


def test_bundles_using_a_shared_draft_digest(chain: Chain) -> None:
    same = small_pair(chain.work / "models-pair")  # deterministic: the same draft bytes
    pull_bundle(bundle_spec(same, "pair2"), chain.mirror, workers=2)
    draft = chain.record.draft
    assert draft is not None
    gguf = draft.file("model.gguf")
    assert gguf is not None
    uses = bundles_using_digest(chain.mirror, gguf.sha256)
    assert {(u.bundle, u.role, u.what) for u in uses} == {
        ("pair", "draft", "file model.gguf"), ("pair2", "draft", "file model.gguf")}
    root = bundle_manifest(chain.mirror, draft).root_digest
    assert {u.bundle for u in bundles_using_digest(chain.mirror, root)} == {"pair", "pair2"}
    assert {u.what for u in bundles_using_digest(chain.mirror, draft.commit[:12])} == {"commit"}
    with pytest.raises(UsageError):
        bundles_using_digest(chain.mirror, "ab")


def test_drafts_admitted_by_a_key(chain: Chain) -> None:
    gate = generate_key("ed25519")
    policy = policy_for({"release": chain.release, "gate": gate})
    admit(chain, gate, when=NOW)
    (hit,) = admitted_by(chain.mirror, policy, "gate")
    assert chain.record.draft is not None
    assert hit.draft == f"{chain.record.draft.repo}@{chain.record.draft.commit}"
    assert hit.signers == (gate.fingerprint,)
    assert admitted_by(chain.mirror, policy, gate.fingerprint) == (hit,)
    assert admitted_by(chain.mirror, policy, "release") == ()
    with pytest.raises(UsageError, match="no key named"):
        admitted_by(chain.mirror, policy, "nobody")
    report = audit(chain.mirror, "pair", policy=policy)
    (decision,) = report.bundles[0].admissions
    assert (decision["result"], decision["status"], decision["signer_names"]) == (
        "PASSED", "ok", ["gate"])


def test_admissions_older_than(chain: Chain) -> None:
    gate = generate_key("ecdsa-p256")
    policy = policy_for({"release": chain.release, "gate": gate})
    admit(chain, gate, when=NOW - timedelta(days=40))
    (old,) = admissions_older_than(chain.mirror, policy, 30, now=NOW)
    assert old.time == (NOW - timedelta(days=40)).isoformat().replace("+00:00", "Z")
    assert admissions_older_than(chain.mirror, policy, 60, now=NOW) == ()
    admit(chain, gate, when=NOW - timedelta(days=1))  # re-admitted recently
    assert admissions_older_than(chain.mirror, policy, 30, now=NOW) == ()
    forged = generate_key("ecdsa-p256")  # an admission by an untrusted key is ignored
    admit(chain, forged, when=NOW - timedelta(days=400))
    assert admissions_older_than(chain.mirror, policy, 30, now=NOW) == ()


def test_bundles_that_no_longer_verify_after_revocation(chain: Chain) -> None:
    assert no_longer_verifying(chain.mirror, chain.policy) == ()
    (hit,) = no_longer_verifying(chain.mirror, policy_for({"other": chain.other}))
    assert hit.bundle == "pair"
    names = {x.name for x in hit.failing}
    assert {"target model.sig", "draft model.sig", "fetch-provenance #1",
            "fetch-provenance #2", "scan-result #3", "pair-binding #4"} == names


def test_a_replayed_admission_for_another_manifest_does_not_count(chain: Chain) -> None:
    """Item 5: a PASSED decision names a manifest digest and counts only for it."""
    gate = generate_key("ed25519")
    policy = policy_for({"release": chain.release, "gate": gate})
    admit(chain, gate, when=NOW, manifest="ab" * 32)  # e.g. copied from another pairing
    assert admitted_by(chain.mirror, policy, "gate") == ()
    (decision,) = audit(chain.mirror, "pair", policy=policy).bundles[0].admissions
    assert decision["status"] == "failed" and "does not count" in decision["detail"]
