"""Turn the raw runs of both arms into the report: ratios, acceptance, c, validity.

Pure apart from reading the raw data: everything here is a function of what was measured,
so a report can be recomputed from the same runs. Acceptance comes only from the engine's
counter deltas over the measured windows (summed over rounds); the per-request figures
(llama.cpp ``timings``) are summed beside them as a cross-check that must match exactly.
An engine without counters (SGLang) supplies its own window figures through its adapter:
the measured requests' ``meta_info`` summed (:mod:`specbundle.bench.sglang_meta`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specbundle.bench import checks, costmodel, stats
from specbundle.bench.client import LevelRun, RequestResult
from specbundle.bench.engines import adapter_for
from specbundle.bench.prometheus import NOT_COMPARABLE, WindowDelta
from specbundle.bench.report import (
    Acceptance,
    ArmLevel,
    Ceiling,
    LevelResult,
    Validity,
)
from specbundle.bench.runner import ArmData, RawRun
from specbundle.bench.sglang_meta import chain_only
from specbundle.bench.verifycost import VerifyCost, verify_cost

__all__ = ["AnalysisInputs", "acceptance", "alpha_c_settled", "analyse_levels", "c_settled",
           "ceiling", "decision_settled", "validity"]

_REPETITION_FLOOR = 0.3  # distinct char 4-gram ratio below this = a repetition loop


@dataclass(frozen=True)
class AnalysisInputs:
    """Thresholds the analysis needs from the spec.

    ``ratio_confidence``: the confidence of every level's throughput-ratio CI; the sequential
    rule's per-look confidence (:class:`stats.LookPlan`), ``None`` for ``confidence``.
    """

    max_tokens: int
    confidence: float
    min_ratio_lower_bound: float
    min_token_agreement: float
    min_agreement_vs_floor: float = 0.5
    ratio_confidence: float | None = None


def _ms(values: Sequence[float]) -> stats.Summary | None:
    return stats.summarize([v * 1000.0 for v in values])


def _arm_level(arm: str, c: int, runs: Sequence[LevelRun],
              deltas: Sequence[WindowDelta] = ()) -> ArmLevel:
    """Pool one arm's rounds at one level."""
    results = [r for run in runs for r in run.results]
    ok = [r for r in results if r.ok]
    tps = tuple(run.output_throughput for run in runs)
    gen = [d.generation_tokens for d in deltas]
    return ArmLevel(
        arm=arm,  # type: ignore[arg-type]
        concurrency=c, round_output_throughput=tps,
        output_throughput=sum(tps) / len(tps) if tps else 0.0,
        request_throughput=sum(run.request_throughput for run in runs) / max(len(runs), 1),
        completed=len(ok), failed=len(results) - len(ok),
        total_output_tokens=sum(r.completion_tokens for r in ok),
        ttft_ms=_ms([r.ttft for r in ok if r.ttft is not None]),
        tpot_ms=_ms([r.tpot for r in ok if r.tpot is not None]),
        itl_chunk_ms=_ms([g for r in ok for g in r.itl_chunk]),
        itl_token_ms=_ms([g for r in ok for g in r.itl_token]),
        e2el_ms=_ms([r.e2e for r in ok if r.e2e is not None]),
        server_output_tokens=sum(g for g in gen if g is not None) if gen and None not in gen
        else None,
    )


