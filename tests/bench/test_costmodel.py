"""The extended speed-up model: it reduces to Leviathan's form at v = 1, and its advice solves it."""

from __future__ import annotations

import math

import pytest

from specbundle.bench import costmodel as cm
from specbundle.bench import stats

CASES = [(0.9, 8, 0.1), (0.6, 4, 0.3), (0.99, 3.9, 0.9), (0.3, 1, 0.05), (0.75, 5.5, 0.125)]


def _leviathan(a: float, g: float, c: float) -> float:
    """The paper's closed form, written out as the seed states it."""
    return (1 - a ** (g + 1)) / ((1 - a) * (g * c + 1))


@pytest.mark.parametrize(("a", "g", "c"), CASES)
def test_extended_model_is_the_paper_form_at_v_1(a: float, g: float, c: float) -> None:
    assert cm.extended_improvement(a, g, c, 1.0) == pytest.approx(_leviathan(a, g, c), rel=1e-12)
    assert cm.paper_improvement(a, g, c) == pytest.approx(stats.predicted_improvement(a, g, c))


def test_the_issue_s_real_model_is_reconciled_by_verification_cost() -> None:
    # α 0.989, c 0.90, g 3.9: the paper predicts a speed-up (1.07) where 0.575 was measured;
    # verification at ~4.8 decode steps, i.e. a fully compute-bound target (g + 1 = 4.9 steps
    # for g + 1 tokens), closes the gap
    paper = cm.paper_improvement(0.989, 3.9, 0.90)
    assert paper == pytest.approx(1.07, abs=0.01)
    v = cm.break_even_v(0.989, 3.9, 0.90, target=0.575)
    assert cm.extended_improvement(0.989, 3.9, 0.90, v) == pytest.approx(0.575)
    assert 4.5 < v < 3.9 + 1.0


def test_corollary_g1_floor_and_alpha_above_c() -> None:
    for a, c in ((0.5, 0.2), (0.2, 0.5), (0.9, 0.89)):
        s = cm.extended_improvement(a, 1, c, 1.0)
        assert s == pytest.approx((1 + a) / (1 + c))
        assert (s > 1) == (a > c)


def test_improvement_falls_with_v_and_c() -> None:
    assert cm.extended_improvement(0.9, 8, 0.1, 2.0) < cm.extended_improvement(0.9, 8, 0.1, 1.0)
    assert cm.extended_improvement(0.9, 8, 0.2, 1.0) < cm.extended_improvement(0.9, 8, 0.1, 1.0)
    assert cm.expected_tokens(1.0, 8) == 9.0


@pytest.mark.parametrize(("a", "g", "c"), CASES)
def test_break_evens_solve_the_model(a: float, g: float, c: float) -> None:
    v = 1.4
    bc = cm.break_even_c(a, g, v)
    assert cm.extended_improvement(a, g, bc, v) == pytest.approx(1.0) or bc <= 0
    bv = cm.break_even_v(a, g, c)
    assert cm.extended_improvement(a, g, c, bv) == pytest.approx(1.0)
    ba = cm.break_even_alpha(g, c, v)
    if ba is not None:
        assert cm.extended_improvement(ba, g, c, v) == pytest.approx(1.0, abs=1e-6)
    assert cm.break_even_alpha(2, 1.0, 1.0) is None  # τ < 3 = 2·1 + 1 for α < 1


def test_v_scales_affinely_with_the_tokens_verified() -> None:
    assert cm.v_at(3.0, 8, 8) == 3.0
    assert cm.v_at(3.0, 8, 4) == pytest.approx(2.0)
    assert cm.v_at(3.0, 8, 0) == 1.0
    assert cm.v_at(0.9, 8, 4) == 1.0  # never cheaper than a decode step


