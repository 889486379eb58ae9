"""Pure parts of the measurement: c's paired interval, either-side stopping, common prefixes,
the c cross-check band, the tune selection and the schedule render consumes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specbundle.bench import stats
from specbundle.bench.checks import cost_check
from specbundle.bench.tune_analysis import Variant, choose, variant_levels
from specbundle.errors import SpecError
from specbundle.schedule import Tier, TunedSchedule, apply_tuned
from specbundle.spec import parse_spec


def test_paired_ratio_cancels_drift_that_hits_both_sides_of_a_round() -> None:
    rng = np.random.default_rng(1)
    load = np.exp(rng.normal(0.0, 0.5, 8))  # a busy machine: each round 0.3x-3x slower
    base = 10.0 * load
    draft = 9.5 * load * np.exp(rng.normal(0.0, 0.02, 8))
    paired = stats.paired_ratio_ci(draft, base)
    unpaired = stats.welch_ratio_ci(base, draft)
    assert paired.low < 0.95 < paired.high
    assert math.log(paired.high / paired.low) < math.log(unpaired.high / unpaired.low) / 5
    with pytest.raises(ValueError, match="two pairs"):
        stats.paired_ratio_ci([1.0], [1.0])


def test_rounds_to_resolve_works_on_either_side_of_the_threshold() -> None:
    above = stats.welch_ratio_ci([100.0, 120.0], [150.0, 170.0])
    below = stats.welch_ratio_ci([150.0, 170.0], [100.0, 120.0])
    n_above, n_below = (stats.rounds_to_resolve(ci, 1.05) for ci in (above, below))
    assert n_above is not None and n_below is not None and n_above >= 2 and n_below >= 2
    assert stats.rounds_needed(below.ratio, below.log_sd, 1.05) is None  # the old rule: none


def test_common_prefix_is_the_first_divergence() -> None:
    assert stats.common_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert stats.common_prefix([1, 2], [1, 2, 3]) == 2
    assert stats.common_prefix([], [1]) == 0


def _ratio(r: float) -> stats.RatioCI:
    return stats.welch_ratio_ci([100.0, 101.0, 99.0], [100.0 * r, 101.0 * r, 99.0 * r + 0.5])


def test_black_box_c_must_lie_between_c_and_c_plus_one() -> None:
    tau, g = 5.0, 4.0
    c = stats.paired_ratio_ci([0.10, 0.11, 0.10], [1.0, 1.0, 1.0])
    # S = τ / (1 + g c + v): with v = 1 (verification costs one extra step) S = 5 / 2.4
    ok = cost_check(c, tau, g, _ratio(tau / (1 + g * 0.1 + 1.0)))
    assert ok is not None and ok.consistent and ok.implied_verification == pytest.approx(
        0.25, abs=0.02)
    fast = cost_check(c, tau, g, _ratio(4.9))  # faster than a draft of cost 0.1 allows
    assert fast is not None and not fast.consistent and "over-measured" in fast.note
    slow = cost_check(c, tau, g, _ratio(0.5))  # c_bb = 2.25 > c + 1
    assert slow is not None and not slow.consistent and "under-measured" in slow.note


def test_measured_verification_cost_raises_the_black_box_floor() -> None:
    tau, g = 5.0, 4.0
    c = stats.paired_ratio_ci([0.10, 0.11, 0.10], [1.0, 1.0, 1.0])
    # S = τ / (g c + v) with v = 1.2: c_bb = c + 0.05, inside [c, c + 1] and at the measured v
    at_v = _ratio(tau / (g * 0.1 + 1.2))
    ok = cost_check(c, tau, g, at_v, v_low=1.15)
    assert ok is not None and ok.consistent and ok.v_low == 1.15 and "measured v" in ok.note
    # the same ratio against a verification measured at ≥ 3 steps: faster than c and v allow
    fast = cost_check(c, tau, g, at_v, v_low=3.0)
    assert fast is not None and not fast.consistent and "over-measured" in fast.note
    plain = cost_check(c, tau, g, at_v)  # v unprobed: the floor is c itself
    assert plain is not None and plain.consistent and plain.v_low is None


def test_choose_takes_significant_wins_and_switches_off_elsewhere() -> None:
    base = {1: (100.0, 102.0, 98.0), 8: (400.0, 404.0, 396.0)}
    arms = {Variant(2): {1: (150.0, 151.0, 149.0), 8: (380.0, 385.0, 377.0)},
            Variant(4): {1: (180.0, 182.0, 178.0), 8: (300.0, 303.0, 298.0)}}
    res = variant_levels(base, arms, 0.9)
    choices, fixed, crossover = choose(res, [1, 8])
    assert [(c.concurrency, c.k) for c in choices] == [(1, 4), (8, 0)]
    assert all(c.decided for c in choices)
    # the best fixed K maximises the mean log ratio over levels: K=2 (log 1.5 + log 0.95)
    assert fixed == Variant(2)
    assert choices[0].gain_over_fixed == pytest.approx(180.0 / 150.0, rel=0.01)
    assert choices[1].gain_over_fixed == pytest.approx(1.0 / (380.0 / 400.0), rel=0.02)
    assert crossover == 1


def test_vllm_triples_merge_equal_neighbours_and_start_at_one() -> None:
    s = TunedSchedule("vllm", "r", 4, (Tier(1, 5, None), Tier(2, 5, None), Tier(4, 3, None),
                                       Tier(8, 0, None)))
    assert s.vllm_triples() == [[1, 2, 5], [3, 4, 3], [5, 8, 0]]
    assert s.max_k == 5 and s.off_levels == (8,)
    assert s.sglang_adaptive() == {"candidate_steps": {"1": [5], "2": [5], "4": [3], "8": [0]}}
    assert TunedSchedule.from_bytes(s.to_bytes()) == s
    with pytest.raises(SpecError, match="malformed"):
        TunedSchedule.from_bytes(b'{"schema_version": "specbundle.tune-schedule/v1"}')


def test_apply_tuned_sets_the_vllm_schedule_and_the_llamacpp_p95_setting() -> None:
    doc = {"apiVersion": "specbundle/v1", "metadata": {"name": "t"},
           "target": {"repo": "a/t", "gguf_file": "m.gguf"}, "draft": {"repo": "a/d", "gguf_file": "d.gguf"},
           "speculative": {"method": "draft_model", "num_speculative_tokens": 8},
           "engines": {"vllm": {}, "llamacpp": {}}, "deployment": {"p95_concurrency": 4}}
    spec = parse_spec(doc)
    tiers = (Tier(1, 6, 0.2), Tier(4, 3, 0.5), Tier(8, 0, None))
    v = apply_tuned(spec, TunedSchedule("vllm", "r", 4, tiers))
    assert v.speculative.num_speculative_tokens == 6
    assert v.speculative.schedule == ((1, 1, 6), (2, 4, 3), (5, 8, 0))
    lc = apply_tuned(spec, TunedSchedule("llamacpp", "r", 4, tiers)).engines.llamacpp
    assert lc is not None and lc.draft_n_max == 3 and math.isclose(lc.draft_p_min, 0.5)
    assert apply_tuned(spec, None) is spec


def test_tune_result_round_trips_and_renders_its_plot() -> None:
    from specbundle.bench.tune_analysis import TUNE_VERSION, TuneResult
    from specbundle.bench.tune_html import render_tune_html

    base = {1: (100.0, 102.0), 4: (300.0, 306.0)}
    arms = {Variant(2, 0.5): {1: (150.0, 151.0), 4: (290.0, 300.0)},
            Variant(4, 0.5): {1: (170.0, 172.0), 4: (250.0, 255.0)}}
    res = variant_levels(base, arms, 0.9)
    choices, fixed, crossover = choose(res, [1, 4])
    r = TuneResult(schema_version=TUNE_VERSION, run_id="t", bundle="b", engine="llamacpp",
                   created="2026-12-01T00:00:00Z", tool_version="0", levels=(1, 4),
                   variants=tuple(arms), rounds=2, round_order=(("base", "k2-p0.5", "k4-p0.5"),),
                   requests_per_level=4, max_tokens=32, confidence=0.9, base_throughput=base,
                   results=res, choices=choices, best_fixed=fixed, crossover_concurrency=crossover,
                   p95_concurrency=4, elapsed_s=60.0, minutes_per_k=0.5)
    assert TuneResult.from_json(r.to_json()) == r
    old = r.to_json()
    del old["per_look_confidence"]  # stored before the sweep recorded its per-look confidence
    assert TuneResult.from_json(old).per_look_confidence is None
    page = render_tune_html(r)
    assert "<svg" in page and "k4-p0.5" in page and "schedule" in page and "http" not in \
        page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    sched = r.schedule()
    assert [(t.concurrency, t.k, t.p_min) for t in sched.tiers] == [(1, 4, 0.5), (4, 0, None)]


def test_median_pairs_ignore_contention_bursts_that_stall_one_side() -> None:
    rng = np.random.default_rng(4)
    base = np.full(16, 10.0) * np.exp(rng.normal(0.0, 0.05, 16))
    draft = np.full(16, 5.0) * np.exp(rng.normal(0.0, 0.05, 16))
    draft[[1, 6, 11]] *= 4.0  # three requests of the draft hit a burst of load
    med = stats.paired_median_ratio_ci(draft, base)
    mean = stats.paired_ratio_ci(draft, base)
    assert med.low <= med.ratio <= med.high and med.low < 0.5 < med.high * 1.1
    assert abs(math.log(med.ratio / 0.5)) < abs(math.log(mean.ratio / 0.5)) / 3
    # sign-test order statistics: with 16 pairs the 90 % interval is [d(5), d(12)]
    d = np.sort(np.log(draft) - np.log(base))
    assert med.low == pytest.approx(math.exp(d[4])) and med.high == pytest.approx(math.exp(d[11]))
