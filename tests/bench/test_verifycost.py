"""v from probe samples: the ratio of paired engine times, with a paired log-scale interval."""

from __future__ import annotations

import pytest

from specbundle.bench.verifycost import VerifySample, verify_cost


def test_v_is_the_geometric_mean_ratio_with_an_interval() -> None:
    ratios = [2.9, 3.1, 3.0, 3.2, 2.8]
    samples = [VerifySample(batch=1, g=8, step_ms=10.0 + i, verify_ms=(10.0 + i) * r)
               for i, r in enumerate(ratios)]
    vc = verify_cost(samples)
    assert vc is not None
    assert vc.low < vc.v < vc.high and vc.v == pytest.approx(3.0, rel=0.01)
    assert vc.samples == 5 and vc.batch == 1 and vc.g == 8
    wide = verify_cost(samples, confidence=0.99)
    assert wide is not None and wide.low < vc.low and wide.high > vc.high


def test_interval_is_paired_drift_cancels() -> None:
    # the machine slows down 5x over the run; each pair still says v = 2
    samples = [VerifySample(4, 8, step_ms=s, verify_ms=2 * s) for s in (5.0, 10.0, 25.0)]
    vc = verify_cost(samples)
    assert vc is not None and vc.low == pytest.approx(2.0) and vc.high == pytest.approx(2.0)


def test_no_or_one_sample() -> None:
    assert verify_cost([]) is None
    assert verify_cost([VerifySample(1, 8, 0.0, 5.0)]) is None
    one = verify_cost([VerifySample(1, 8, 2.0, 5.0)])
    assert one is not None and one.v == one.low == one.high == pytest.approx(2.5)
