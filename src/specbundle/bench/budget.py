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

from specbundle.bench import stats
from specbundle.bench.report import Stopping, StopReason
from specbundle.spec import BundleSpec

__all__ = ["LAUNCH_ALLOWANCE_S", "Mark", "OutOfTime", "PhaseClock", "Tables",
           "default_time_budget", "marks", "rollback", "stopping"]

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


def stopping(plan: stats.LookPlan, ci: stats.RatioCI | None, *, target: float,
             reason: StopReason, rounds: int, budget: float, elapsed: float,
             notes: list[str], why: str = "") -> Stopping:
    """Why and where the rounds ended, with a note for each way of ending early.

    A run cut short (budget, interrupt) whose CI is already futile says so: futility is
    non-binding, so the evidence at any stopping time may show it.
    """
    side = stats.ratio_side(ci, target)
    if side == "inconclusive" and ci is not None and reason in (
            "time_budget", "interrupted") and plan.futile(ci, target):
        reason = "futile"
    if side == "above" and reason in ("time_budget", "interrupted"):
        # Cut short between the planned looks: a CI that clears the threshold here is still
        # not a pass (the budget or the operator ended the run, not the rule): inconclusive.
        side = "inconclusive"
        notes.append(f"the P95 CI cleared {target:.2f} after {rounds} rounds, but a run cut "
                     "short before the rule's look is never a pass: rerun with a larger budget")
    if reason == "futile":
        notes.append(f"futility at P95 after {rounds} rounds: even the top of the CI could not "
                     f"clear {target:.2f} by the last look ({plan.last} rounds) at this noise: "
                     "rejected")
    elif reason in ("time_budget", "interrupted"):
        what = {"time_budget": f"time budget of {budget:.0f} s spent"}.get(reason, reason)
        notes.append(f"{what} after {rounds} whole rounds: the evidence so far, never a pass")
    need = stats.rounds_to_resolve(ci, target) if ci and side == "inconclusive" else None
    if side == "inconclusive" and reason not in ("futile", "settled"):
        notes.append(f"inconclusive at P95 after {rounds} rounds ({reason.replace('_', ' ')})"
                     + (f": about {need} rounds per arm would resolve it at this noise" if need
                        else ": the ratio sits on the threshold"))
    return Stopping(
        rule="sequential" if plan.sequential else "fixed", outcome=side, reason=reason,
        rounds=rounds, min_rounds=plan.rounds, max_rounds=plan.max_rounds, threshold=target,
        time_budget_s=budget, elapsed_s=elapsed, rounds_to_resolve=need, looks=plan.looks,
        per_look_confidence=plan.per_look_confidence, why=why if reason == "settled" else "")
