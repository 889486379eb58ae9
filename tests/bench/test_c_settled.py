"""When c is settled, the draft-alone probe stops (issue 24: a round's cost).

c reaches the decision only through α > c (at c's upper bound) and through whether any draft
length can pay; :func:`analysis.c_settled` says when more draft-alone pairs cannot change
either. Driven here with per-request step times (llama-server ``timings``) and speculation
counter deltas, as the runner collects them; the runner's use of it (no draft launch once
every level is settled) is held on the real llama-server in tests/admit/test_admit_engine.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from specbundle.bench.analysis import c_settled, decision_settled
from specbundle.bench.client import LevelRun, RequestResult
from specbundle.bench.prometheus import SpecCounters, WindowDelta
from specbundle.bench.runner import ArmData, RawRun


def _run(step_ms: float) -> LevelRun:
    r = RequestResult(prompt_id="p#0", ok=True, error=None, start_ns=0, ttft=0.01, e2e=0.1,
                      tpot=0.01, itl_chunk=(), itl_token=(), chunks=8, prompt_tokens=3,
                      completion_tokens=8, token_source="usage", text="t", finish_reason="length",
                      server={"timings": {"predicted_n": 8, "predicted_ms": 8 * step_ms}})
    return LevelRun(1, 1.0, (r,))


def _raw(draft_ms: Sequence[float], base_ms: Sequence[float], accepted: float) -> RawRun:
    """One window of 100 drafts of 4 tokens (``accepted`` of the 400 accepted) at level 1."""
    delta = WindowDelta(engine="llamacpp", spec=SpecCounters(100, 400, accepted),
                        preemptions=None, generation_tokens=None, kv_usage_end=None,
                        kv_capacity_tokens=None, gauges_end={}, counters_comparable=True,
                        note="")
    spec = ArmData(runs={1: [_run(10.0)]}, deltas={1: [delta]})
    return RawRun(run_id="r", engine="llamacpp", levels=(1,), requests={}, base=ArmData(),
                  spec=spec, draft=ArmData(runs={1: [_run(x) for x in draft_ms]}), aa=None,
                  round_order=("base", "spec"), settings_equal=True, settings_note="",
                  server={}, notes=[], probe=ArmData(runs={1: [_run(x) for x in base_ms]}))


BASE = (10.0, 11.0, 9.5, 10.5, 10.2, 9.8)


def test_a_cheap_draft_with_high_acceptance_settles_alpha_above_c() -> None:
    raw = _raw([2.0, 2.3, 1.9, 2.1, 2.2, 2.0], BASE, accepted=380)  # α ≈ 0.98, c ≈ 0.2
    why = c_settled(raw, 1, 0.90, target=1.05, k=4)
    assert why is not None and "α > c is settled" in why and "6 pairs" in why


def test_too_few_pairs_settle_nothing() -> None:
    """Four pairs: the sign-test interval is only their range (87.5 % < 90 %)."""
    raw = _raw([2.0, 2.3, 1.9, 2.1], BASE[:4], accepted=380)
    assert c_settled(raw, 1, 0.90, target=1.05, k=4) is None


def test_a_self_drafting_pair_is_settled_when_no_draft_length_can_pay() -> None:
    """α ≈ c ≈ 1 (the issue's 270M pair drafting for itself): α sits inside c's interval, but
    even c's lower bound leaves every g = 1..8 below the threshold."""
    raw = _raw([9.6, 11.4, 9.9, 10.8, 10.0, 9.5], BASE, accepted=396)  # α ≈ 0.996
    why = c_settled(raw, 1, 0.90, target=1.05, k=8)
    assert why is not None and "no draft length reaches 1.05×" in why


def test_an_open_question_keeps_the_probe_running() -> None:
    """α inside c's interval and a low c that would still pay: more pairs can change α > c."""
    raw = _raw([4.0, 7.5, 5.0, 8.0, 4.5, 7.0], BASE, accepted=150)  # α 0.64, c 0.40-0.76
    assert c_settled(raw, 1, 0.90, target=1.05, k=4) is None
    assert c_settled(_raw([], [], accepted=150), 1, 0.90, target=1.05, k=4) is None


def test_the_measured_verification_cost_settles_a_self_drafting_pair_under_load() -> None:
    """Under load c's interval is wide (here 0.80-1.14): with the paper's v = 1 a c at its
    lower bound would still pay at g = 1, so the probe goes on; the target's own measured
    verification cost (v ≈ 3 for 9 tokens, as on CPU) says no draft length can."""
    from dataclasses import replace

    from specbundle.bench.verifycost import VerifySample

    raw = _raw([8.0, 11.4, 9.9, 10.8, 10.0, 11.2], BASE, accepted=396)
    assert c_settled(raw, 1, 0.90, target=1.05, k=8) is None
    v = [VerifySample(1, 8, 10.0, x) for x in (29.0, 31.0, 30.0, 30.5)]
    raw = replace(raw, base=ArmData(verify={1: v}))
    why = c_settled(raw, 1, 0.90, target=1.05, k=8)
    assert why is not None and "no draft length reaches 1.05×" in why


# -- the same bound ends the rounds (analysis.decision_settled, asked after every ABBA pair) --


def _measured(raw: RawRun, ratio: float) -> RawRun:
    """Two rounds per arm at level 1 whose throughput ratio spec/base is ``ratio``."""
    from dataclasses import replace

    def arm(scale: float) -> list[LevelRun]:
        return [LevelRun(1, d / scale, _run(10.0).results) for d in (1.0, 1.1)]

    return replace(raw, base=replace(raw.base, runs={1: arm(1.0)}),
                   spec=replace(raw.spec, runs={1: arm(ratio)}))


SELF = ([9.6, 11.4, 9.9, 10.8, 10.0, 9.5], BASE)  # c ≈ 1 around α ≈ 0.996


def test_a_self_drafting_pair_is_rejected_as_settled_naming_alpha_c_and_the_bound() -> None:
    raw = _measured(_raw(*SELF, accepted=396), 0.9)
    why = decision_settled(raw, 1, 0.90, target=1.05, k=8, require_alpha_above_c=True)
    assert why is not None and why.startswith("no draft length can pay at concurrency 1")
    assert "α 0.99" in why and "over 6 pairs" in why and "v ≥ 1" in why
    assert "below the threshold 1.05×" in why and "measured so far 0.90×" in why


def test_the_bound_never_cuts_off_a_ratio_the_measurement_carries_over_the_threshold() -> None:
    """The model says no draft length pays, but the rounds so far say 1.2×: the model is
    the one in doubt, so the rounds go on and the rule's repeated CI decides."""
    raw = _measured(_raw(*SELF, accepted=396), 1.2)
    assert decision_settled(raw, 1, 0.90, target=1.05, k=8, require_alpha_above_c=True) is None


def test_the_bound_settles_only_where_the_model_applies() -> None:
    """Without α > c in the spec the paper's v = 1 does not decide: a measured v does. Too few
    of c's pairs, no ratio yet, or a threshold below 1 (prefill could lift a ratio over it)
    settle nothing; a good pair is never settled."""
    from dataclasses import replace

    from specbundle.bench.verifycost import VerifySample

    raw = _measured(_raw(*SELF, accepted=396), 0.9)
    assert decision_settled(raw, 1, 0.90, target=1.05, k=8, require_alpha_above_c=False) is None
    v = [VerifySample(1, 8, 10.0, x) for x in (29.0, 31.0, 30.0, 30.5)]
    with_v = replace(raw, base=replace(raw.base, verify={1: v}))
    why = decision_settled(with_v, 1, 0.90, target=1.05, k=8, require_alpha_above_c=False)
    assert why is not None and "v ≥ " in why and "at g = 8" in why
    assert decision_settled(raw, 1, 0.90, target=0.95, k=8, require_alpha_above_c=True) is None
    few = _measured(_raw(SELF[0][:4], BASE[:4], accepted=396), 0.9)
    assert decision_settled(few, 1, 0.90, target=1.05, k=8, require_alpha_above_c=True) is None
    unmeasured = _raw(*SELF, accepted=396)
    assert decision_settled(unmeasured, 1, 0.90, target=1.05, k=8,
                            require_alpha_above_c=True) is None
    good = _measured(_raw([2.0, 2.3, 1.9, 2.1, 2.2, 2.0], BASE, accepted=380), 0.9)
    assert decision_settled(good, 1, 0.90, target=1.05, k=4, require_alpha_above_c=True) is None


def test_alpha_below_c_is_settled_only_where_the_spec_requires_alpha_above_c() -> None:
    raw = _measured(_raw([14.0, 15.0, 13.5, 14.5, 14.2, 13.8], BASE, accepted=200), 1.3)
    why = decision_settled(raw, 1, 0.90, target=1.05, k=4, require_alpha_above_c=True)
    assert why is not None and why.startswith("α ≤ c settled at concurrency 1")
    assert decision_settled(raw, 1, 0.90, target=1.05, k=4, require_alpha_above_c=False) is None


def test_too_few_of_cs_pairs_settle_alpha_below_c_neither() -> None:
    """Asked after the first ABBA pair, an engine whose c pairs are whole rounds has two:
    their range is no interval yet, however far below it α sits."""
    few = _measured(_raw([14.0, 15.0], BASE[:2], accepted=200), 1.3)
    assert decision_settled(few, 1, 0.90, target=1.05, k=4, require_alpha_above_c=True) is None
