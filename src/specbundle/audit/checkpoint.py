"""Signed checkpoints of the event log: the part of the chain a deleted tail cannot escape.

A checkpoint is an in-toto statement (predicate ``log-checkpoint/v1``) whose subject is the
digest of the log entry at ``seq``, signed into a DSSE envelope and appended to
``audit/checkpoints.jsonl`` in the mirror; a ``checkpoint`` event then records it in the log
itself. Verification trusts only checkpoints signed by a key of the current trust policy, so
a forged or revoked checkpoint cannot vouch for a rewritten log; the same goes for a
checkpoint signed by a key that a trusted ``revocation`` event of the log revoked.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbundle._fsutil import open_dir, open_file_at
from specbundle.attest import (
    LOG_CHECKPOINT_V1,
    Envelope,
    PublicKey,
    SigningKey,
    Statement,
    Subject,
    check_statement,
    sign_statement,
)
from specbundle.attest.models import LogCheckpointV1, TransferIndexV1
from specbundle.audit.chain import ChainReport, verify_log
from specbundle.audit.revocation import RevocationCheck, check_revocations
from specbundle.digest import is_sha256, sha256_bytes
from specbundle.errors import UsageError, VerificationError
from specbundle.mirror import Mirror, utc_now
from specbundle.mirror.eventlog import MAX_LOG_BYTES
from specbundle.strict import MalformedDocument, loads_json, read_mirror_file
from specbundle.transfer.importer import imported_log_seq
from specbundle.verify.policy import TrustPolicy
from specbundle.verify.revocations import read_events_lenient

__all__ = [
    "CHECKPOINTS_FILE",
    "LOG_CHECKPOINT_V1",
    "Checkpoint",
    "LogVerification",
    "log_floor",
    "read_checkpoints",
    "verify_events",
    "write_checkpoint",
]

CHECKPOINTS_FILE = "audit/checkpoints.jsonl"


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint as read back: what it covers, who signed it, whether that is trusted."""

    line: int
    seq: int
    digest: str
    time: str
    signers: frozenset[str]
    problems: tuple[str, ...]
    #: sha256 of the previous checkpoint's envelope line (None: the first, or a v1 checkpoint).
    previous: str | None = None
    line_sha256: str = ""

    @property
    def trusted(self) -> bool:
        """Signed by at least one trusted key."""
        return bool(self.signers)

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"line": self.line, "seq": self.seq, "digest": self.digest, "time": self.time,
                "signers": sorted(self.signers), "trusted": self.trusted,
                "problems": list(self.problems)}


@dataclass(frozen=True)
class LogVerification:
    """The chain report, every checkpoint and whether it could be used, and the revocations."""

    chain: ChainReport
    checkpoints: tuple[Checkpoint, ...]
    problems: tuple[str, ...]
    revocations: RevocationCheck = field(default_factory=RevocationCheck)

    @property
    def ok(self) -> bool:
        """Chain intact and every checkpoint trusted and consistent."""
        return self.chain.ok and not self.problems

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"ok": self.ok, "chain": self.chain.to_json(),
                "checkpoints": [c.to_json() for c in self.checkpoints],
                "problems": list(self.problems), **self.revocations.to_json()}


def _path(mirror: Mirror) -> Path:
    return mirror.root / CHECKPOINTS_FILE


def read_checkpoints(mirror: Mirror, trusted: Iterable[PublicKey]) -> tuple[Checkpoint, ...]:
    """Every checkpoint in the file, each checked against ``trusted`` keys (never raises)."""
    keys = list(trusted)
    try:
        data = read_mirror_file(_path(mirror), max_bytes=MAX_LOG_BYTES)
    except FileNotFoundError:
        return ()
    except (MalformedDocument, OSError) as err:
        return (Checkpoint(0, -1, "", "", frozenset(), (f"{CHECKPOINTS_FILE}: {err}",)),)
    out: list[Checkpoint] = []
    for no, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            checked = check_statement(Envelope.from_json(loads_json(raw, what="checkpoint")),
                                      keys)
            st = checked.statement
            pred = st.typed_as(LogCheckpointV1)
            seq, digest = pred.seq, st.subjects[0].digest["sha256"]
            if not is_sha256(digest):
                raise VerificationError("malformed digest")
        except (ValueError, KeyError, IndexError, VerificationError) as err:
            out.append(Checkpoint(no, -1, "", "", frozenset(),
                                  (f"{CHECKPOINTS_FILE} line {no} is not a checkpoint: {err}",)))
            continue
        problems = tuple(f"checkpoint line {no} (seq {seq}): {p}" for p in checked.check.problems)
        if not checked.signers:
            problems = (*problems, f"checkpoint line {no} (seq {seq}) is signed by no key of "
                        "the trust policy (revoked or unknown); not used")
        out.append(Checkpoint(no, seq, digest, pred.time_created, checked.signers, problems,
                              pred.previous, sha256_bytes(raw)))
    return tuple(out)


def _chain_problems(cps: Sequence[Checkpoint]) -> list[str]:
    """Each checkpoint names its predecessor: a deleted or reordered one is seen."""
    out: list[str] = []
    for before, c in itertools.pairwise(cps):
        if c.trusted and c.previous is not None and c.previous != before.line_sha256:
            out.append(f"checkpoint line {c.line} (seq {c.seq}) does not chain to line "
                       f"{before.line}: a checkpoint was deleted, reordered or replaced")
        if c.trusted and before.trusted and c.seq < before.seq:
            out.append(f"checkpoint line {c.line} covers seq {c.seq}, below line "
                       f"{before.line}'s seq {before.seq}")
    return out


