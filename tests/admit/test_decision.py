"""The gate is a pure function: every criterion, fail-closed on anything unmeasured."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specbundle.admit import evaluate
from specbundle.bench.report import (
    BenchReport,
)
from specbundle.bench.stats import welch_ratio_ci
from specbundle.spec import AdmissionThresholds
from tests.lib.reports import bench_report

T = AdmissionThresholds()


def test_a_clear_win_passes_every_criterion() -> None:
    gate = evaluate(bench_report(), T)
    assert gate.admitted and gate.reasons == ()
    assert [c.name for c in gate.criteria] == [
        "throughput_ratio", "alpha_above_c", "ceiling_drop", "preemption_increase",
        "engine_errors", "token_agreement", "validity"]


def test_alpha_not_above_c_names_both_values() -> None:
    gate = evaluate(bench_report(alpha=0.05, c=0.2), T)
    assert not gate.admitted
    assert gate.reasons == ("alpha_above_c: α = 0.050 ≤ c = 0.200: no speed-up is possible at "
                            "any draft depth",)


def test_noisy_ratio_fails_on_its_lower_bound_and_says_how_many_rounds() -> None:
    gate = evaluate(bench_report(base=(100.0, 140.0), spec=(130.0, 170.0)), T)
    (reason,) = gate.reasons
    assert reason.startswith("throughput_ratio:") and "lower bound" in reason


def test_every_failed_criterion_is_listed() -> None:
    gate = evaluate(bench_report(spec=(90.0, 91.0, 89.0, 90.0), alpha=0.1, c=0.3, drop=0.25,
                            pre=(0.0, 3.0), agreement=0.5, errors=2,
                            problems=("degenerate repetition in the outputs",)), T)
    names = [r.split(":")[0] for r in gate.reasons]
    assert names == ["throughput_ratio", "alpha_above_c", "ceiling_drop", "preemption_increase",
                     "engine_errors", "token_agreement", "validity"]


@pytest.mark.parametrize(("kw", "name"), [
    ({"alpha": None}, "alpha_above_c"), ({"c": None}, "alpha_above_c"),
    ({"drop": None}, "ceiling_drop"), ({"pre": (None, 0.0)}, "preemption_increase"),
    ({"agreement": None}, "token_agreement"),
])
def test_unmeasured_means_rejected(kw: dict[str, object], name: str) -> None:
    gate = evaluate(bench_report(**kw), T)  # type: ignore[arg-type]
    assert not gate.admitted
    assert any(r.startswith(name) and "unmeasured" in r for r in gate.reasons)


def test_missing_p95_level_is_unmeasured() -> None:
    r = bench_report()
    r = replace(r, settings=replace(r.settings, p95_concurrency=32))
    gate = evaluate(r, T)
    assert any(x.startswith("throughput_ratio:") and "unmeasured" in x for x in gate.reasons)


def test_alpha_check_can_be_switched_off_by_the_spec() -> None:
    gate = evaluate(bench_report(alpha=0.05, c=0.2), T.model_copy(update={"require_alpha_above_c": False}))
    assert gate.admitted


def test_report_round_trips_through_json() -> None:
    r = bench_report()
    assert BenchReport.from_json(r.to_json()) == r


# -- c with its interval, the agreement floor, the sequential outcome (issue 13) -----------

def _with_c(r: BenchReport, c: tuple[float, ...], base: tuple[float, ...]) -> BenchReport:
    from specbundle.bench.checks import cost_check
    from specbundle.bench.stats import paired_ratio_ci

    lv = r.levels[0]
    ci = paired_ratio_ci(c, base)
    check = cost_check(ci, lv.acceptance.mean_acceptance_length,
                       lv.acceptance.mean_draft_length, lv.ratio)
    return replace(r, levels=(replace(lv, c_measured=ci.ratio, c_ci=ci, c_check=check),))


def test_gate_uses_the_upper_bound_of_c() -> None:
    # α = 0.8 is above the point c (~0.6) but not above its upper confidence bound
    r = _with_c(bench_report(alpha=0.8), c=(0.3, 0.9, 0.6, 0.75), base=(1.0, 1.0, 1.0, 1.0))
    lv = r.levels[0]
    assert lv.c_ci is not None and lv.c_ci.ratio < 0.8 < lv.c_ci.high
    gate = evaluate(r, T)
    (reason,) = [x for x in gate.reasons if x.startswith("alpha_above_c")]
    assert "upper bound" in reason and "≤ c" in reason


def test_c_that_disagrees_with_the_black_box_c_is_unmeasured_not_passed() -> None:
    # ratio ~1.5 with τ = 4, g = 4 implies c_bb ≈ 0.42; a measured c of 0.9 lies above it:
    # speculation ran faster than that draft cost allows, so c was over-measured
    r = _with_c(bench_report(alpha=0.95), c=(0.90, 0.91, 0.89, 0.90), base=(1.0, 1.0, 1.0, 1.0))
    lv = r.levels[0]
    assert lv.c_check is not None and not lv.c_check.consistent
    gate = evaluate(r, T)
    (reason,) = [x for x in gate.reasons if x.startswith("alpha_above_c")]
    assert "c unmeasured" in reason and "disagree" in reason


def _floor(spec_prefix: float, aa_prefix: float) -> BenchReport:
    from specbundle.bench.report import Agreement

    a = Agreement(basis="token-ids", max_tokens=64, spec_pairs=16, aa_pairs=8,
                  spec_identical=0.4, aa_identical=0.9, spec_mean_prefix=spec_prefix,
                  aa_mean_prefix=aa_prefix, relative=min(1.0, spec_prefix / aa_prefix),
                  first_divergence={"p0": spec_prefix})
    r = bench_report(agreement=0.4)  # only 40 % of full outputs identical: the old rule rejected
    return replace(r, validity=replace(r.validity, agreement=a))


def test_numerics_drift_passes_against_the_floor() -> None:
    gate = evaluate(_floor(spec_prefix=48.0, aa_prefix=60.0), T)
    assert gate.admitted, gate.reasons


def test_output_changing_draft_fails_against_the_floor() -> None:
    gate = evaluate(_floor(spec_prefix=2.0, aa_prefix=60.0), T)
    (reason,) = gate.reasons
    assert reason.startswith("token_agreement:") and "changes the outputs" in reason


def test_inconclusive_is_its_own_outcome_with_the_rounds_it_would_take() -> None:
    from specbundle.bench.report import Stopping

    r = bench_report(base=(100.0, 140.0), spec=(130.0, 170.0))
    r = replace(r, stopping=Stopping(rule="sequential", outcome="inconclusive",
                                     reason="max_rounds", rounds=2, min_rounds=2, max_rounds=2,
                                     threshold=1.05, time_budget_s=None, elapsed_s=10.0,
                                     rounds_to_resolve=9))
    (reason,) = evaluate(r, T).reasons
    assert "inconclusive" in reason and "about 9 rounds" in reason
    assert BenchReport.from_json(r.to_json()) == r


def test_tuned_schedule_reports_where_speculation_is_off_and_fails_when_off_at_p95() -> None:
    tuned = {"run_id": "t1", "off_levels": [8], "k_at_p95": 3}
    on = evaluate(replace(bench_report(), server={"tuned_schedule": tuned}), T)
    crit = next(c for c in on.criteria if c.name == "tuned_schedule")
    assert on.admitted and "speculation off at concurrency 8" in crit.detail
    off = evaluate(replace(bench_report(), server={"tuned_schedule": {**tuned, "k_at_p95": 0,
                                                                 "off_levels": [4, 8]}}), T)
    assert any(r.startswith("tuned_schedule:") and "off at the P95" in r for r in off.reasons)


def test_the_ratio_criterion_names_the_repeated_ci_of_a_sequential_rule() -> None:
    from specbundle.bench.report import Stopping

    base, spec = (100.0, 102.0, 98.0, 101.0), (150.0, 152.0, 149.0, 151.0)
    lv = replace(bench_report().levels[0], ratio=welch_ratio_ci(base, spec, confidence=0.98))
    r = replace(bench_report(), levels=(lv,), stopping=Stopping(
        rule="sequential", outcome="above", reason="resolved", rounds=4, min_rounds=4,
        max_rounds=12, threshold=1.05, time_budget_s=None, elapsed_s=1.0,
        rounds_to_resolve=None, looks=5, per_look_confidence=0.98))
    gate = evaluate(r, T)
    crit = next(c for c in gate.criteria if c.name == "throughput_ratio")
    assert gate.admitted and crit.detail.endswith(
        "98% CI [1.451, 1.553] over 4+4 rounds (sequential rule: 5 planned looks, each a "
        "repeated CI at 98% for 90% overall)"), crit.detail
