"""The sequential stopping rule: planned looks, repeated CIs, and the false admissions they stop.

The rule may look at the P95 ratio K times and stops at the first clear look, so each look is
a repeated CI at the Bonferroni per-look confidence (:class:`stats.LookPlan`). The runner's
loop is driven here with synthetic throughputs (no server), and the rule itself is replayed
on simulated rounds through the same function the runner calls.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from specbundle.bench import stats
from specbundle.bench.api import _build_report
from specbundle.bench.client import LevelRun, RequestResult
from specbundle.bench.html import render_html
from specbundle.bench.report import BenchReport
from specbundle.bench.runner import ArmData, BenchOptions, _Runner
from specbundle.bench.workload import default_workload
from specbundle.spec import BundleSpec, parse_spec

NOMINAL = 0.90


def test_per_look_confidence_splits_the_error_over_the_planned_looks() -> None:
    plan = stats.LookPlan(4, 12, NOMINAL)  # looks after 4, 6, 8, 10, 12 rounds
    assert (plan.first, plan.last, plan.looks) == (4, 12, 5) and plan.sequential
    assert plan.per_look_confidence == pytest.approx(0.98)
    assert [r for r in range(14) if plan.is_look(r)] == [4, 6, 8, 10, 12]
    assert stats.LookPlan(2, 6, NOMINAL).per_look_confidence == pytest.approx(1 - 0.1 / 3)
    fixed = stats.LookPlan(4, 4, NOMINAL)  # a fixed design is one look at the nominal level
    assert fixed.looks == 1 and not fixed.sequential and fixed.per_look_confidence == NOMINAL
    # odd counts look after whole ABBA pairs only: 3 -> first look at 4, max 7 -> last at 8
    assert (stats.LookPlan(3, 3).looks, stats.LookPlan(3, 7).looks) == (1, 3)
    assert stats.LookPlan(4, 12, NOMINAL, corrected=False).per_look_confidence == NOMINAL


def test_a_look_stops_on_either_side_or_at_the_last_look() -> None:
    plan = stats.LookPlan(2, 4, NOMINAL)
    win, tie = ([100.0, 102.0], [150.0, 153.0]), ([100.0, 110.0], [110.0, 100.0])
    assert plan.look(1, win[0][:1], win[1][:1], 1.0) is None  # not after a whole pair
    look = plan.look(2, *win, 1.0)
    assert look is not None and look.side == "above" and look.stop == "resolved"
    assert look.ci is not None and look.ci.confidence == plan.per_look_confidence
    loss = plan.look(2, win[1], win[0], 1.0)
    assert loss is not None and loss.side == "below" and loss.stop == "resolved"
    going = plan.look(2, *tie, 1.0)
    assert going is not None and going.side == "inconclusive" and going.stop is None
    last = plan.look(4, tie[0] * 2, tie[1] * 2, 1.0)
    assert last is not None and last.stop == "max_rounds"
    fixed = stats.LookPlan(2, 2).look(2, *tie, 1.0)
    assert fixed is not None and fixed.stop == "fixed"
    unmeasured = plan.look(2, [100.0], [150.0], 1.0)
    assert unmeasured is not None and unmeasured.side == "unmeasured" and unmeasured.stop


def test_rounds_to_resolve_counts_at_the_per_look_confidence() -> None:
    base, spec = [100.0, 120.0, 95.0, 110.0], [130.0, 150.0, 125.0, 160.0]
    nominal = stats.welch_ratio_ci(base, spec, confidence=NOMINAL)
    repeated = stats.LookPlan(4, 12, NOMINAL).ratio_ci(base, spec)
    assert repeated is not None and repeated.low < nominal.low and repeated.high > nominal.high
    n_nom, n_rep = (stats.rounds_to_resolve(ci, 1.2) for ci in (nominal, repeated))
    assert n_nom is not None and n_rep is not None and n_rep > n_nom


# -- the rule, simulated: false admissions at a true ratio exactly on the threshold ----------


def _false_admissions(plan: stats.LookPlan, sims: int, sd: float, seed: int) -> float:
    """Share of runs whose stopping look lies wholly above a threshold the ratio sits on."""
    threshold = 1.05
    rng = np.random.default_rng(seed)
    admitted = 0
    for _ in range(sims):
        base = (100.0 * np.exp(rng.normal(0.0, sd, plan.last))).tolist()
        spec = (100.0 * threshold * np.exp(rng.normal(0.0, sd, plan.last))).tolist()
        look = stats.replay_looks(plan, base, spec, threshold)
        admitted += look is not None and look.side == "above"
    return admitted / sims


def test_repeated_cis_keep_false_admissions_at_the_nominal_rate() -> None:
    """The spec's default schedule (4 rounds, up to 12: five looks) at the test box's noise
    (log sd 0.2, 10-30 % run to run): the nominal rule admits a ratio on the threshold about
    twice as often as its one-sided 5 %; the repeated CIs keep it under 5 %."""
    sims = 1500
    margin = 3.0 * math.sqrt(0.05 * 0.95 / sims)  # three Monte-Carlo standard errors
    before = _false_admissions(stats.LookPlan(4, 12, NOMINAL, corrected=False), sims, 0.2, 7)
    after = _false_admissions(stats.LookPlan(4, 12, NOMINAL), sims, 0.2, 7)
    assert after <= 0.05 + margin, after
    assert before > 0.05 + margin, before
    assert before > 2.5 * after


# -- the runner's loop on synthetic throughputs (no server) ----------------------------------


def _spec(rounds: int = 4, max_rounds: int | None = None) -> BundleSpec:
    bench: dict[str, Any] = {"max_tokens": 8, "requests_per_level": 1, "rounds": rounds,
                             "warmup_requests": 0, "concurrency_levels": [1, 2]}
    if max_rounds is not None:
        bench["max_rounds"] = max_rounds
    return parse_spec({
        "apiVersion": "specbundle/v1", "metadata": {"name": "seq"},
        "target": {"repo": "o/t", "source": "dir:/nonexistent/t", "gguf_file": "m.gguf"},
        "draft": {"repo": "o/d", "source": "dir:/nonexistent/d", "gguf_file": "m.gguf"},
        "speculative": {"method": "draft_model", "num_speculative_tokens": 4},
        "engines": {"llamacpp": {}}, "deployment": {"p95_concurrency": 1},
        "admission": {"min_throughput_ratio_lower_bound": 1.0}, "bench": bench})


def _result() -> tuple[RequestResult, ...]:
    return (RequestResult(prompt_id="p#0", ok=True, error=None, start_ns=0, ttft=0.01, e2e=0.1,
                          tpot=0.01, itl_chunk=(), itl_token=(), chunks=8, prompt_tokens=5,
                          completion_tokens=8, token_source="usage", text="t0 t1 t2 t3",
                          finish_reason="length"),)


Throughput = Callable[[str, int], float]  # (arm, round) -> output tok/s


class _SyntheticArms:
    """An :class:`~specbundle.bench.interface.ArmDriver` whose arms "measure" the given
    throughputs, with no server and no verification probe."""

    def __init__(self, throughput: Throughput) -> None:
        self.throughput = throughput
        self.levels: tuple[int, ...] = ()

    def measure(self, arm: str, url: str, data: ArmData, reqs: Any, *,
                metrics: bool = True, levels: tuple[int, ...] | None = None) -> None:
        for c in levels or self.levels:
            r = len(data.runs.get(c, []))
            data.runs.setdefault(c, []).append(
                LevelRun(c, 8.0 / self.throughput(arm, r), _result()))

    @contextlib.contextmanager
    def server(self, speculation: bool) -> Iterator[str]:
        yield "http://stub"

    def verify_probe(self, url: str, data: ArmData) -> None:
        return None


def _runner(spec: BundleSpec, throughput: Throughput, monkeypatch: pytest.MonkeyPatch,
            looks: list[int], **opts: Any) -> _Runner:
    """A runner whose arms "measure" the given throughputs; ``looks`` records each look."""
    arms = _SyntheticArms(throughput)
    runner = _Runner(spec, "llamacpp", default_workload(), BenchOptions(measure_draft=False,
                     **opts), None, False, None, arms=arms)
    arms.levels = tuple(runner.levels)
    runner.looks = looks
    return runner


def _report(runner: _Runner) -> BenchReport:
    raw = runner.run()
    return _build_report(raw, runner.spec, "seq", runner.workload, runner.opts, len(
        raw.round_order) // 2, runner.n_req, runner.max_tokens, runner.warmup)


def test_runner_plans_its_looks_from_rounds_and_max_rounds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def flat(arm: str, r: int) -> float:
        return 100.0
    seen: list[int] = []
    assert _runner(_spec(4), flat, monkeypatch, seen).plan.looks == 5  # default max 3 x 4
    assert _runner(_spec(2), flat, monkeypatch, seen).plan.looks == 3  # default max 3 x 2
    assert _runner(_spec(4, 8), flat, monkeypatch, seen).plan.looks == 3
    fixed = _runner(_spec(4), flat, monkeypatch, seen, max_rounds=4).plan
    assert fixed.looks == 1 and fixed.per_look_confidence == NOMINAL
    # a tie never resolves: every planned look is made, then the rule stops at max_rounds
    def tie(arm: str, r: int) -> float:
        return (100.0, 110.0)[(r + (arm == "spec")) % 2]
    report = _report(_runner(_spec(4), tie, monkeypatch, seen))
    st = report.stopping
    assert st is not None and seen == [4, 6, 8, 10, 12]
    assert (st.rule, st.reason, st.outcome, st.rounds) == ("sequential", "max_rounds",
                                                           "inconclusive", 12)
    assert st.looks == 5 and st.per_look_confidence == pytest.approx(0.98)
    assert all(lv.ratio is not None and lv.ratio.confidence == st.per_look_confidence
               for lv in report.levels)  # every level's ratio CI is the repeated one
    assert "5 planned looks, each a repeated CI at 98% for 90% overall" in render_html(report)
    assert any("5 planned looks" in r for r in report.verdict.reasons)  # type: ignore[union-attr]
    assert BenchReport.from_json(report.to_json()) == report


def test_the_gate_reads_the_repeated_ci_the_rule_stopped_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A win the nominal 90 % CI would have admitted after 4 rounds is not clear at the
    per-look 98 %: the runner goes on, and the report carries the CI of its stopping look."""
    base = [100.0, 125.0, 96.0, 120.0, 104.0, 118.0, 99.0, 121.0, 102.0, 119.0, 98.0, 123.0]
    spec = [b * 1.3 for b in base[1:] + base[:1]]  # the same noise, shifted by one round
    assert stats.welch_ratio_ci(base[:4], spec[:4], confidence=NOMINAL).low > 1.0
    seen: list[int] = []
    report = _report(_runner(_spec(4), lambda arm, r: (spec if arm == "spec" else base)[r],
                             monkeypatch, seen))
    st, lv = report.stopping, report.at_p95
    assert st is not None and lv is not None and lv.ratio is not None
    assert seen[0] == 4 and st.rounds > 4 and st.outcome == "above" and st.reason == "resolved"
    final = stats.LookPlan(4, 12, NOMINAL, paired=True).ratio_ci(base[:st.rounds],
                                                                spec[:st.rounds])
    assert lv.ratio == final and lv.ratio.low >= 1.0