def acceptance(engine: str, deltas: Sequence[WindowDelta], runs: Sequence[LevelRun],
               props: Mapping[str, Any] | None = None) -> Acceptance:
    """Acceptance of the spec arm at one level from counter deltas (+ per-request check);
    ``props``: what the spec arm's server resolved (SGLang: a tree gets no chain α)."""
    adapter = adapter_for(engine)
    own = adapter.window_acceptance(deltas, runs)
    if own is not None:  # no counters: per-request figures summed over the window
        return chain_only(own, props) if engine == "sglang" else own
    per_req = [adapter.request_spec(r.server) for run in runs for r in run.ok]
    req_d = sum(p[0] for p in per_req if p) if per_req and None not in per_req else None
    req_a = sum(p[1] for p in per_req if p) if per_req and None not in per_req else None
    specs = [d.spec for d in deltas]
    if not deltas or None in specs:
        gauges = dict(deltas[-1].gauges_end) if deltas else {}
        comparable = not deltas or deltas[-1].counters_comparable
        note = deltas[-1].note if deltas else "no /metrics reading"
        if not comparable:
            note = note or NOT_COMPARABLE
        return Acceptance(
            source="gauges" if gauges else "none", comparable_as_counters=comparable,
            drafts=None, draft_tokens=None, accepted=None, acceptance_rate=None,
            mean_acceptance_length=None, mean_draft_length=None, per_position=(),
            depth_too_deep=False, alpha=None, request_draft_tokens=req_d,
            request_accepted=req_a, request_cross_check=None, gauges=gauges, note=note,
        )
    drafts = sum(s.drafts for s in specs if s)
    tokens = sum(s.draft_tokens for s in specs if s)
    acc = sum(s.accepted for s in specs if s)
    width = max((len(s.accepted_per_pos) for s in specs if s), default=0)
    pos_sum = [sum(s.accepted_per_pos[i] for s in specs if s and i < len(s.accepted_per_pos))
               for i in range(width)]
    per_pos = stats.per_position_rates(pos_sum, drafts)
    tau = stats.mean_acceptance_length(acc, drafts)
    g = tokens / drafts if drafts > 0 else None
    alpha = stats.alpha_from_tau(tau, g) if tau is not None and g is not None else None
    check = None if req_d is None or req_a is None else (req_d == tokens and req_a == acc)
    return Acceptance(
        source="counters", comparable_as_counters=True, drafts=drafts, draft_tokens=tokens,
        accepted=acc, acceptance_rate=stats.acceptance_rate(acc, tokens),
        mean_acceptance_length=tau, mean_draft_length=g, per_position=per_pos,
        depth_too_deep=stats.depth_collapses(per_pos), alpha=alpha,
        request_draft_tokens=req_d, request_accepted=req_a, request_cross_check=check,
        note="draft depth too deep: acceptance collapses after position 1"
        if stats.depth_collapses(per_pos) else "",
    )


def _server_step(engine: str, runs: Sequence[LevelRun]) -> float | None:
    adapter = adapter_for(engine)
    steps = [adapter.step_ms(r.server) for run in runs for r in run.ok]
    return sum(s for s in steps if s) / len(steps) if steps and None not in steps else None


def _draft_cost(raw: RawRun, c: int, draft: ArmLevel | None, base: ArmLevel) -> float | None:
    """c = the draft's per-step time / the target's per-step time in the baseline arm.

    Server-side decode time per token where the engine reports it (no HTTP in it), else
    the client's TPOT of both at the same concurrency.
    """
    if raw.draft is None or draft is None:
        return None
    d = _server_step(raw.engine, raw.draft.runs.get(c, []))
    b = _server_step(raw.engine, raw.base.runs.get(c, []))
    if d is not None and b:
        return d / b
    if draft.tpot_ms and base.tpot_ms and base.tpot_ms.mean > 0:
        return draft.tpot_ms.mean / base.tpot_ms.mean
    return None


def _c_interval(raw: RawRun, c: int, point: float, confidence: float,
                c_ci: stats.RatioCI | None) -> costmodel.Interval:
    """c's interval: the paired one over c's pairs (:func:`checks.draft_cost_ci`) when there
    are two pairs, else Welch over the per-request server step times of both arms."""
    if c_ci is not None:
        return costmodel.Interval(c_ci.ratio, c_ci.low, c_ci.high)
    adapter = adapter_for(raw.engine)
    arms = [raw.base, raw.draft] if raw.draft is not None else []
    steps = [[adapter.step_ms(r.server) for run in a.runs.get(c, []) for r in run.ok]
             for a in arms]
    clean = [[x for x in s if x is not None and x > 0] for s in steps]
    if clean and all(len(k) >= 2 and len(k) == len(s) for k, s in zip(clean, steps, strict=True)):
        ci = stats.welch_ratio_ci(clean[0], clean[1], confidence=confidence)
        return costmodel.Interval(point, min(point, ci.low), max(point, ci.high))
    return costmodel.Interval(point, point, point)


def _prefill_shares(base: ArmLevel, spec: ArmLevel) -> tuple[float, float | None]:
    """Each arm's mean time to first token over the baseline's mean request latency.

    Means, not medians: the throughput ratio the model is held against is total tokens
    over total time, so a slow first token counts by its duration. The cost model bounds them.
    """
    if base.ttft_ms is None or base.e2el_ms is None or base.e2el_ms.mean <= 0:
        return 0.0, None
    lat = base.e2el_ms.mean
    return (base.ttft_ms.mean / lat, spec.ttft_ms.mean / lat if spec.ttft_ms is not None
            else None)