def test_largest_paying_k_and_schedule() -> None:
    # a cheap draft and cheap verification: the whole window pays
    assert cm.largest_paying_k(0.9, 0.05, 1.2, 8, 8) == 8
    # the same pair where verification of 9 tokens costs 6 steps: only short drafts pay
    k = cm.largest_paying_k(0.9, 0.05, 6.0, 8, 8)
    assert 0 < k < 8
    assert cm.extended_improvement(0.9, k, 0.05, cm.v_at(6.0, 8, k)) > 1
    assert cm.extended_improvement(0.9, k + 1, 0.05, cm.v_at(6.0, 8, k + 1)) <= 1
    # acceptance below the draft cost: nothing pays, switch speculation off
    assert cm.largest_paying_k(0.1, 0.5, 1.0, 4, 8) == 0
    best, s = cm.best_k(0.9, 0.05, 6.0, 8, 8)
    assert 1 <= best <= k and s > 1
    assert cm.k_schedule([(1, 0.9, 0.05, 1.2, 8), (32, 0.9, 0.05, 6.0, 8)], 8) == [(1, 8), (32, k)]


def test_prediction_interval_and_reconciliation() -> None:
    pred = cm.predict(0.9, 8, cm.Interval(0.1, 0.08, 0.12), cm.Interval(3.0, 2.5, 3.6))
    assert pred.extended.low < pred.extended.value < pred.extended.high < pred.paper
    ok = cm.reconcile(pred, cm.Interval(pred.extended.value, pred.extended.value * 0.9,
                                        pred.extended.value * 1.1))
    assert ok.agrees is True and ok.extended_error == pytest.approx(0.0)
    assert ok.paper_error is not None and ok.paper_error > 1.0
    far = cm.reconcile(pred, cm.Interval(0.5, 0.45, 0.55))
    assert far.agrees is False
    assert cm.reconcile(pred, None).agrees is None
    adv = cm.advise(0.9, 8, 0.1, 3.0, 8)
    assert adv.break_even_v == pytest.approx(cm.expected_tokens(0.9, 8) - 0.8)
    assert math.isfinite(adv.break_even_c) and adv.largest_paying_k >= adv.best_k


def test_prefill_share_dilutes_the_decode_prediction_end_to_end() -> None:
    """Amdahl: a request's prefill and first token are not sped up by speculation."""
    assert cm.end_to_end(3.0, 0.0) == 3.0
    assert cm.end_to_end(3.0, 1.0) == pytest.approx(1.0)
    assert cm.end_to_end(2.76, 0.12) == pytest.approx(1 / (0.12 + 0.88 / 2.76))
    assert cm.end_to_end(0.5, 0.5) == pytest.approx(1 / (0.5 + 1.0))  # a loss is diluted too
    assert cm.end_to_end(math.inf, 0.25) == pytest.approx(4.0)
    pred = cm.predict(1.0, 6.75, cm.Interval(0.07, 0.06, 0.08), cm.Interval(2.36, 2.2, 2.5))
    m = cm.reconcile(pred, cm.Interval(2.24, 2.05, 2.45), prefill_share=0.12)
    assert m.extended_decode == pred.extended and m.prefill_share == 0.12
    assert m.extended.low < m.extended.value < m.extended.high < pred.extended.value
    assert m.agrees is True and m.extended_error is not None and m.extended_error < 0.05
    # without the prefill term the decode-phase form overshoots this measurement
    assert cm.reconcile(pred, cm.Interval(2.24, 2.05, 2.45)).agrees is False
    assert cm.reconcile(pred, None, prefill_share=float("nan")).prefill_share == 0.0
    # a slower first token in the speculative arm (the draft's prefill) is charged to it
    slow = cm.reconcile(pred, cm.Interval(2.0, 1.9, 2.1), prefill_share=0.12,
                        spec_prefill_share=0.2)
    assert slow.spec_prefill_share == 0.2
    assert slow.extended.value == pytest.approx(1 / (0.2 + 0.88 / pred.extended.value))
    assert cm.end_to_end(0.0, 0.1) == 0.0 and cm.end_to_end(2.0, 0.0, 0.0) == 2.0
