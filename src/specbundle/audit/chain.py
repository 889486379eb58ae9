"""Verify the mirror's hash-chained event log and say exactly which entry was tampered with.

Each line of ``events.jsonl`` carries ``seq`` and ``prev`` (the sha256 of the previous line's
bytes), so the writer's order is recoverable from the hash pointers alone, whatever order the
lines are found in. The check rebuilds the chain from those pointers, then names each defect:

* a line that is not JSON, or an entry whose digest differs from what its successor (or a
  signed checkpoint) recorded: **edited**;
* a hole in the ``seq`` numbers between two chain segments, or a checkpoint past the end of
  the log: **deleted** (with the missing ``seq`` range);
* lines out of chain order: **reordered** (naming both entries);
* two entries claiming the same predecessor: **forked** (an inserted or duplicated line).

Hand-written because no maintained library verifies this simple line-oriented chain; the
tail after the newest signed checkpoint can be truncated undetectably, so sign checkpoints
often (``specbundle audit checkpoint``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from specbundle.digest import sha256_bytes
from specbundle.mirror import GENESIS
from specbundle.mirror.eventlog import read_log
from specbundle.strict import loads_json
from specbundle.verify.revocations import read_events_lenient

__all__ = ["ChainEntry", "ChainIssue", "ChainReport", "IssueKind", "read_events_lenient",
           "verify_chain", "verify_log"]

IssueKind = Literal["edited", "deleted", "reordered", "forked", "malformed"]


@dataclass(frozen=True)
class ChainEntry:
    """One line of the log: where it was found, its digest and its parsed fields."""

    line: int
    digest: str
    seq: int
    prev: str
    event: Mapping[str, Any]


@dataclass(frozen=True)
class ChainIssue:
    """One defect, naming the entry (``seq``) and the line (1-based) it concerns."""

    kind: IssueKind
    seq: int | None
    line: int | None
    message: str

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"kind": self.kind, "seq": self.seq, "line": self.line, "message": self.message}


@dataclass(frozen=True)
class ChainReport:
    """Outcome of a chain check; ``ok`` only when no issue was found."""

    entries: int
    head_seq: int | None
    head_digest: str | None
    checkpoints_checked: int
    issues: tuple[ChainIssue, ...]

    @property
    def ok(self) -> bool:
        """True when the chain is intact (and matches every checkpoint given)."""
        return not self.issues

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"ok": self.ok, "entries": self.entries, "head_seq": self.head_seq,
                "head_digest": self.head_digest, "checkpoints_checked": self.checkpoints_checked,
                "issues": [i.to_json() for i in self.issues]}


def _parse(lines: list[bytes]) -> tuple[list[ChainEntry], list[int]]:
    """Entries that parse, and the line numbers of those that do not."""
    out: list[ChainEntry] = []
    bad: list[int] = []
    for i, raw in enumerate(lines, start=1):
        try:
            ev = loads_json(raw, what="event")
            seq, prev = ev["seq"], ev["prev"]
            if not isinstance(seq, int) or not isinstance(prev, str):
                raise TypeError("seq/prev have the wrong type")
        except (ValueError, KeyError, TypeError):
            bad.append(i)
            continue
        out.append(ChainEntry(i, sha256_bytes(raw), seq, prev, ev))
    return out, bad


def _segments(entries: list[ChainEntry], issues: list[ChainIssue]) -> list[list[ChainEntry]]:
    """Maximal runs linked by hash pointers, each in chain order, sorted by first ``seq``."""
    by_digest = {e.digest: e for e in entries}
    children: dict[str, list[ChainEntry]] = {}
    for e in entries:
        children.setdefault(e.prev, []).append(e)
    heads = [e for e in entries if e.prev not in by_digest]
    for kids in children.values():
        first, *others = kids  # entries are in line order, so the first found wins
        issues.extend(  # a fork's branch is reported here and left out of the chain
            ChainIssue("forked", k.seq, k.line,
                       f"entry seq {k.seq} (line {k.line}) claims the same predecessor as seq "
                       f"{first.seq} (line {first.line}): an inserted entry")
            for k in others)
    segs: list[list[ChainEntry]] = []
    for head in heads:
        seg = [head]
        while seg[-1].digest in children:
            seg.append(children[seg[-1].digest][0])
        segs.append(seg)
    return sorted(segs, key=lambda s: (s[0].seq, s[0].line))


def _between(malformed: list[int], a: ChainEntry, b: ChainEntry) -> bool:
    lo, hi = sorted((a.line, b.line))
    return any(lo < m < hi for m in malformed)


def _link_issues(
    segs: list[list[ChainEntry]], malformed: list[int], checkpoints: Mapping[int, str],
    issues: list[ChainIssue],
) -> None:
    if segs and segs[0][0].prev != GENESIS and not any(m < segs[0][0].line for m in malformed):
        first = segs[0][0]
        if first.seq > 0:
            issues.append(ChainIssue(
                "deleted", 0, None, f"entries seq 0..{first.seq - 1} are missing before seq "
                f"{first.seq} (line {first.line}): deleted from the start of the log"))
        else:
            issues.append(ChainIssue(
                "edited", first.seq, first.line,
                f"entry seq {first.seq} (line {first.line}) was edited: it does not start "
                "the chain"))
    blamed: set[int] = set()
    for i in range(1, len(segs)):
        tail, head = segs[i - 1][-1], segs[i][0]
        if _between(malformed, tail, head):
            continue  # the unreadable line in between is the edit; reported on its own
        gap = head.seq - tail.seq - 1
        if gap > 0:
            rng = str(tail.seq + 1) if gap == 1 else f"{tail.seq + 1}..{head.seq - 1}"
            issues.append(ChainIssue(
                "deleted", tail.seq + 1, None,
                f"entry seq {rng} is missing between seq {tail.seq} (line {tail.line}) and "
                f"seq {head.seq} (line {head.line}): deleted"))
            continue
        # Contiguous numbers, broken hash link: one of the two was edited. A lone entry broken
        # on both sides had its own prev field changed; otherwise the tail's bytes changed.
        nxt = segs[i + 1][0] if i + 1 < len(segs) else None
        signed = checkpoints.get(head.seq)
        far_broken = (nxt is not None and nxt.seq == head.seq + 1) or (
            nxt is None and signed is not None and signed != head.digest)
        culprit = head if len(segs[i]) == 1 and far_broken else tail
        if culprit.line in blamed:
            continue
        blamed.add(culprit.line)
        witness = (f"entry seq {nxt.seq} (line {nxt.line}) recorded as prev" if culprit is head
                   and nxt is not None else "signed checkpoint records" if culprit is head
                   else f"entry seq {head.seq} (line {head.line}) recorded as prev")
        issues.append(ChainIssue(
            "edited", culprit.seq, culprit.line,
            f"entry seq {culprit.seq} (line {culprit.line}) was edited: its digest is not the "
            f"one {witness}"))


def _order_issues(segs: list[list[ChainEntry]], issues: list[ChainIssue]) -> None:
    pos = {e.line: i for i, e in enumerate(e for seg in segs for e in seg)}
    by_line = sorted((e for seg in segs for e in seg), key=lambda e: e.line)
    for a, b in itertools.pairwise(by_line):
        if pos[b.line] < pos[a.line]:
            issues.append(ChainIssue(
                "reordered", b.seq, b.line,
                f"entry seq {b.seq} (line {b.line}) comes after seq {a.seq} (line {a.line}) "
                "but precedes it in the chain: lines were reordered"))


def verify_chain(
    lines: Iterable[bytes], checkpoints: Mapping[int, str] | None = None,
) -> ChainReport:
    """Check raw log lines (without newlines) and ``checkpoints`` (seq -> entry digest)."""
    raw = [ln for ln in lines if ln.strip()]
    entries, malformed = _parse(raw)
    issues: list[ChainIssue] = []
    for line in malformed:
        prior = [g for g in entries if g.line < line]
        guess = prior[-1].seq + 1 if prior else 0
        issues.append(ChainIssue("malformed", guess, line,
                                 f"line {line} (seq {guess}?) is not a log entry: edited"))
    seen: dict[str, ChainEntry] = {}
    good: list[ChainEntry] = []
    for e in entries:
        if e.digest in seen:
            issues.append(ChainIssue(
                "forked", e.seq, e.line, f"entry seq {e.seq} is duplicated at line {e.line} "
                f"(first at line {seen[e.digest].line})"))
        else:
            seen[e.digest] = e
            good.append(e)
    segs = _segments(good, issues)
    _link_issues(segs, malformed, checkpoints or {}, issues)
    _order_issues(segs, issues)
    by_seq: dict[int, ChainEntry] = {}
    for seg in segs:
        for e in seg:
            by_seq.setdefault(e.seq, e)
    last = max(by_seq) if by_seq else -1
    last_line = by_seq[last].line if by_seq else 0
    trailing_bad = sum(1 for m in malformed if m > last_line)
    flagged = {i.line for i in issues if i.line is not None}
    for seq, digest in sorted((checkpoints or {}).items()):
        found = by_seq.get(seq)
        if found is None and seq > last + trailing_bad:
            issues.append(ChainIssue(
                "deleted", last + 1, None, f"entries seq {last + 1}..{seq} are missing: a signed "
                f"checkpoint covers seq {seq} but the log ends at seq {last} (truncated)"))
        elif found is not None and found.digest != digest and found.line not in flagged:
            issues.append(ChainIssue(
                "edited", seq, found.line, f"entry seq {seq} (line {found.line}) was edited: its "
                "digest differs from the signed checkpoint"))
    head = by_seq.get(last)
    return ChainReport(len(raw), last if head else None, head.digest if head else None,
                       len(checkpoints or {}), tuple(sorted(issues, key=_issue_key)))


def _issue_key(i: ChainIssue) -> tuple[int, int]:
    return (i.seq if i.seq is not None else -1, i.line or 0)


def verify_log(path: Path, checkpoints: Mapping[int, str] | None = None) -> ChainReport:
    """Check the event log file at ``path`` (an absent log is an empty, intact chain)."""
    return verify_chain(read_log(path).splitlines(), checkpoints)