def _cost_model(raw: RawRun, c: int, acc: Acceptance, c_meas: float | None,
                c_ci: stats.RatioCI | None, ratio: stats.RatioCI | None, confidence: float,
                base: ArmLevel, spec: ArmLevel
                ) -> tuple[VerifyCost | None, str, costmodel.ModelCheck | None,
                           costmodel.Advice | None]:
    """v at this level, the extended model beside the measured ratio, and its advice."""
    vc = verify_cost(raw.base.verify.get(c, []), confidence=confidence)
    note = raw.base.verify_note if vc is None else ""
    alpha, g = acc.alpha, acc.mean_draft_length
    if vc is None or alpha is None or not g or c_meas is None:
        return vc, note or ("verification cost unmeasured" if vc is None else ""), None, None
    # the probe verified K + 1 tokens; the arm drafted g on average (p_min, end of output)
    v = costmodel.Interval(*(costmodel.v_at(x, vc.g, g) for x in (vc.v, vc.low, vc.high)))
    pred = costmodel.predict(alpha, g, _c_interval(raw, c, c_meas, confidence, c_ci), v)
    meas = costmodel.Interval(ratio.ratio, ratio.low, ratio.high) if ratio else None
    p, q = _prefill_shares(base, spec)
    return (vc, note, costmodel.reconcile(pred, meas, prefill_share=p, spec_prefill_share=q),
            costmodel.advise(alpha, g, c_meas, v.value, vc.g))


def _sum_opt(values: Sequence[float | None]) -> float | None:
    return None if not values or None in values else float(sum(v for v in values if v is not None))


def analyse_levels(raw: RawRun, inp: AnalysisInputs) -> tuple[LevelResult, ...]:
    """One :class:`LevelResult` per concurrency level."""
    out = []
    # Every level's throughput ratio is a repeated CI at the rule's per-look confidence, not
    # only P95's: all levels were measured over the same data-chosen number of rounds, the
    # crossover reads their lower bounds, and a repeated CI stays valid at any stopping time.
    # A fixed design (one look) is unchanged. c, v and the A/A noise keep the nominal
    # confidence: the rule never looks at them, so it cannot pick a lucky moment for them.
    rc = inp.ratio_confidence or inp.confidence
    for c in raw.levels:
        b_runs, s_runs = raw.base.runs.get(c, []), raw.spec.runs.get(c, [])
        base = _arm_level("base", c, b_runs, raw.base.deltas.get(c, []))
        spec = _arm_level("spec", c, s_runs, raw.spec.deltas.get(c, []))
        draft = _arm_level("draft", c, raw.draft.runs.get(c, [])) if raw.draft else None
        ratio = boot = None
        needed = None
        tb, ts = base.round_output_throughput, spec.round_output_throughput
        if len(tb) >= 2 and len(ts) >= 2 and min(tb + ts) > 0:
            ratio = stats.abba_ratio_ci(tb, ts, confidence=rc)  # as the rule (LookPlan)
            needed = stats.rounds_needed(ratio.ratio, ratio.log_sd, inp.min_ratio_lower_bound,
                                         confidence=rc)
            if len(tb) >= 3 and len(ts) >= 3:
                boot = stats.bootstrap_ratio_ci(tb, ts, confidence=rc)
        acc = acceptance(raw.engine, raw.spec.deltas.get(c, []), s_runs, raw.spec.props)
        c_ci = checks.draft_cost_ci(raw, c, inp.confidence)
        c_meas = c_ci.ratio if c_ci is not None else _draft_cost(raw, c, draft, base)
        tau, g, alpha = acc.mean_acceptance_length, acc.mean_draft_length, acc.alpha
        c_bb = stats.black_box_c(tau, ratio.ratio, g) if tau and g and ratio else None
        c_gate = c_ci.high if c_ci is not None else c_meas
        pred = stats.predicted_improvement(alpha, g, c_meas) \
            if alpha is not None and g and c_meas is not None else None
        b_d, s_d = raw.base.deltas.get(c, []), raw.spec.deltas.get(c, [])
        vc, v_note, model, advice = _cost_model(raw, c, acc, c_meas, c_ci, ratio, inp.confidence,
                                                 base, spec)
        out.append(LevelResult(
            concurrency=c, base=base, spec=spec, draft=draft, ratio=ratio, ratio_bootstrap=boot,
            rounds_needed=needed, acceptance=acc, c_measured=c_meas, c_black_box=c_bb,
            predicted_improvement=pred,
            alpha_above_c=(alpha > c_gate) if alpha is not None and c_gate is not None else None,
            preemptions_base=_sum_opt([d.preemptions for d in b_d]),
            preemptions_spec=_sum_opt([d.preemptions for d in s_d]),
            kv_usage_end_base=b_d[-1].kv_usage_end if b_d else None,
            kv_usage_end_spec=s_d[-1].kv_usage_end if s_d else None,
            c_ci=c_ci, c_check=checks.cost_check(c_ci, tau, g, ratio,
                                                 v_low=model.v.low if model else None),
            verify_cost=vc, verify_note=v_note, model=model, advice=advice,
        ))
    return tuple(out)


