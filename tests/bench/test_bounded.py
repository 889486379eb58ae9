"""Bounded benchmarks: futility, the time budget, interrupts and progress (issue 24).

The rule's stopping boundaries are pure (:class:`stats.LookPlan`); the runner's loop is driven
with synthetic throughputs (no server) through the same stubs as test_sequential.py.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from specbundle.admit import evaluate
from specbundle.bench import stats
from specbundle.bench.budget import default_time_budget, stopping
from specbundle.bench.report import BenchReport
from specbundle.bench.runner import ArmData, _Runner
from specbundle.bench.verdict import gate_verdict
from specbundle.spec import AdmissionThresholds
from tests.bench.test_sequential import _report, _runner, _spec, _SyntheticArms

NOMINAL = 0.90


def test_futility_stops_a_pair_that_cannot_reach_the_threshold() -> None:
    plan = stats.LookPlan(4, 12, NOMINAL)
    near_one = ([100.0, 104.0, 97.0, 101.0], [99.0, 103.0, 98.0, 102.0])  # ratio ≈ 1, tight
    look = plan.look(4, *near_one, 1.05)  # CI 0.94-1.06 holds 1.05, but cannot clear it
    assert look is not None and look.side == "inconclusive" and look.stop == "futile"
    # the same data against a threshold it may still reach goes on
    assert (going := plan.look(4, *near_one, 1.0)) is not None and going.stop is None
    # off: the former rule, and a fixed design never stops for futility (it has no later look)
    off = stats.LookPlan(4, 12, NOMINAL, futility=False).look(4, *near_one, 1.05)
    assert off is not None and off.stop is None
    fixed = stats.LookPlan(4, 4, NOMINAL).look(4, *near_one, 1.05)
    assert fixed is not None and fixed.stop == "fixed"


def _admissions(plan: stats.LookPlan, ratio: float, sims: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    admitted = rounds = 0
    for _ in range(sims):
        base = (100.0 * np.exp(rng.normal(0.0, 0.2, plan.last))).tolist()
        spec = (100.0 * ratio * np.exp(rng.normal(0.0, 0.2, plan.last))).tolist()
        look = stats.replay_looks(plan, base, spec, 1.05)
        assert look is not None
        admitted += look.side == "above"
        rounds += look.rounds
    return admitted / sims, rounds / sims


def test_futility_keeps_the_false_admission_bound_and_saves_rounds() -> None:
    """Non-binding futility: on the threshold it admits no more often (same draws), and a
    pair that cannot pay (true ratio 1.0 against 1.05) is decided in fewer rounds."""
    with_f, without = stats.LookPlan(4, 12, NOMINAL), stats.LookPlan(4, 12, NOMINAL,
                                                                      futility=False)
    fa_with, _ = _admissions(with_f, 1.05, 600, 3)
    fa_without, _ = _admissions(without, 1.05, 600, 3)
    assert fa_with <= fa_without <= 0.05 + 3 * (0.05 * 0.95 / 600) ** 0.5
    _, r_with = _admissions(with_f, 1.0, 300, 4)
    _, r_without = _admissions(without, 1.0, 300, 4)
    assert r_with < 0.8 * r_without, (r_with, r_without)


def test_the_default_budget_is_derived_from_the_spec() -> None:
    assert default_time_budget(_spec(4), arms_per_round=2) == 960.0
    assert default_time_budget(_spec(2), arms_per_round=3) == 720.0


def _flat(arm: str, r: int) -> float:
    return (100.0, 110.0)[(r + (arm == "spec")) % 2]


Hook = Callable[[str, Callable[[], None]], None]  # (arm, the launch's measuring) -> None


class _HookedArms(_SyntheticArms):
    """The synthetic driver with what happens around a launch's measuring (time passing, an
    interrupt, progress ticks) in ``hook``, handed to the runner through its ``arms`` seam."""

    def __init__(self, runner: _Runner, hook: Hook) -> None:
        assert isinstance(runner.arms, _SyntheticArms)
        super().__init__(runner.arms.throughput)
        self.levels, self.hook = runner.arms.levels, hook

    def measure(self, arm: str, url: str, data: ArmData, reqs: Any, *,
                metrics: bool = True, levels: tuple[int, ...] | None = None) -> None:
        self.hook(arm, lambda: super(_HookedArms, self).measure(
            arm, url, data, reqs, metrics=metrics, levels=levels))


def _hooked(runner: _Runner, hook: Hook) -> _Runner:
    runner.arms = _HookedArms(runner, hook)
    return runner


def test_the_time_budget_ends_inside_the_minimum_rounds_with_whole_launches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget is checked before every level, so it binds before the first look too; the
    launch it cut is dropped and the report says inconclusive, never a pass."""
    seen: list[int] = []
    runner = _runner(_spec(4), _flat, monkeypatch, seen, time_budget_s=1.0)

    def slow(arm: str, measure: Callable[[], None]) -> None:
        runner.t0 -= 0.21  # each launch "takes" 0.21 s of the budget
        measure()
        runner._check_time()  # as the real measure does before its next level

    report = _report(_hooked(runner, slow))
    st = report.stopping
    assert st is not None and seen == []  # stopped before the first look at 4 rounds
    assert (st.reason, st.outcome, st.time_budget_s) == ("time_budget", "inconclusive", 1.0)
    p95 = report.at_p95
    assert p95 is not None
    # 5 launches started: the 5th was cut before its next level, and is dropped whole
    assert report.settings.round_order == ("base", "spec", "spec", "base") and st.rounds == 2
    assert len(p95.base.round_output_throughput) == len(p95.spec.round_output_throughput) == 2
    assert all(len(lv.base.round_output_throughput) == len(p95.base.round_output_throughput)
               for lv in report.levels)
    assert any("time budget of 1 s spent" in n for n in report.notes)
    gate = evaluate(report, runner.spec.admission)
    assert not gate.admitted and gate.inconclusive
    v = gate_verdict(gate.criteria, report, admitted=False, inconclusive=True)
    assert v.outcome == "inconclusive" and v.headline.startswith("inconclusive, not admitted")
    assert BenchReport.from_json(report.to_json()) == report