def test_reports_before_repeated_cis_still_load() -> None:
    old = {"rule": "sequential", "outcome": "above", "reason": "resolved", "rounds": 6,
           "min_rounds": 4, "max_rounds": 12, "threshold": 1.0, "time_budget_s": None,
           "elapsed_s": 1.0, "rounds_to_resolve": None}
    from pydantic import TypeAdapter

    from specbundle.bench.report import Stopping

    st = TypeAdapter(Stopping).validate_python(old)
    assert st.looks == 0 and st.per_look_confidence is None


# -- pairing each round's arms (issue 24: a busy box drifts) ---------------------------------


def _abba(ratio: float, walk: np.ndarray, noise: np.ndarray) -> tuple[list[float], list[float]]:
    """Per-round throughputs in ABBA launch order: ``walk`` is shared by launch, ``noise``
    is each launch's own (rows: rounds, columns: base, spec)."""
    base, spec = [], []
    for r in range(len(noise)):
        b, s = (2 * r, 2 * r + 1) if r % 2 == 0 else (2 * r + 1, 2 * r)
        base.append(100.0 * math.exp(walk[b] + noise[r, 0]))
        spec.append(100.0 * ratio * math.exp(walk[s] + noise[r, 1]))
    return base, spec


def test_the_paired_ci_cancels_a_slow_drift_that_widens_welch() -> None:
    """A machine slowing 3 % a launch hits both launches of a round alike: each round's ratio
    keeps the true 1.3, where Welch takes the slowdown for noise."""
    base, spec = _abba(1.3, -0.03 * np.arange(16), np.zeros((8, 2)))
    paired = stats.abba_ratio_ci(base, spec, confidence=0.98)
    welch = stats.welch_ratio_ci(base, spec, confidence=0.98)
    assert paired.ratio == pytest.approx(1.3) and paired.method == "paired-log"
    assert paired.low > 1.25 and welch.low < 1.1 < 1.25 < paired.low
    # a round missing its second launch (cut by the budget) is left out, not mispaired
    assert stats.abba_ratio_ci(base, spec[:7], confidence=0.98).n_base == 7


def test_the_paired_rule_keeps_false_admissions_under_drift_and_decides_sooner() -> None:
    """The rule the runner uses (paired) against Welch on the same draws, with a random walk
    shared by launch (sd 0.1 a launch): on the threshold it admits at most the nominal 5 %;
    a clear win (1.6) is decided in fewer rounds."""
    sims = 800
    plans = (stats.LookPlan(4, 12, NOMINAL, paired=True), stats.LookPlan(4, 12, NOMINAL))
    rng = np.random.default_rng(11)
    admitted, rounds = [0, 0], [0, 0]
    for i in range(sims):
        ratio = 1.05 if i % 2 == 0 else 1.6
        draw = _abba(ratio, np.cumsum(rng.normal(0.0, 0.1, 24)), rng.normal(0.0, 0.2, (12, 2)))
        for j, plan in enumerate(plans):
            look = stats.replay_looks(plan, *draw, 1.05)
            assert look is not None
            if ratio == 1.05:
                admitted[j] += look.side == "above"
            else:
                rounds[j] += look.rounds
    half = sims // 2
    assert admitted[0] / half <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / half), admitted
    assert rounds[0] < rounds[1], rounds