def ceiling(base: ArmData, spec: ArmData, engine: str) -> Ceiling:
    """Compare the KV capacity each arm reports; the drop is the lost share."""
    drop = None
    if base.kv_capacity and spec.kv_capacity is not None:
        drop = max(0.0, 1.0 - spec.kv_capacity / base.kv_capacity)
    note = "" if drop is not None else f"{engine} did not report KV capacity"
    return Ceiling(kv_capacity_base=base.kv_capacity, kv_capacity_spec=spec.kv_capacity,
                   drop=drop, max_sequences_base=base.max_sequences,
                   max_sequences_spec=spec.max_sequences, note=note)


def _pairs(raw: RawRun) -> list[tuple[RequestResult, RequestResult]]:
    pairs = []
    for c in raw.levels:
        for rb, rs in zip(raw.base.runs.get(c, []), raw.spec.runs.get(c, []), strict=False):
            sb = {r.prompt_id: r for r in rb.ok}
            pairs += [(sb[r.prompt_id], r) for r in rs.ok if r.prompt_id in sb]
    return pairs


def _ngram(results: Sequence[RequestResult]) -> float | None:
    vals = [stats.distinct_ngram_ratio(list(r.text), 4) for r in results if r.text]
    return sum(vals) / len(vals) if vals else None


def validity(raw: RawRun, inp: AnalysisInputs) -> Validity:
    """Fairness checks; every failed one is named in ``problems``."""
    problems: list[str] = []
    pairs = _pairs(raw)
    same = [b.text == s.text for b, s in pairs]
    agreement = sum(same) / len(same) if same else None
    bad_ids = tuple(sorted({b.prompt_id.split("#")[0]
                            for (b, _), eq in zip(pairs, same, strict=True) if not eq}))
    floor = checks.agreement(raw, inp.max_tokens)
    if agreement is None:
        problems.append("token agreement unmeasured: no prompt completed in both arms")
    elif floor.relative is None:
        problems.append("token agreement unmeasured against its floor: no baseline A/A pair")
    elif floor.relative < inp.min_agreement_vs_floor and (
            floor.relative_numerics is None
            or floor.relative_numerics < inp.min_agreement_vs_floor):
        ties = (f"; {floor.near_ties} of {floor.probed} divergences probed were near-ties "
                "(numerics)" if floor.probed else "")
        problems.append(f"token agreement: common prefix {floor.spec_mean_prefix:.1f} tokens is "
                        f"{floor.relative:.2f} of the baseline's own {floor.aa_mean_prefix:.1f} "
                        f"(< {inp.min_agreement_vs_floor:.2f}): the arms generate different "
                        f"outputs{ties}")
    arms = [raw.base, raw.spec] + ([raw.draft] if raw.draft else [])
    all_res = [r for a in arms for runs in a.runs.values() for run in runs for r in run.results]
    failed = [r for r in all_res if not r.ok]
    if failed:
        problems.append(f"{len(failed)} request(s) failed")
    ok = [r for r in all_res if r.ok]
    fixed = all(r.completion_tokens == inp.max_tokens for r in ok)
    if not fixed:
        problems.append(f"not every request generated exactly max_tokens={inp.max_tokens}")
    rb = [r for runs in raw.base.runs.values() for run in runs for r in run.ok]
    rs = [r for runs in raw.spec.runs.values() for run in runs for r in run.ok]
    nb, ns = _ngram(rb), _ngram(rs)
    degenerate = any(v is not None and v < _REPETITION_FLOOR for v in (nb, ns))
    if degenerate:
        problems.append("degenerate repetition in the outputs inflates acceptance and throughput")
    moved = flat = None
    s_specs = [d.spec for ds in raw.spec.deltas.values() for d in ds]
    b_specs = [d.spec for ds in raw.base.deltas.values() for d in ds]
    if s_specs and None not in s_specs:
        moved = sum(s.draft_tokens for s in s_specs if s) > 0
        if not moved:
            problems.append("speculation counters did not move in the speculative arm")
    if b_specs and None not in b_specs:
        flat = sum(s.draft_tokens for s in b_specs if s) == 0
        if not flat:
            problems.append("speculation counters moved in the baseline arm")
    slots = None
    if raw.base.max_sequences is not None and raw.spec.max_sequences is not None:
        slots = min(raw.base.max_sequences, raw.spec.max_sequences) >= max(raw.levels)
        if not slots:
            problems.append("fewer server slots than the highest concurrency: requests queue")
    if raw.settings_equal is False:
        problems.append(f"server settings differ beyond speculation: {raw.settings_note}")
    return Validity(
        token_agreement=agreement, compared_outputs=len(pairs), disagreeing_prompts=bad_ids,
        distinct_ngram_base=nb, distinct_ngram_spec=ns, degenerate_repetition=degenerate,
        fixed_length=fixed, settings_equal=raw.settings_equal, settings_note=raw.settings_note,
        slots_cover_concurrency=slots, engine_errors=len(failed),
        error_samples=tuple(sorted({r.error or "" for r in failed}))[:5],
        spec_counters_moved=moved, base_counters_flat=flat, problems=tuple(problems),
        agreement=floor,
    )