def log_floor(mirror: Mirror, trusted: Sequence[PublicKey]) -> dict[int, str]:
    """seq -> entry digest that signed transfer indexes this mirror exported saw.

    An exported index travels to the other side, out of reach of whoever later truncates
    this log; its copy here (``bundles/*/export/index.json``) names the log head at export.
    """
    out: dict[int, str] = {}
    for p in sorted(mirror.root.glob("bundles/*/export/index.json")):
        try:
            cs = check_statement(Envelope.from_json(loads_json(read_mirror_file(p))), trusted)
            head = cs.statement.typed_as(TransferIndexV1).log_head if cs.signers else None
        except (ValueError, OSError, VerificationError):
            continue
        if head is not None and is_sha256(head.digest):
            out[head.seq] = head.digest
    return out


def verify_events(mirror: Mirror, trusted: Sequence[PublicKey],
                  floor: Mapping[int, str] | None = None,
                  policy: TrustPolicy | None = None) -> LogVerification:
    """Verify the event log against itself, every trusted, unrevoked checkpoint, the head the
    operator's trust state recorded (``floor``: seq -> digest) and the seq imports recorded.
    With ``policy``, revocations count as the verifier counts them (who may revoke whom).
    """
    cps = read_checkpoints(mirror, trusted)
    revocations = check_revocations(read_events_lenient(mirror.events_path), trusted, policy)
    revoked = revocations.revoked
    usable: dict[int, str] = {}
    if trusted:
        problems = [p for c in cps for p in c.problems]
    else:  # one clear message instead of one "untrusted" per checkpoint
        problems = [f"{len(cps)} signed checkpoint(s) could not be verified: no trust policy "
                    "given (--trust)"] if cps else []
    for c in cps:
        if not c.trusted:
            continue
        if gone := sorted(c.signers & revoked.keys()):
            problems += [f"checkpoint line {c.line} (seq {c.seq}) is signed by key {fp[:16]}…, "
                         f"{revoked[fp].detail}; not used" for fp in gone]
            continue
        if usable.setdefault(c.seq, c.digest) != c.digest:
            problems.append(f"two trusted checkpoints disagree about seq {c.seq}")
    problems += _chain_problems(cps)
    for seq, digest in log_floor(mirror, trusted).items():
        if usable.setdefault(seq, digest) != digest:
            problems.append(f"a signed transfer index and a checkpoint disagree about seq {seq}")
    for seq, digest in (floor or {}).items():
        if usable.setdefault(seq, digest) != digest:
            problems.append(f"the trust state's recorded head and a checkpoint disagree about "
                            f"seq {seq}: the log was rewritten")
    chain = verify_log(mirror.events_path, usable)
    seen = imported_log_seq(mirror)
    if seen > (chain.head_seq if chain.head_seq is not None else -1):
        problems.append(f"the log ends at seq {chain.head_seq}, but an import recorded seq "
                        f"{seen}: its tail was cut")
    return LogVerification(chain, cps, tuple(problems), revocations)


def write_checkpoint(mirror: Mirror, keys: Sequence[SigningKey]) -> Checkpoint:
    """Sign the current head of the log; refuses to bless a chain that does not verify."""
    if not keys:
        raise UsageError("no signing key given", hint="pass --key KEY.pem")
    with mirror.lock():
        check = verify_events(mirror, [k.public for k in keys])
        if gone := [k for k in keys if k.fingerprint in check.revocations.revoked]:
            raise VerificationError(
                f"refusing to checkpoint with key {gone[0].fingerprint[:16]}…: "
                + check.revocations.revoked[gone[0].fingerprint].detail)
        if not check.chain.ok:
            raise VerificationError(
                "refusing to checkpoint a broken event log: "
                + "; ".join(i.message for i in check.chain.issues))
        if check.chain.head_seq is None or check.chain.head_digest is None:
            raise UsageError("the event log is empty; nothing to checkpoint")
        seq, digest, now = check.chain.head_seq, check.chain.head_digest, utc_now()
        previous = check.checkpoints[-1].line_sha256 if check.checkpoints else None
        st = Statement.of(
            [Subject(f"events.jsonl#{seq}", {"sha256": digest})],
            LogCheckpointV1(seq=seq, entries=check.chain.entries, time_created=now,
                            mirror=mirror.root.name, previous=previous))
        env = sign_statement(st, keys)
        path = _path(mirror)
        with open_dir(mirror.root, Path(CHECKPOINTS_FILE).parent.as_posix()) as dfd:
            fd = open_file_at(dfd, path.name, path.parent)  # a link, FIFO or folder: refused
        try:
            os.write(fd, env.to_line() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            line = read_mirror_file(path, max_bytes=MAX_LOG_BYTES).count(b"\n")
        except MalformedDocument as err:
            raise VerificationError(f"{path}: {err}") from None
        mirror.append_event("checkpoint", None, {"seq": seq, "digest": digest,
                                                 "envelope_sha256": sha256_bytes(env.to_line()),
                                                 "signers": [k.fingerprint for k in keys]})
    return Checkpoint(line, seq, digest, now, frozenset(k.fingerprint for k in keys), ())
