"""Pure statistics: Leviathan's formulas, ratio CIs, percentiles, crossover."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specbundle.bench import stats


def test_summary_matches_numpy_linear_percentiles_and_population_std() -> None:
    xs = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0]
    s = stats.summarize(xs)
    assert s is not None
    assert s.p95 == pytest.approx(float(np.percentile(xs, 95, method="linear")))
    assert s.median == 3.5
    assert s.std == pytest.approx(float(np.std(xs)))
    assert stats.summarize([]) is None


@pytest.mark.parametrize(("alpha", "g"), [(0.0, 3), (0.3, 1), (0.5, 4), (0.8, 3), (0.95, 8)])
def test_alpha_from_tau_inverts_the_expected_tokens_formula(alpha: float, g: int) -> None:
    tau = sum(alpha**i for i in range(g + 1))  # (1 - α^(g+1)) / (1 - α)
    assert stats.alpha_from_tau(tau, g) == pytest.approx(alpha, abs=1e-9)


def test_alpha_clamps_outside_the_feasible_range() -> None:
    assert stats.alpha_from_tau(1.0, 4) == 0.0
    assert stats.alpha_from_tau(5.0, 4) == 1.0
    assert stats.alpha_from_tau(7.0, 4) == 1.0


def test_engine_acceptance_rate_differs_from_leviathan_alpha() -> None:
    # 100 steps of k=4, 200 accepted: rate 0.5, tau 3.0; alpha solves 1+a+..+a^4 = 3
    rate = stats.acceptance_rate(200, 400)
    tau = stats.mean_acceptance_length(200, 100)
    assert rate == 0.5 and tau == 3.0
    alpha = stats.alpha_from_tau(tau, 4.0)
    assert sum(alpha**i for i in range(5)) == pytest.approx(3.0)
    assert alpha == pytest.approx(0.7413, abs=1e-3)
    assert alpha != pytest.approx(rate)


def test_predicted_improvement_matches_the_paper_and_its_corollary() -> None:
    a, g, c = 0.8, 3, 0.1
    expected = (1 - a ** (g + 1)) / ((1 - a) * (g * c + 1))
    assert stats.predicted_improvement(a, g, c) == pytest.approx(expected)
    # corollary: at g = 1 the improvement is (1 + a) / (1 + c); none when a <= c
    assert stats.predicted_improvement(0.6, 1, 0.2) == pytest.approx(1.6 / 1.2)
    assert stats.predicted_improvement(0.2, 1, 0.2) == pytest.approx(1.0)
    assert all(stats.predicted_improvement(0.15, g, 0.2) < 1.0 for g in range(1, 10))


def test_black_box_c_reproduces_the_measured_ratio() -> None:
    tau, g, s = 3.0, 4.0, 1.8
    c = stats.black_box_c(tau, s, g)
    assert c is not None
    assert tau / (1 + g * c) == pytest.approx(s)


def test_welch_ratio_ci_brackets_the_ratio_and_narrows_with_rounds() -> None:
    base = [100.0, 104.0, 98.0, 101.0]
    spec = [150.0, 149.0, 155.0, 152.0]
    ci = stats.welch_ratio_ci(base, spec, confidence=0.90)
    assert ci.low < ci.ratio < ci.high
    assert ci.ratio == pytest.approx(math.exp(np.log(spec).mean() - np.log(base).mean()))
    wide = stats.welch_ratio_ci(base[:2], spec[:2], confidence=0.90)
    assert (wide.high - wide.low) > (ci.high - ci.low)
    with pytest.raises(ValueError, match="two rounds"):
        stats.welch_ratio_ci([1.0], [2.0])


def test_zero_spread_gives_a_point_interval() -> None:
    ci = stats.welch_ratio_ci([10.0, 10.0], [12.0, 12.0])
    assert ci.low == ci.high == pytest.approx(1.2)


def test_bootstrap_is_seeded_and_brackets_the_ratio() -> None:
    base, spec = [100.0, 102.0, 97.0, 99.0], [120.0, 118.0, 125.0, 121.0]
    a = stats.bootstrap_ratio_ci(base, spec, seed=1)
    b = stats.bootstrap_ratio_ci(base, spec, seed=1)
    assert a == b
    assert a.low <= a.ratio <= a.high


def test_rounds_needed_grows_with_noise_and_is_none_below_threshold() -> None:
    few = stats.rounds_needed(1.3, 0.02, 1.05)
    many = stats.rounds_needed(1.3, 0.15, 1.05)
    assert few is not None and many is not None and many > few
    assert stats.rounds_needed(1.02, 0.01, 1.05) is None


def test_crossover_is_the_last_level_before_the_bound_drops_to_one() -> None:
    assert stats.crossover_concurrency([1, 2, 4, 8], [1.5, 1.2, 0.9, 1.1]) == 2
    assert stats.crossover_concurrency([1, 2], [0.8, 1.3]) is None
    assert stats.crossover_concurrency([1, 2], [1.4, None]) == 1


def test_depth_collapse_and_repetition_detectors() -> None:
    assert stats.depth_collapses([0.8, 0.1, 0.05])
    assert not stats.depth_collapses([0.8, 0.6, 0.5])
    assert not stats.depth_collapses([0.01, 0.0, 0.0])  # a bad drafter, not a depth problem
    looped = list("abcabcabcabcabcabcabc")
    assert stats.distinct_ngram_ratio(looped, 4) < 0.3
    assert stats.distinct_ngram_ratio(list("the quick brown fox jumps"), 4) > 0.9
