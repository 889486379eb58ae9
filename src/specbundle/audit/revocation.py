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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specbundle.attest import (
    REVOCATION_V1,
    Envelope,
    PublicKey,
    SigningKey,
    Statement,
    Subject,
    check_statement,
    parse_time,
    sign_statement,
)
from specbundle.audit.chain import read_events_lenient
from specbundle.digest import is_sha256, sha256_bytes
from specbundle.errors import UsageError, VerificationError
from specbundle.mirror import Mirror, utc_now

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

#: The event type in ``events.jsonl``.
REVOCATION_EVENT = "revocation"


@dataclass(frozen=True)
class Revocation:
    """One trusted revocation: which key, why, when, and who signed it."""

    seq: int | None
    fingerprint: str
    reason: str
    time: str
    signers: frozenset[str]
    envelope_sha256: str

    @property
    def detail(self) -> str:
        """``revoked at <time>: <reason>`` (the audit's wording for every affected link)."""
        return f"revoked at {self.time}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"seq": self.seq, "fingerprint": self.fingerprint, "reason": self.reason,
                "time": self.time, "signers": sorted(self.signers),
                "envelope_sha256": self.envelope_sha256}


@dataclass(frozen=True)
class IgnoredRevocation:
    """A revocation event that does not count, and why (``fingerprint`` is the unsigned claim)."""

    seq: int | None
    fingerprint: str | None
    why: str

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"seq": self.seq, "fingerprint": self.fingerprint, "why": self.why}


@dataclass(frozen=True)
class RevocationCheck:
    """Every revocation event of the log, split into trusted and ignored."""

    revocations: tuple[Revocation, ...] = ()
    ignored: tuple[IgnoredRevocation, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"revocations": [r.to_json() for r in self.revocations],
                "ignored_revocations": [i.to_json() for i in self.ignored]}

    @property
    def revoked(self) -> Mapping[str, Revocation]:
        """Fingerprint -> its earliest trusted revocation."""
        out: dict[str, Revocation] = {}
        for r in sorted(self.revocations, key=lambda r: r.time):
            out.setdefault(r.fingerprint, r)
        return out


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
    st = Statement.build([Subject(f"key:{fp}", {"sha256": fp})], REVOCATION_V1,
                         {"fingerprint": fp, "reason": why, "timeCreated": now,
                          "mirror": mirror.root.name})
    env = sign_statement(st, [signer])
    with mirror.lock():
        entry = mirror.append_event(REVOCATION_EVENT, None, {
            "fingerprint": fp, "reason": why, "time": now, "signers": [signer.fingerprint],
            "envelope": env.to_json()})
    return Revocation(int(entry["seq"]), fp, why, now, frozenset({signer.fingerprint}),
                      sha256_bytes(env.to_line()))


def _signed(raw: object, trusted: Sequence[PublicKey]) -> tuple[str, str, str, frozenset[str],
                                                                   Envelope, tuple[str, ...]]:
    """Open one envelope: (fingerprint, reason, time, trusted signers, envelope, problems)."""
    env = Envelope.from_json(raw)
    checked = check_statement(env, trusted)
    st = checked.statement
    if st.predicate_type != REVOCATION_V1:
        raise VerificationError(f"predicate type {st.predicate_type!r}, not {REVOCATION_V1}")
    digests = st.digests("sha256")
    fp, why = st.predicate.get("fingerprint"), st.predicate.get("reason")
    time = st.predicate.get("timeCreated")
    if not isinstance(fp, str) or digests != {fp} or not is_sha256(fp):
        raise VerificationError("the subject and the predicate name different fingerprints")
    if not isinstance(why, str) or not why or parse_time(time) is None:
        raise VerificationError("the reason or the time is missing")
    return fp, why, str(time), checked.signers, env, checked.check.problems


def check_revocations(
    events: Iterable[Mapping[str, Any]], trusted: Sequence[PublicKey],
) -> RevocationCheck:
    """Sort the ``revocation`` events of a log into trusted and ignored (never raises)."""
    good: list[Revocation] = []
    ignored: list[IgnoredRevocation] = []
    for ev in events:
        if ev.get("type") != REVOCATION_EVENT:
            continue
        seq, data = ev.get("seq"), ev.get("data")
        seq = seq if isinstance(seq, int) else None
        data = data if isinstance(data, dict) else {}
        claim = data.get("fingerprint") if isinstance(data.get("fingerprint"), str) else None

        def skip(why: str, seq: int | None = seq, claim: str | None = claim) -> None:
            ignored.append(IgnoredRevocation(seq, claim, f"revocation event seq {seq}: {why}"))

        if "envelope" not in data:
            skip("unsigned (no DSSE envelope); ignored")
            continue
        if not trusted:
            skip("cannot be verified without a trust policy (--trust); ignored")
            continue
        try:
            fp, why, time, signers, env, problems = _signed(data["envelope"], trusted)
        except VerificationError as err:
            skip(f"not a valid signed revocation ({err.message}); ignored")
            continue
        if not signers:
            skip("signed by no key of the trust policy (" + "; ".join(problems)
                 + "); ignored")
            continue
        if claim is not None and claim != fp:
            skip(f"its unsigned fields claim key {claim}, but the signed statement revokes "
                 f"{fp}; only the signed revocation counts")
        good.append(Revocation(seq, fp, why, time, signers, sha256_bytes(env.to_line())))
    return RevocationCheck(tuple(good), tuple(ignored))


def read_revocations(mirror: Mirror, trusted_keys: Iterable[PublicKey]) -> tuple[Revocation, ...]:
    """The mirror's revocations whose envelope verifies under one of ``trusted_keys``."""
    events = read_events_lenient(mirror.events_path)
    return check_revocations(events, list(trusted_keys)).revocations


def revoked_keys(mirror: Mirror, trusted_keys: Iterable[PublicKey]) -> Mapping[str, Revocation]:
    """Fingerprint -> earliest trusted revocation, from the mirror's event log."""
    return check_revocations(read_events_lenient(mirror.events_path), list(trusted_keys)).revoked


def revocation_lines(check: RevocationCheck) -> list[str]:
    """Human lines for a report: each trusted revocation, then each ignored event."""
    return ([f"key {r.fingerprint} {r.detail} (signed by "
             f"{', '.join(fp[:16] + '…' for fp in sorted(r.signers))}, event seq {r.seq})"
             for r in check.revocations] + [i.why for i in check.ignored])
