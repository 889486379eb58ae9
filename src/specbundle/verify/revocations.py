"""Key revocations honoured by every stage: the trust policy's list and the event log's.

A key of the trust policy signs an in-toto statement (predicate ``revocation/v1``: subject =
the revoked fingerprint, predicate = reason and ``timeCreated``); ``specbundle keys revoke``
records that DSSE envelope in a ``revocation`` event of the hash-chained log (see
:mod:`specbundle.audit.revocation`). Only revocations whose envelope verifies under a key of
the current policy count; anything else is reported as *ignored*, never trusted. A key may
revoke itself; a revocation signed by a key revoked later still stands, because a revocation
can only take trust away. Every signature of a revoked key is refused, whatever its date: a
stolen key can backdate (fail closed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbundle.attest import REVOCATION_V1, Envelope, PublicKey, check_statement, parse_time
from specbundle.digest import is_sha256, sha256_bytes
from specbundle.errors import VerificationError
from specbundle.mirror import Mirror
from specbundle.strict import loads_json
from specbundle.verify.policy import TrustPolicy

__all__ = [
    "REVOCATION_EVENT",
    "IgnoredRevocation",
    "Revocation",
    "RevocationCheck",
    "check_revocations",
    "read_events_lenient",
    "read_revocations",
    "revoked_fingerprints",
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


def read_events_lenient(path: Path) -> list[dict[str, Any]]:
    """The log's entries that parse strictly, in file order (a tampered log is still shown)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for raw in data.splitlines():
        try:
            ev = loads_json(raw, what="event")
        except ValueError:
            continue
        if isinstance(ev, dict):
            out.append(ev)
    return out


def revoked_fingerprints(mirror: Mirror, policy: TrustPolicy,
                         extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Fingerprint -> why, from the policy's ``revoked:``, the mirror's log and ``extra``.

    ``extra`` carries revocations a signed transfer index brought (import). A revocation only
    takes trust away, so every source counts and none can restore a key.
    """
    out = dict(extra or {})
    out.update(policy.revoked)
    for fp, r in revoked_keys(mirror, policy.public_keys).items():
        out.setdefault(fp, r.detail)
    return out