def test_an_interrupt_writes_the_partial_report(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    runner = _runner(_spec(4), _flat, monkeypatch, seen)
    calls = [0]

    def interrupted(arm: str, measure: Callable[[], None]) -> None:
        calls[0] += 1
        if calls[0] == 5:
            raise KeyboardInterrupt
        measure()

    report = _report(_hooked(runner, interrupted))
    st = report.stopping
    assert st is not None and (st.reason, st.rounds) == ("interrupted", 2)
    assert report.settings.round_order == ("base", "spec", "spec", "base")
    assert evaluate(report, runner.spec.admission).inconclusive


def test_futility_at_a_look_rejects_and_is_not_inconclusive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    spec = _spec(4).model_copy(update={"admission": replace_threshold(1.03)})
    report = _report(_runner(spec, lambda arm, r: 100.0 + 3 * ((r + (arm == "spec")) % 2),
                             monkeypatch, seen))
    st = report.stopping
    # a pure launch-order effect (the second launch of each round 3 % faster): the rule's
    # paired CI sees it in every round's ratio, so futility comes at the second look
    assert st is not None and seen == [4, 6] and st.reason == "futile"
    gate = evaluate(report, spec.admission)
    crit = next(c for c in gate.criteria if c.name == "throughput_ratio")
    assert crit.measured == "futile" and not gate.inconclusive
    assert report.verdict is not None and any("futility" in r for r in report.verdict.reasons)


def replace_threshold(t: float) -> AdmissionThresholds:
    return AdmissionThresholds(min_throughput_ratio_lower_bound=t)


def test_progress_names_round_arm_level_interval_and_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    seen: list[int] = []
    runner = _runner(_spec(2, 4), _flat, monkeypatch, seen)

    def ticking(arm: str, measure: Callable[[], None]) -> None:
        for c in runner.levels:
            runner._tick(f"{arm} c={c}")
        measure()

    _hooked(runner, ticking)
    runner.progress = lambda what, done, total: lines.append(what)
    raw = runner.run()
    # the stubs bypass launches and levels: the probes on the baseline remain
    assert set(raw.phases) == {"verify_probe", "tie_probe"}
    assert lines[0].startswith("round 1/4 base c=1 |") and lines[0].endswith(" s")
    later = [ln for ln in lines if ln.startswith("round 3/4")]
    assert later and "P95 ratio" in later[0] and "vs 1.00" in later[0]


def test_progress_lines_reach_stderr_in_json_mode(capsys: pytest.CaptureFixture[str]) -> None:
    from specbundle.cli.bench import step_progress

    with step_progress(False) as progress:
        progress("round 1/12 base c=1 | 0/960 s", 0, 6)
        progress("round 1/12 base c=1 | 0/960 s", 1, 6)  # unchanged: not repeated
        progress("round 1/12 spec c=1 | 3/960 s", 1, 6)
    out = capsys.readouterr()
    assert out.out == "" and out.err.splitlines() == [
        "bench: [0/6] round 1/12 base c=1 | 0/960 s", "bench: [1/6] round 1/12 spec c=1 | 3/960 s"]


def test_sigterm_interrupts_like_sigint_while_benchmarking() -> None:
    from specbundle.cli.bench import interruptible

    def terminated() -> None:
        with interruptible():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        terminated()
    assert signal.getsignal(signal.SIGTERM) == before


def test_phase_clock_counts_a_launch_start_and_stop() -> None:
    import contextlib

    from specbundle.bench.budget import PhaseClock

    @contextlib.contextmanager
    def server() -> Any:
        time.sleep(0.01)
        yield "http://127.0.0.1:1"
        time.sleep(0.01)

    clock = PhaseClock()
    with clock.up(server(), "base") as url, clock.timed("measure:base"):
        assert url == "http://127.0.0.1:1"
    assert clock.phases["launch:base"] >= 0.02 and "measure:base" in clock.rounded()


def test_a_settled_alpha_below_c_stops_the_rounds_and_rejects(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A settled rejection (the api's check, here a stand-in) ends the rounds at the first
    whole ABBA pair, before the rule's first look (4 rounds), however noisy the ratio; the
    report rejects and says why, never inconclusive."""
    from specbundle.bench.verdict import bench_decision

    seen: list[int] = []
    runner = _runner(_spec(4), _flat, monkeypatch, seen)
    calls: list[int] = []

    def settled(raw: Any) -> str | None:
        calls.append(len(raw.round_order))
        return "α ≤ c settled at concurrency 1: acceptance α 0.100 is not above 0.300"

    runner.settled = settled
    report = _report(runner)
    st = report.stopping
    assert st is not None and (st.reason, st.rounds) == ("settled", 2) and calls == [4]
    assert st.why.startswith("α ≤ c settled") and runner.looks == []
    assert any(n.startswith("α ≤ c settled") for n in report.notes)
    gate = evaluate(report, runner.spec.admission)
    crit = next(c for c in gate.criteria if c.name == "throughput_ratio")
    assert crit.measured == "settled" and not gate.inconclusive
    assert "α ≤ c settled at concurrency 1" in crit.detail
    word, why = bench_decision(report)
    assert word == "REJECTED" and "α 0.100" in why, why


def test_an_unsettled_decision_is_asked_after_every_pair_and_runs_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs after each whole ABBA pair (2, 4, 6, ... rounds), never mid-pair, and a
    decision it never settles runs to the rule's own stop."""
    seen: list[int] = []
    runner = _runner(_spec(4, 8), _flat, monkeypatch, seen)
    calls: list[int] = []
    runner.settled = lambda raw: calls.append(len(raw.round_order) // 2) or None
    st = _report(runner).stopping
    assert st is not None and st.reason != "settled" and st.why == ""
    assert calls == list(range(2, st.rounds + 1, 2)), (calls, st.rounds)


@pytest.mark.parametrize("reason", ["time_budget", "interrupted"])
def test_a_run_cut_short_is_never_a_pass_even_when_its_ci_clears(reason: str) -> None:
    """Between the planned looks the budget or the operator, not the rule, ends the run: a CI
    that already clears the threshold then is inconclusive (the decision is never admitted);
    the same CI at the rule's own look is a pass."""
    plan = stats.LookPlan(4, 12, NOMINAL)
    ci = stats.RatioCI(1.5, 1.3, 1.7, plan.per_look_confidence, "welch", 6, 6, 0.05, 10.0)
    notes: list[str] = []
    st = stopping(plan, ci, target=1.05, reason=reason, rounds=6,  # type: ignore[arg-type]
                  budget=60.0, elapsed=61.0, notes=notes)
    assert (st.outcome, st.reason) == ("inconclusive", reason)
    assert any("never a pass" in n and "cleared 1.05" in n for n in notes)
    resolved = stopping(plan, ci, target=1.05, reason="resolved", rounds=6, budget=60.0,
                        elapsed=30.0, notes=[])
    assert resolved.outcome == "above"


def test_a_warm_up_is_two_draft_verify_cycles_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every launch warms up; past two draft-verify cycles (2·(K + 1) tokens, K = 4 here) the
    decode steps only repeat themselves, so the warm-up stops there (issue 24: round cost)."""
    def tokens(max_tokens: int) -> list[int]:
        spec = _spec(4)
        spec = spec.model_copy(update={"bench": spec.bench.model_copy(
            update={"max_tokens": max_tokens, "warmup_requests": 2})})
        return [r.max_tokens for r in _runner(spec, _flat, monkeypatch, []).warm_requests()]

    assert tokens(64) == [10, 10]
    assert tokens(8) == [8, 8]  # never longer than the measured requests
