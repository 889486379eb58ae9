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

from specbundle.attest import Envelope, PublicKey, check_statement, parse_time
from specbundle.attest.models import RevocationV1
from specbundle.digest import is_sha256, sha256_bytes
from specbundle.errors import VerificationError
from specbundle.mirror import Mirror
from specbundle.mirror.eventlog import read_chain, read_log
from specbundle.strict import loads_json
from specbundle.verify import floors
from specbundle.verify.policy import TrustPolicy

__all__ = [
    "REVOCATION_EVENT",
    "IgnoredRevocation",
    "LogState",
    "Revocation",
    "RevocationCheck",
    "check_revocations",
    "log_state",
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
    p = st.typed_as(RevocationV1)
    fp, why, time = p.fingerprint, p.reason, p.time_created
    if st.digests("sha256") != {fp} or not is_sha256(fp):
        raise VerificationError("the subject and the predicate name different fingerprints")
    if not why or parse_time(time) is None:
        raise VerificationError("the reason or the time is missing")
    return fp, why, time, checked.signers, env, checked.check.problems


def check_revocations(
    events: Iterable[Mapping[str, Any]], trusted: Sequence[PublicKey],
    policy: TrustPolicy | None = None,
) -> RevocationCheck:
    """Sort the ``revocation`` events of a log into trusted and ignored (never raises).

    With ``policy``, a revocation also needs a signer that may revoke that key
    (:meth:`TrustPolicy.may_revoke`: itself, a designated revoker or a same-scope key).
    """
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
        if policy is not None and not policy.may_revoke(signers, fp):
            skip(f"signed by key(s) {', '.join(x[:16] + '…' for x in sorted(signers))}, which "
                 f"may not revoke {fp[:16]}… (not a designated revoker, narrower scope); "
                 "ignored")
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


def revoked_keys(mirror: Mirror, trusted_keys: Iterable[PublicKey],
                 policy: TrustPolicy | None = None) -> Mapping[str, Revocation]:
    """Fingerprint -> earliest trusted revocation, from the mirror's event log (with
    ``policy``: only revocations a signer may make, as the verifier counts them)."""
    return check_revocations(read_events_lenient(mirror.events_path), list(trusted_keys),
                             policy).revoked


def read_events_lenient(path: Path) -> list[dict[str, Any]]:
    """The log's entries that parse strictly, in file order (a tampered log is still shown)."""
    out: list[dict[str, Any]] = []
    for raw in read_log(path).splitlines():
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
    return log_state(mirror, policy, extra).revoked


@dataclass(frozen=True)
class LogState:
    """What a verifier read from a mirror's log: every revocation in force and the log head."""

    revoked: dict[str, str]
    #: revocations the log itself carries (trusted, already recorded in the trust state)
    from_log: dict[str, str]
    head: tuple[int, str] | None


def log_state(mirror: Mirror, policy: TrustPolicy,
              extra: Mapping[str, str] | None = None) -> LogState:
    """Revocations (policy, operator's trust state, ``extra`` and the log) and the log head.

    The log is read strictly along its hash chain and must reach the head the trust state
    recorded for this mirror: deleting a revocation line, or the tail with it, is an error.
    Its head and trusted revocations are then recorded in the trust state.

    Raises:
        CorruptMirror: the chain is broken (a line deleted, edited or reordered).
        VerificationError: the log is shorter than, or differs from, the recorded head.
    """
    events, head = read_chain(mirror.events_path)
    floors.check_log(policy, mirror, events, head)
    from_log = {fp: r.detail
                for fp, r in check_revocations(events, policy.public_keys, policy).revoked.items()}
    # recorded now, whatever the verification finds: a revocation (and the log that carried
    # it) must outlive the lines a mirror writer can delete
    floors.raise_floors(policy, mirror, head=head, revoked=from_log)
    out = dict(extra or {})
    out.update(policy.revoked)
    for fp, why in (floors.recorded_revocations(policy) | from_log).items():
        out.setdefault(fp, why)
    return LogState(out, from_log, head)
