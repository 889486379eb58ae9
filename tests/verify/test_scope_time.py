"""Who may revoke whom, and statements dated in the future (issue 22 item 6), with twins."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from specbundle import attest
from specbundle.audit import audit
from specbundle.audit.revocation import revoke_key
from specbundle.verify import BundleVerificationFailed, verify_bundle
from specbundle.verify.policy import MAX_CLOCK_SKEW
from tests.lib.bundles import Signed
from tests.lib.policy import policy_doc, write_policy


def _with_narrow_key(s: Signed, *, revoker: bool = False) -> attest.SigningKey:
    narrow = attest.generate_key("ecdsa-p256")
    doc = policy_doc({"release": s.key, "narrow": narrow})
    doc["keys"][1]["bundles"] = ["some-other-bundle"]  # type: ignore[index]
    if revoker:
        doc["revokers"] = ["narrow"]
    write_policy(s.policy_path, doc)
    return narrow


def test_a_narrowly_scoped_key_cannot_revoke_a_wider_one(signed: Signed) -> None:
    narrow = _with_narrow_key(signed)
    revoke_key(signed.mirror, signed.key.fingerprint, signer=narrow, reason="hostile")
    assert verify_bundle(signed.mirror, "pair", signed.policy).version == 1
    (b,) = audit(signed.mirror, "pair", policy=signed.policy).bundles  # audit agrees
    assert {x.name: x.status for x in b.links}["signed manifest"] == "ok"


def test_a_designated_revoker_may_revoke_any_key(signed: Signed) -> None:
    narrow = _with_narrow_key(signed, revoker=True)
    revoke_key(signed.mirror, signed.key.fingerprint, signer=narrow, reason="laptop stolen")
    with pytest.raises(BundleVerificationFailed, match="laptop stolen"):
        verify_bundle(signed.mirror, "pair", signed.policy)


def test_a_same_scope_key_and_the_key_itself_may_revoke(signed: Signed) -> None:
    peer = attest.generate_key("ecdsa-p256")
    write_policy(signed.policy_path, policy_doc({"release": signed.key, "peer": peer}))
    revoke_key(signed.mirror, peer.fingerprint, signer=peer, reason="retired")
    assert verify_bundle(signed.mirror, "pair", signed.policy).version == 1
    revoke_key(signed.mirror, signed.key.fingerprint, signer=peer, reason="laptop stolen")
    with pytest.raises(BundleVerificationFailed, match="laptop stolen"):
        verify_bundle(signed.mirror, "pair", signed.policy)


def test_statements_dated_beyond_the_clock_skew_do_not_count(signed: Signed) -> None:
    """Seen from a clock an hour behind, every statement lies in the future: none counts."""
    now = datetime.now(UTC)
    verify_bundle(signed.mirror, "pair", signed.policy, now=now - MAX_CLOCK_SKEW / 2)  # twin
    with pytest.raises(BundleVerificationFailed, match="in the future") as err:
        verify_bundle(signed.mirror, "pair", signed.policy, now=now - timedelta(hours=1))
    assert {p.kind for p in err.value.report.problems} == {"unmet-threshold"}
