"""Bounded benchmark time: the default budget, whole-launch rollback, where the time goes.

Pure helpers of :mod:`specbundle.bench.runner` (no I/O): the runner checks the budget before
every level and every launch, drops the launch a budget or an interrupt cut short, and
accounts each phase of its rounds (server launches, warm-ups, measured levels, probes), so
a report says where a round's time went and what repeats without adding information.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from specbundle.spec import BundleSpec

__all__ = ["LAUNCH_ALLOWANCE_S", "Mark", "OutOfTime", "PhaseClock", "default_time_budget",
           "marks", "rollback"]

#: Seconds allowed per arm launch of the spec's minimum design in the default time budget.
LAUNCH_ALLOWANCE_S = 120.0


def default_time_budget(spec: BundleSpec, *, arms_per_round: int) -> float:
    """The time budget when neither the option nor ``bench.time_budget_s`` sets one.

    ``LAUNCH_ALLOWANCE_S`` × ``bench.rounds`` × arm launches per round (base and spec, plus
    the draft alone when it needs its own launch): 120 s × 4 × 2 = 16 min for the default
    four rounds on llama-server (the draft runs beside the baseline), 24 min with a separate
    draft launch. The minimum rounds fit with room for the sequential extension on a quiet
    box; under load the budget, not the rule, ends the run, inconclusive and never a pass.
    """
    return LAUNCH_ALLOWANCE_S * spec.bench.rounds * arms_per_round


class OutOfTime(Exception):
    """The time budget ran out before the next level or launch could start."""


class Tables(Protocol):
    """What a rollback cuts: an arm's per-level lists (:class:`runner.ArmData`)."""

    @property
    def runs(self) -> dict[int, list[Any]]: ...
    @property
    def deltas(self) -> dict[int, list[Any]]: ...
    @property
    def verify(self) -> dict[int, list[Any]]: ...


@dataclass(frozen=True)
class Mark:
    """Lengths of every arm's lists before an arm launch, to drop that launch if cut short."""

    order: int
    lengths: tuple[dict[int, tuple[int, int, int]], ...]  # per arm: level -> (runs, deltas, v)


def marks(arms: Sequence[Tables], order: int = 0) -> Mark:
    """Where every arm stands now (``order``: launches in the round order so far)."""
    return Mark(order, tuple(
        {c: (len(a.runs.get(c, [])), len(a.deltas.get(c, [])), len(a.verify.get(c, [])))
         for c in {*a.runs, *a.deltas, *a.verify}} for a in arms))


def _cut(table: dict[int, list[Any]], before: dict[int, tuple[int, int, int]], i: int) -> None:
    for c in list(table):
        n = before.get(c, (0, 0, 0))[i]
        if n:
            del table[c][n:]
        else:
            del table[c]


def rollback(arms: Sequence[Tables], mark: Mark) -> None:
    """Cut every arm back to ``mark``; levels first measured after it disappear."""
    for a, before in zip(arms, mark.lengths, strict=True):
        _cut(a.runs, before, 0)
        _cut(a.deltas, before, 1)
        _cut(a.verify, before, 2)


class PhaseClock:
    """Seconds spent per phase of the rounds: ``launch:<arm>`` (start and stop of a server),
    ``warmup``, ``measure:<arm>``, ``verify_probe``, ``draft_probe``."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Add the time the block takes to ``phase``."""
        t = time.monotonic()
        try:
            yield
        finally:
            self.phases[phase] = self.phases.get(phase, 0.0) + time.monotonic() - t

    @contextlib.contextmanager
    def up(self, ctx: AbstractContextManager[str], arm: str) -> Iterator[str]:
        """A server context whose start and stop count as ``launch:<arm>``."""
        with self.timed(f"launch:{arm}"):
            url = ctx.__enter__()
        try:
            yield url
        except BaseException as err:
            if not ctx.__exit__(type(err), err, err.__traceback__):
                raise
        else:
            with self.timed(f"launch:{arm}"):
                ctx.__exit__(None, None, None)

    def rounded(self) -> dict[str, float]:
        """The phases, sorted, to the millisecond (for the report's ``server`` block)."""
        return {k: round(v, 3) for k, v in sorted(self.phases.items())}
