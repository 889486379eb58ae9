"""Key revocations in the event log: trusted ones break every chain the key signed, others are
reported and ignored, and the log keeps verifying."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from specbundle.attest import SigningKey, generate_key, write_private_key, write_public_key
from specbundle.audit import audit, verify_events, write_checkpoint
from specbundle.audit.queries import no_longer_verifying
from specbundle.audit.revocation import check_revocations, read_revocations, revoke_key
from specbundle.errors import UsageError, VerificationError
from tests.lib.chain import Chain
from tests.lib.cli import run_cli
from tests.lib.policy import policy_for, policy_yaml

REASON = "laptop stolen 2026-11-28"


@pytest.fixture
def security() -> SigningKey:
    """A second key of the trust policy, the one that signs revocations."""
    return generate_key("ecdsa-p256")


def test_trusted_revocation_breaks_everything_the_key_signed(
    chain: Chain, security: SigningKey
) -> None:
    policy = policy_for({"release": chain.release, "security": security})
    before = audit(chain.mirror, "pair", policy=policy, rehash=False)
    assert not before.broken, [x for b in before.bundles for x in b.links if x.breaks_chain]

    rev = revoke_key(chain.mirror, chain.release.fingerprint, signer=security, reason=REASON)
    assert rev.detail.startswith("revoked at ") and rev.detail.endswith(f": {REASON}")
    assert read_revocations(chain.mirror, policy.public_keys) == (rev,)

    report = audit(chain.mirror, "pair", policy=policy, rehash=False)
    assert report.broken
    (ba,) = report.bundles
    # the policy still lists the key, yet every signature it made is failed with the reason
    assert ba.attestations
    for t in ba.attestations:
        assert t.link.status == "failed"
        assert f"key release ({chain.release.fingerprint[:16]}…), {rev.detail}" in t.link.detail
    for a in ba.artifacts:
        assert a.model_sig.status == "failed"
        assert rev.detail in a.model_sig.detail
    assert ba.scan.link.status == "failed"  # its attestation no longer counts
    assert report.revoked_signers == (rev,)
    # the log itself is intact; the checkpoint the revoked key signed is no longer used
    assert report.log.chain.ok
    assert any("signed by key" in p and rev.detail in p for p in report.log.problems)
    doc = report.to_json()
    assert doc["log"]["revocations"][0]["fingerprint"] == chain.release.fingerprint
    assert doc["log"]["revocations"][0]["signers"] == [security.fingerprint]

    hits = no_longer_verifying(chain.mirror, policy)
    assert [u.bundle for u in hits] == ["pair"]
    assert all(REASON in x.detail for x in hits[0].failing)


def _tampered(envelope: dict[str, object]) -> dict[str, object]:
    """The same envelope with the reason changed inside its signed payload."""
    st = json.loads(base64.b64decode(str(envelope["payload"])))
    st["predicate"]["reason"] = "nothing happened"
    return {**envelope, "payload": base64.b64encode(json.dumps(st).encode()).decode()}


def test_unsigned_untrusted_and_forged_revocations_are_reported_and_ignored(
    chain: Chain, security: SigningKey
) -> None:
    policy = policy_for({"release": chain.release, "security": security})
    fp = chain.release.fingerprint
    revoke_key(chain.mirror, fp, signer=chain.other, reason="not my key to revoke")
    signed = revoke_key(chain.mirror, security.fingerprint, signer=security, reason="rotated")
    events = chain.mirror.read_events()
    with chain.mirror.lock():
        chain.mirror.append_event("revocation", None, {"fingerprint": fp, "reason": "unsigned"})
        forged = _tampered(events[-1]["data"]["envelope"])
        chain.mirror.append_event("revocation", None, {"fingerprint": security.fingerprint,
                                                       "envelope": forged})

    report = audit(chain.mirror, "pair", policy=policy, rehash=False)
    assert not report.broken, report.log.problems
    assert report.log.ok
    ignored = report.log.revocations.ignored
    assert [i.fingerprint for i in ignored] == [fp, fp, security.fingerprint]
    assert "signed by no key of the trust policy" in ignored[0].why
    assert "unsigned" in ignored[1].why
    assert "signed by no key of the trust policy" in ignored[2].why  # payload edited
    assert all(i.why.endswith("ignored") for i in ignored)
    # only the properly signed revocation of a key that signed nothing here counts
    assert report.log.revocations.revocations == (signed,)
    assert report.revoked_signers == ()
    # without a trust policy nothing can be verified, so nothing is trusted
    bare = check_revocations(chain.mirror.read_events(), ())
    assert bare.revocations == ()
    assert len(bare.ignored) == 4


def test_revocation_is_part_of_the_hash_chain(chain: Chain, security: SigningKey) -> None:
    policy = policy_for({"release": chain.release, "security": security})
    revoke_key(chain.mirror, chain.other.fingerprint, signer=security, reason=REASON)
    log = verify_events(chain.mirror, policy.public_keys)
    assert log.ok, (log.chain.issues, log.problems)
    head = chain.mirror.read_events()[-1]
    assert (head["type"], head["data"]["fingerprint"]) == ("revocation", chain.other.fingerprint)
    assert log.chain.head_seq == head["seq"]
    # once a checkpoint covers it, dropping the revocation from the log is detected
    write_checkpoint(chain.mirror, [security])
    path = chain.mirror.events_path
    lines = path.read_bytes().splitlines(keepends=True)
    seq = head["seq"]
    path.write_bytes(b"".join(lines[:seq] + lines[seq + 1:]))
    log = verify_events(chain.mirror, policy.public_keys)
    assert [(i.kind, i.seq) for i in log.chain.issues] == [("deleted", seq)]
    assert log.revocations.revocations == ()


def test_refusals(chain: Chain) -> None:
    with pytest.raises(UsageError, match="not a key fingerprint"):
        revoke_key(chain.mirror, "abc123", signer=chain.release, reason=REASON)
    with pytest.raises(UsageError, match="reason"):
        revoke_key(chain.mirror, chain.other.fingerprint, signer=chain.release, reason="  ")
    assert all(e["type"] != "revocation" for e in chain.mirror.read_events())
    # a key that revoked itself cannot sign a checkpoint to paper over the log afterwards
    revoke_key(chain.mirror, chain.other.fingerprint, signer=chain.other, reason=REASON)
    with pytest.raises(VerificationError, match=f"revoked at .*: {REASON}"):
        write_checkpoint(chain.mirror, [chain.other])


def test_cli_revoke_then_audit(
    chain: Chain, security: SigningKey, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = str(chain.mirror.root)
    trust = tmp_path / "trust.yaml"
    trust.write_text(policy_yaml({"release": chain.release, "security": security}))
    key = tmp_path / "security.pem"
    write_private_key(security, key)
    pub = tmp_path / "release.pub"
    write_public_key(chain.release.public, pub)

    code, out, _ = run_cli(capsys, "keys", "revoke", str(pub), "--mirror", m, "--key", str(key),
                           "--reason", REASON, "--json")
    assert code == 0, out
    rev = json.loads(out)
    assert (rev["fingerprint"], rev["reason"]) == (chain.release.fingerprint, REASON)
    assert rev["signers"] == [security.fingerprint]
    assert rev["seq"] == chain.mirror.read_events()[-1]["seq"]

    code, out, err = run_cli(capsys, "audit", "pair", "--mirror", m, "--trust", str(trust),
                             "--no-rehash")
    assert code == 3
    assert f"key {chain.release.fingerprint[:16]}… revoked at {rev['time']}: {REASON}" in err
    assert "revoked" in out and REASON in out

    code, out, _ = run_cli(capsys, "audit", "query", "unverifiable", "--mirror", m,
                           "--trust", str(trust), "--json")
    assert code == 0
    (hit,) = json.loads(out)["results"]
    assert hit["bundle"] == "pair"
    assert any(REASON in f["detail"] for f in hit["failing"])

    code, out, _ = run_cli(capsys, "audit", "log", "--verify", "--mirror", m, "--trust",
                           str(trust), "--json")
    doc = json.loads(out)
    assert doc["chain"]["ok"] is True
    assert [r["fingerprint"] for r in doc["revocations"]] == [chain.release.fingerprint]
    assert code == 3  # the checkpoint the revoked key signed no longer vouches for the log

    code, _, err = run_cli(capsys, "keys", "revoke", "xyz", "--mirror", m, "--key", str(key),
                           "--reason", REASON)
    assert code == 2
    assert "not a key fingerprint" in err