def alpha_c_settled(raw: RawRun, c: int, confidence: float) -> str | None:
    """Why α ≤ c is settled at concurrency ``c`` so far, else ``None`` (the rule's futility).

    α comes from the engine's counters over every measured window (thousands of tokens:
    precise), c from its paired interval; once α is not above c's *lower* bound, more
    rounds cannot make α > c hold, and the gate's α > c criterion cannot pass.
    """
    ci = checks.draft_cost_ci(raw, c, confidence)
    alpha = acceptance(raw.engine, raw.spec.deltas.get(c, []), raw.spec.runs.get(c, []),
                       raw.spec.props).alpha
    if ci is None or alpha is None or alpha > ci.low:
        return None
    return (f"α ≤ c settled at concurrency {c}: acceptance α {alpha:.3f} is not above the draft "
            f"cost c's lower bound {ci.low:.3f} ({ci.ratio:.3f}, {ci.n_base} pairs): no draft "
            "length can pay, so the rounds stop and admission rejects")


def c_settled(raw: RawRun, c: int, confidence: float, *, target: float, k: int) -> str | None:
    """Why more draft-alone samples at concurrency ``c`` cannot change the decision, else None.

    c reaches the decision only through the gate's α > c (judged at c's upper bound) and, via
    the cost model, through whether any draft length can pay. Settled once the interval
    decides α > c either way (α above its upper bound, or not above its lower bound), or once
    even its lower bound leaves every draft length g = 1..K below the admission ``target`` in
    the extended model τ/(g·c + v), with v at its measured lower bound (the paper's v = 1
    before three probe samples): then the c values more samples could still reveal all say
    speculation does not pay, whichever side of α they fall. The runner then stops the draft
    probe at that level (issue 24: round cost); c keeps the interval it had, which stays the
    one the report and the gate read.
    """
    ci = checks.draft_cost_ci(raw, c, confidence)
    alpha = acceptance(raw.engine, raw.spec.deltas.get(c, []), raw.spec.runs.get(c, []),
                       raw.spec.props).alpha
    # the sign-test interval holds its confidence only from 2·½ⁿ ≤ 1 − confidence on (below
    # that it is the full range of a handful of pairs): settle nothing on fewer pairs
    if ci is None or alpha is None or 2.0 * 0.5 ** ci.n_base > 1.0 - confidence:
        return None
    said = f"c {ci.ratio:.3f} [{ci.low:.3f}, {ci.high:.3f}] over {ci.n_base} pairs, α {alpha:.3f}"
    if alpha > ci.high or alpha <= ci.low:
        return f"{said}: α {'>' if alpha > ci.high else '≤'} c is settled"
    best, _ = _best_at_bounds(raw, c, alpha, ci.low, confidence, k)
    if best < target:
        return (f"{said}: even at c's lower bound no draft length reaches {target:.2f}× "
                f"(best {best:.2f}×)")
    return None


