"""Key revocations: signed records in the event log that retire a key for every audit.

Removing a key from ``trust.yaml`` only makes its signatures *unknown*; a revocation says
more and outlives policy edits. A key of the trust policy signs an in-toto statement
(predicate ``revocation/v1``: subject = the revoked fingerprint, predicate = reason and
``timeCreated``) and :func:`revoke_key` records that DSSE envelope in a ``revocation`` event
of the hash-chained log, so deleting it is detected like any other entry. The audit then
marks every model.sig, attestation and checkpoint made by the revoked key as
``revoked at <time>: <reason>`` and breaks the chain, even while the policy still lists it.
Every signature of the key counts, whatever its date: a stolen key can backdate (fail closed).

Only revocations whose envelope verifies under a key of the current policy count. An event
that is unsigned, malformed or signed by nobody trusted is reported as *ignored*, never
trusted. A key may revoke itself; a revocation signed by a key revoked later still stands,
because a revocation can only take trust away.
"""

from __future__ import annotations

from specbundle.attest import SigningKey, Statement, Subject, sign_statement
from specbundle.attest.models import RevocationV1
from specbundle.digest import is_sha256, sha256_bytes
from specbundle.errors import UsageError
from specbundle.mirror import Mirror, utc_now
from specbundle.verify.revocations import (
    REVOCATION_EVENT,
    IgnoredRevocation,
    Revocation,
    RevocationCheck,
    check_revocations,
    read_revocations,
    revoked_keys,
)

__all__ = [
    "REVOCATION_EVENT",
    "IgnoredRevocation",
    "Revocation",
    "RevocationCheck",
    "check_revocations",
    "read_revocations",
    "revocation_lines",
    "revoke_key",
    "revoked_keys",
]


def _fingerprint(value: str) -> str:
    fp = value.strip().lower().removeprefix("sha256:")
    if not is_sha256(fp):
        raise UsageError(f"{value!r} is not a key fingerprint",
                         hint="give the 64 hex digits `specbundle keys generate` printed")
    return fp


def revoke_key(mirror: Mirror, fingerprint: str, *, signer: SigningKey, reason: str) -> Revocation:
    """Sign a revocation of ``fingerprint`` with ``signer`` and append it to the event log.

    The signer should be a key of the trust policy the auditors use; any other signer's
    revocation is recorded but reported as ignored by the audit.
    """
    fp = _fingerprint(fingerprint)
    why = reason.strip()
    if not why:
        raise UsageError("a revocation needs a reason", hint="pass --reason TEXT")
    now = utc_now()
    st = Statement.of([Subject(f"key:{fp}", {"sha256": fp})],
                      RevocationV1(fingerprint=fp, reason=why, time_created=now,
                                   mirror=mirror.root.name))
    env = sign_statement(st, [signer])
    with mirror.lock():
        entry = mirror.append_event(REVOCATION_EVENT, None, {
            "fingerprint": fp, "reason": why, "time": now, "signers": [signer.fingerprint],
            "envelope": env.to_json()})
    return Revocation(int(entry["seq"]), fp, why, now, frozenset({signer.fingerprint}),
                      sha256_bytes(env.to_line()))


def revocation_lines(check: RevocationCheck) -> list[str]:
    """Human lines for a report: each trusted revocation, then each ignored event."""
    return ([f"key {r.fingerprint} {r.detail} (signed by "
             f"{', '.join(fp[:16] + '…' for fp in sorted(r.signers))}, event seq {r.seq})"
             for r in check.revocations] + [i.why for i in check.ignored])