def _best_at_bounds(raw: RawRun, c: int, alpha: float, c_low: float, confidence: float,
                    k: int) -> tuple[float, str]:
    """The best predicted speed-up over g = 1..K at c's lower bound and v's (v = 1 before
    three probe samples: verifying g + 1 tokens costs at least one decode step), and how v
    was taken."""
    vc = verify_cost(raw.base.verify.get(c, []), confidence=confidence)
    measured = vc is not None and vc.samples >= 3

    def v(g: int) -> float:
        return costmodel.v_at(vc.low, vc.g, g) if vc is not None and measured else 1.0

    best = max(costmodel.extended_improvement(alpha, g, c_low, v(g))
               for g in range(1, max(k, 1) + 1))
    return best, (f"v ≥ {vc.low:.2f} at g = {vc.g}" if vc is not None and measured
                  else "v ≥ 1")


def decision_settled(raw: RawRun, c: int, confidence: float, *, target: float, k: int,
                     require_alpha_above_c: bool) -> str | None:
    """Why the admission at concurrency ``c`` (P95) is settled as a rejection, else ``None``.

    The runner asks after every whole ABBA pair, not only at the rule's planned looks.
    Settled when the gate requires α > c and α ≤ c's lower bound (:func:`alpha_c_settled`),
    or when no draft length can pay even at c's and v's lower bounds. Soundness of the second:
    the decode-phase speed-up τ(α, g)/(g·c + v) falls as c or v rises, so at the lower bounds
    it bounds every value inside their intervals from above; v ≥ 1 holds physically; prefill
    runs alike in both arms (a ratio of at most 1), so it only pulls the end-to-end ratio
    towards 1, never above the larger of the bound and 1: with a threshold of at least 1, a
    best bound below it means the ratio cannot clear it unless the model is wrong. It is
    used only where the model applies: α from the engine's counters, c's paired interval
    past the sign test's minimum pairs (both tests), and either the spec requires α > c (it
    already judges the draft by the model's c) or v was measured; and only while the ratio
    agrees (its point estimate below the threshold), so a pair the measurement is carrying
    over the threshold is never cut off by the model. The rule can only turn an admission
    into a rejection, so the false-admission bound of the repeated CIs is untouched; c's
    interval is read at every pair at its nominal confidence, so a false rejection needs
    the model's bound to be wrong or c's lower bound too high at one of those reads.
    """
    ci = checks.draft_cost_ci(raw, c, confidence)
    # c's sign-test interval holds its confidence only from 2·½ⁿ ≤ 1 − confidence on: asked
    # after every pair (two rounds can be two of c's pairs), settle nothing on fewer
    if ci is None or 2.0 * 0.5 ** ci.n_base > 1.0 - confidence:
        return None
    if require_alpha_above_c and (why := alpha_c_settled(raw, c, confidence)):
        return why
    alpha = acceptance(raw.engine, raw.spec.deltas.get(c, []), raw.spec.runs.get(c, []),
                       raw.spec.props).alpha
    tb = [x.output_throughput for x in raw.base.runs.get(c, [])]
    ts = [x.output_throughput for x in raw.spec.runs.get(c, [])]
    if alpha is None or target < 1.0 or len(tb) < 2 or len(ts) < 2 or min(tb + ts) <= 0:
        return None
    vc = verify_cost(raw.base.verify.get(c, []), confidence=confidence)
    if not require_alpha_above_c and (vc is None or vc.samples < 3):
        return None  # neither the spec nor a measured v puts the decision in the model's hands
    ratio = stats.abba_ratio_ci(tb, ts, confidence=confidence).ratio
    best, v_said = _best_at_bounds(raw, c, alpha, ci.low, confidence, k)
    if best >= target or ratio >= target:
        return None
    return (f"no draft length can pay at concurrency {c}: α {alpha:.3f}, c {ci.ratio:.3f} "
            f"[{ci.low:.3f}, {ci.high:.3f}] over {ci.n_base} pairs, {v_said}: the best "
            f"predicted ratio at the lower bounds, {best:.2f}× (g = 1..{max(k, 1)}), is below "
            f"the threshold {target:.2f}× (measured so far {ratio:.2f}×), so the rounds stop "
            "and admission rejects")
