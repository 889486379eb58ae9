"""The decision first: the verdict and one plain sentence per deciding reason.

An operator told "rejected" needs to know why in the seed's terms: acceptance α, draft
cost c, verification cost v, the batch size, the KV ceiling. The sentences here are a pure
function of the figures (:class:`Figures`, no report types), so every kind of outcome is
pinned by snapshot tests; :func:`bench_verdict` and :func:`gate_verdict` only gather the
figures from a report (and the gate's existing criteria) and call them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from specbundle.bench.report import BenchReport, LevelResult

__all__ = ["CriterionLike", "Figures", "Verdict", "bench_decision", "bench_verdict", "c_basis",
           "figures_of", "gate_decision", "gate_verdict", "level_verdict", "looks_text", "percent",
           "verdict_first"]

Outcome = Literal["wins", "loses", "inconclusive", "invalid", "unmeasured", "admitted",
                  "rejected"]

_C_LIKE_TARGET = 0.8  # a draft this dear is "as costly as the target" (c ≈ 1)
_V_DOMINATES = 1.3  # verification costing this many decode steps is worth naming
_KV_DROP = 0.05  # a KV capacity loss worth naming as a cause
_PREFILL_MATTERS = 0.05  # an unsped share of each request worth naming beside the prediction


@dataclass(frozen=True)
class Verdict:
    """What was decided, the one-line headline, and one sentence per deciding reason."""

    outcome: Outcome
    headline: str
    reasons: tuple[str, ...]
    concurrency: int | None = None


@dataclass(frozen=True)
class Figures:
    """What the sentences quote, at one concurrency (``None``: not measured)."""

    concurrency: int
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    confidence: float = 0.90
    rounds_needed: int | None = None
    alpha: float | None = None
    c: float | None = None
    g: float | None = None
    v: float | None = None
    v_low: float | None = None
    v_high: float | None = None
    paper: float | None = None
    extended: float | None = None
    extended_low: float | None = None
    extended_high: float | None = None
    agrees: bool | None = None
    # the share of a baseline request before its first token, which speculation leaves as is,
    # and the decode-phase prediction before that share dilutes it (costmodel.end_to_end)
    prefill_share: float | None = None
    extended_decode: float | None = None
    break_even_c: float | None = None
    break_even_v: float | None = None
    k_configured: int | None = None
    largest_paying_k: int | None = None
    best_k: int | None = None
    best_k_improvement: float | None = None
    kv_drop: float | None = None
    preemption_increase: float | None = None
    slots_cover: bool | None = None
    problems: tuple[str, ...] = ()
    v_note: str = ""
    c_high: float | None = None  # c's upper confidence bound: the c the gate holds α against
    c_note: str = ""  # set when measured and black-box c disagree (c then counts as unmeasured)
    # the sequential stopping rule at P95 (bench.report.Stopping), against the admission threshold
    stop_outcome: str = ""
    stop_rounds: int | None = None
    stop_reason: str = ""
    stop_threshold: float | None = None
    stop_rounds_to_resolve: int | None = None
    stop_looks: int = 0  # looks the rule planned (0: not recorded)
    stop_per_look_confidence: float | None = None
    stop_why: str = ""  # for "settled": α ≤ c, or no draft length pays at c's lower bound


def _x(v: float) -> str:
    return f"{v:.2f}×"


def percent(confidence: float) -> str:
    """A confidence as a percentage with the digits a Bonferroni split needs (96.7%, 90%)."""
    return f"{confidence * 100:.3g}%"


def looks_text(looks: int, per_look: float | None, nominal: float | None = None) -> str:
    """How the sequential rule's looks were judged, for a sentence; "" when not recorded."""
    if looks <= 0 or per_look is None:
        return ""
    overall = f" for {percent(nominal)} overall" if nominal is not None else ""
    if looks == 1:
        return f"one look at {percent(per_look)}"
    return f"{looks} planned looks, each a repeated CI at {percent(per_look)}{overall}"


def _ci(f: Figures) -> str:
    return f"{percent(f.confidence)} CI {f.ratio_low:.2f}–{f.ratio_high:.2f}"


def _outcome(f: Figures) -> Outcome:
    if f.problems:
        return "invalid"
    if f.ratio is None or f.ratio_low is None or f.ratio_high is None:
        return "unmeasured"
    if f.ratio_low > 1.0:
        return "wins"
    if f.ratio_high < 1.0:
        return "loses"
    return "inconclusive"


def _headline(f: Figures, outcome: Outcome, where: str) -> str:
    if outcome == "invalid":
        return f"the comparison {where} is not valid: {f.problems[0]}"
    if outcome == "unmeasured":
        return f"speculation is unmeasured {where}: the throughput ratio needs two rounds per arm"
    assert f.ratio is not None  # noqa: S101 - measured outcomes have a ratio
    if outcome == "wins":
        return f"speculation wins {where}: {_x(f.ratio)} ({_ci(f)})"
    if outcome == "loses":
        return f"speculation loses {where}: {_x(f.ratio)} ({_ci(f)})"
    more = (f"; about {f.rounds_needed} rounds per arm would resolve it"
            if f.rounds_needed else "")
    return (f"no verdict yet {where}: the ratio {_x(f.ratio)} has a {_ci(f)} that includes 1"
            + more)


def _acceptance_word(a: float) -> str:
    return "high" if a >= 0.8 else "moderate" if a >= 0.5 else "low"


def _break_even(f: Figures) -> str:
    parts = []
    if f.break_even_v is not None and f.break_even_v > 0:
        parts.append(f"v < {f.break_even_v:.1f}")
    if f.break_even_c is not None and f.break_even_c > 0:
        parts.append(f"a draft with c < {f.break_even_c:.2f}")
    if not parts:
        return "no draft breaks even at this acceptance"
    cheap = " (at this v even a free draft would not pay)" \
        if f.break_even_c is not None and f.break_even_c <= 0 else ""
    return "break-even needs " + " or ".join(parts) + cheap


def _why_loss(f: Figures) -> str | None:
    a, c, v = f.alpha, f.c, f.v
    if a is None or c is None:
        missing = " and ".join(n for n, x in (("acceptance α", a), ("draft cost c", c))
                               if x is None)
        return f"{missing} unmeasured, so the loss cannot be attributed"
    if c >= _C_LIKE_TARGET:
        bec = (f"; break-even needs a draft with c < {f.break_even_c:.2f}"
               if f.break_even_c is not None and f.break_even_c > 0 else "")
        acc = (f"even acceptance {a:.2f} cannot pay" if a >= 0.5
               else f"acceptance is low too ({a:.2f})")
        return (f"the draft costs about as much as the target (c ≈ 1: measured {c:.2f}), so "
                f"each drafted token costs nearly a full target step and {acc}{bec}")
    if a <= (f.c_high if f.c_high is not None else c):
        bound = f" (upper bound {f.c_high:.2f})" if f.c_high is not None else ""
        return (f"acceptance α {a:.2f} is not above the draft cost c {c:.2f}{bound}: no draft "
                "length can pay; a draft that agrees with the target more often is needed")
    if f.extended is not None and f.extended >= 1.0 and v is not None:
        return (f"acceptance {a:.2f}, a draft costing c {c:.2f} and verification at {v:.1f} "
                f"decode steps predict a win ({_x(f.extended)}), so the loss comes from outside "
                "the drafter")
    if v is not None and v >= _V_DOMINATES:
        return (f"acceptance is {_acceptance_word(a)} ({a:.2f}) but each verification costs "
                f"{v:.1f} decode steps on this hardware; {_break_even(f)}")
    if v is None:
        return (f"acceptance {a:.2f} and draft cost c {c:.2f} do not explain the loss, and the "
                f"verification cost v is unmeasured{': ' + f.v_note if f.v_note else ''}")
    return (f"acceptance {a:.2f}, draft cost c {c:.2f} and verification at {v:.1f} decode steps "
            f"leave too little per step; {_break_even(f)}")


def _why_win(f: Figures) -> str | None:
    if f.alpha is None or f.c is None:
        return None
    if f.extended is None or f.v is None:
        paper = f"; the paper's form predicts {_x(f.paper)}" if f.paper is not None else ""
        return (f"acceptance {f.alpha:.2f} with a draft costing c {f.c:.2f} pays{paper}; "
                "verification cost unmeasured" + (f" ({f.v_note})" if f.v_note else ""))
    return (f"acceptance {f.alpha:.2f}, a draft costing c {f.c:.2f} and verification at "
            f"{f.v:.1f} decode steps predict {_x(f.extended)} ({f.extended_low:.2f}–"
            f"{f.extended_high:.2f}){_diluted(f)}; the paper's form, which charges verification "
            f"one step, predicts {_x(f.paper or 0.0)}")


def _diluted(f: Figures) -> str:
    """How much the unsped prefill takes off the decode-phase prediction, when it matters."""
    p, d = f.prefill_share, f.extended_decode
    if p is None or d is None or p < _PREFILL_MATTERS:
        return ""
    return (f" end to end: {_x(d)} while decoding, but the prefill and first token, "
            f"{p:.0%} of each baseline request, are not sped up")


def _other_causes(f: Figures) -> tuple[list[str], list[str]]:
    """(causes found, checks that found nothing), from the KV ceiling, preemption, slots."""
    found: list[str] = []
    clear: list[str] = []
    if f.kv_drop is not None:
        (found if f.kv_drop > _KV_DROP else clear).append(
            f"the KV capacity drop with speculation ({f.kv_drop:.0%})")
    if f.preemption_increase is not None:
        (found if f.preemption_increase > 0 else clear).append(
            f"preemptions (+{f.preemption_increase:g} with speculation)")
    if f.slots_cover is not None:
        (clear if f.slots_cover else found).append(
            "server slots against the concurrency" + ("" if f.slots_cover else
                                                       " (requests queued)"))
    return found, clear


def _mismatch(f: Figures) -> str | None:
    if f.agrees is not False or f.ratio is None or f.extended_low is None \
            or f.extended_high is None:
        return None
    side = "below" if f.ratio < f.extended_low else "above"
    found, clear = _other_causes(f)
    if found:
        return (f"validity note: the measured {_x(f.ratio)} lies {side} the extended model's "
                f"{f.extended_low:.2f}–{f.extended_high:.2f}×, and it is explained by "
                f"{' and '.join(found)}, not by the drafter")
    checked = ", ".join(clear) if clear else "nothing the engine reports"
    return (f"validity note: the measured {_x(f.ratio)} lies {side} the extended model's "
            f"{f.extended_low:.2f}–{f.extended_high:.2f}×: something the model leaves out is "
            f"moving throughput; checked and clear: {checked}; not checked: the scheduler, an "
            "eager draft beside a graphed target")


def _c_trust(f: Figures) -> str | None:
    if not f.c_note:
        return None
    return f"the draft cost c cannot be trusted, so α > c counts as unmeasured: {f.c_note}"


def _stopping(f: Figures) -> str | None:
    if f.stop_reason == "settled":  # after a whole ABBA pair, look or not; CI below or not
        return (f"the rounds stopped after {f.stop_rounds} with the rejection settled: "
                + (f.stop_why or "α is at or below the draft cost c: no draft length can pay"))
    if f.stop_outcome != "inconclusive" or f.stop_rounds is None or f.stop_threshold is None:
        return None
    if f.stop_reason == "futile":
        return (f"the sequential rule stopped for futility after {f.stop_rounds} rounds: even "
                f"the top of the CI could not clear the admission threshold "
                f"{f.stop_threshold:.2f} by its last planned look at this noise, so it rejects")
    looks = looks_text(f.stop_looks, f.stop_per_look_confidence)
    if f.ratio_low is not None and f.ratio_low >= f.stop_threshold:  # cut short, CI clear
        return (f"the run was cut short after {f.stop_rounds} rounds "
                f"({f.stop_reason.replace('_', ' ')}) before the sequential rule's look: its CI "
                f"already clears the admission threshold {f.stop_threshold:.2f}, but a run cut "
                "short is never a pass; rerun with a larger time budget")
    need = (f"; about {f.stop_rounds_to_resolve} rounds per arm would resolve it at this noise"
            if f.stop_rounds_to_resolve else "; the ratio sits on the threshold")
    return (f"the sequential rule stopped after {f.stop_rounds} rounds "
            f"({f.stop_reason.replace('_', ' ')}{'; ' + looks if looks else ''}) with the CI "
            f"still containing the admission threshold {f.stop_threshold:.2f}, which is "
            f"inconclusive, never a pass{need}")


def _advice(f: Figures, outcome: Outcome) -> str | None:
    k, kc = f.largest_paying_k, f.k_configured
    if k is None or kc is None or f.extended is None:
        return None
    if k == 0 and outcome in ("loses", "inconclusive"):
        return (f"no draft length pays at concurrency {f.concurrency} under the extended "
                "model: switch speculation off there (K = 0)")
    if 0 < k < kc and f.best_k is not None and f.best_k_improvement is not None:
        return (f"a shorter draft pays better here: K ≤ {k} is predicted to win, best "
                f"K = {f.best_k} at {_x(f.best_k_improvement)} (configured K = {kc})")
    return None


def level_verdict(f: Figures, *, where: str | None = None) -> Verdict:
    """The verdict at one level and its sentences, in order: headline, why, caveat, advice."""
    place = where or f"at concurrency {f.concurrency}"
    outcome = _outcome(f)
    reasons: list[str] = []
    if outcome == "invalid":
        reasons += list(f.problems[1:])
    losing = f.ratio is not None and f.ratio < 1.0
    why = _why_win(f) if outcome == "wins" else _why_loss(f) if losing or outcome == "loses" \
        else None
    found, _ = _other_causes(f)
    if outcome == "loses" and found and f.extended_low is not None and f.extended_low > 1.0:
        why = (f"the loss is not the drafter's: the cost model predicts "
               f"{_x(f.extended or 0.0)}, but {' and '.join(found)} eat the win")
    reasons += [s for s in (why, _stopping(f), _c_trust(f), _mismatch(f), _advice(f, outcome))
                if s]
    return Verdict(outcome, _headline(f, outcome, place), tuple(reasons), f.concurrency)


# -- gathering figures from a report -----------------------------------------------------------


def figures_of(report: BenchReport, lv: LevelResult) -> Figures:
    """The figures of one level of a report (the stopping rule's only at P95, where it looks)."""
    m, adv, vc = lv.model, lv.advice, lv.verify_cost
    st = report.stopping if lv.concurrency == report.settings.p95_concurrency else None
    chk = lv.c_check
    r = lv.ratio
    pre = (lv.preemptions_spec - lv.preemptions_base
           if lv.preemptions_spec is not None and lv.preemptions_base is not None else None)
    return Figures(
        concurrency=lv.concurrency, ratio=r.ratio if r else None, ratio_low=r.low if r else None,
        ratio_high=r.high if r else None, confidence=r.confidence if r else 0.90,
        rounds_needed=lv.rounds_needed, alpha=lv.acceptance.alpha, c=lv.c_measured,
        g=lv.acceptance.mean_draft_length, v=m.v.value if m else vc.v if vc else None,
        v_low=vc.low if vc else None, v_high=vc.high if vc else None,
        paper=m.paper if m else lv.predicted_improvement,
        extended=m.extended.value if m else None, extended_low=m.extended.low if m else None,
        extended_high=m.extended.high if m else None, agrees=m.agrees if m else None,
        prefill_share=m.prefill_share if m else None,
        extended_decode=m.extended_decode.value if m and m.extended_decode else None,
        break_even_c=adv.break_even_c if adv else None,
        break_even_v=adv.break_even_v if adv else None,
        k_configured=adv.k_configured if adv else None,
        largest_paying_k=adv.largest_paying_k if adv else None,
        best_k=adv.best_k if adv else None,
        best_k_improvement=adv.best_k_improvement if adv else None,
        kv_drop=report.ceiling.drop, preemption_increase=pre,
        slots_cover=report.validity.slots_cover_concurrency, problems=report.validity.problems,
        v_note=lv.verify_note, c_high=lv.c_ci.high if lv.c_ci else None,
        c_note=chk.note if chk is not None and not chk.consistent else "",
        stop_outcome=st.outcome if st else "", stop_rounds=st.rounds if st else None,
        stop_reason=st.reason if st else "", stop_threshold=st.threshold if st else None,
        stop_rounds_to_resolve=st.rounds_to_resolve if st else None,
        stop_looks=st.looks if st else 0, stop_why=st.why if st else "",
        stop_per_look_confidence=st.per_look_confidence if st else None)


def bench_verdict(report: BenchReport) -> Verdict:
    """The verdict at the deployment's P95 concurrency, then one line per other level."""
    p95 = report.settings.p95_concurrency
    lv = report.at_p95
    if lv is None:
        return Verdict("unmeasured", f"speculation is unmeasured at your P95 concurrency {p95}: "
                       "that level was not in the sweep", (), p95)
    top = level_verdict(figures_of(report, lv), where=f"at your P95 concurrency {p95}")
    others = [level_verdict(figures_of(report, o)) for o in report.levels if o is not lv]
    tail = [f"{o.headline}" for o in others if o.outcome != top.outcome]
    if report.crossover_concurrency is not None:
        tail.append(f"speculation pays up to concurrency {report.crossover_concurrency} "
                    "(the crossover)")
    return Verdict(top.outcome, top.headline, (*top.reasons, *tail), p95)


def c_basis(pairs: int, launches: int) -> str:
    """What c's interval is over: request-group pairs, counted apart from server launches.

    With the draft served beside the baseline, each launch gives one (draft, baseline) pair
    per request group, so "12 rounds" would have counted 12 pairs from 4 launches.
    """
    if pairs == launches:
        return f"{pairs} launches"
    return f"{pairs} request-group pairs from {launches} launches"


def _why(v: Verdict) -> str:
    """The one sentence of why: the first deciding reason, else the headline."""
    return v.reasons[0] if v.reasons else v.headline


def bench_decision(report: BenchReport) -> tuple[str, str]:
    """The decision in one word and one sentence of why, ahead of the evidence.

    A benchmark decides nothing by itself, but it says what admission would make of its
    throughput evidence at P95: REJECTED (an invalid comparison, a ratio clearly below the
    threshold or futile), INCONCLUSIVE (the rounds, the budget or an interrupt ended it with
    the threshold still inside the CI), PASSES (the CI clears the threshold: the other
    criteria are admit's). The sentence names α, c, v or the validity problem that decided.
    """
    v = report.verdict or bench_verdict(report)
    st = report.stopping
    if v.outcome == "invalid":
        return "REJECTED", v.headline
    if st is not None and st.outcome != "unmeasured":
        if st.reason in ("futile", "settled"):  # the why and the rule's stop, not "no verdict"
            return "REJECTED", "; ".join(v.reasons[:2]) if v.reasons else v.headline
        if st.outcome == "below":
            return "REJECTED", f"{v.headline}; {_why(v)}" if v.reasons else v.headline
        if st.outcome == "inconclusive":
            return "INCONCLUSIVE", f"{v.headline}; {_why(v)}" if v.reasons else v.headline
        return "PASSES", f"{v.headline}; {_why(v)}" if v.reasons else v.headline
    word = {"wins": "PASSES", "loses": "REJECTED"}.get(v.outcome, "INCONCLUSIVE")
    return word, f"{v.headline}; {_why(v)}" if v.reasons else v.headline


def gate_decision(v: Verdict) -> tuple[str, str]:
    """An admission verdict in one word and the sentence of why (its first reason)."""
    if v.reasons:
        return v.outcome.upper(), v.reasons[0]
    return v.outcome.upper(), v.headline.split(": ", 1)[-1]


class CriterionLike(Protocol):
    """The gate's criteria (:class:`specbundle.admit.decision.Criterion`) as read here."""

    @property
    def name(self) -> str: ...
    @property
    def passed(self) -> bool: ...
    @property
    def measured(self) -> str: ...
    @property
    def detail(self) -> str: ...


_CRITERION = {
    "alpha_above_c": "acceptance does not beat the draft's cost: {detail}",
    "ceiling_drop": "speculation takes too much of the KV cache: {detail}; that memory would "
                    "buy more concurrency than the draft buys speed",
    "preemption_increase": "speculation makes the engine preempt requests: {detail}",
    "token_agreement": "the two arms do not generate the same outputs: {detail}",
    "engine_errors": "requests failed during the benchmark: {detail}",
    "validity": "the comparison is not fair: {detail}",
    "tuned_schedule": "the tuned schedule leaves no speculative configuration to admit: {detail}",
}


def _criterion_sentence(c: CriterionLike, bench: Verdict | None) -> list[str]:
    if c.name == "throughput_ratio" and bench is not None:
        if bench.outcome == "wins" or c.measured == "inconclusive":
            # above 1 but not clear of the admission threshold: the gate's figures decide
            return [f"throughput does not clear the admission threshold: {c.detail}",
                    *bench.reasons[:3]]
        return [f"throughput: {bench.headline}", *bench.reasons[:3]]
    if c.name == "alpha_above_c" and "c=unmeasured" in c.measured:
        return [f"the draft cost c could not be trusted, so α > c fails: {c.detail}"]
    if c.measured == "unmeasured":
        return [f"{c.name.replace('_', ' ')} could not be measured, so it fails: {c.detail}"]
    template = _CRITERION.get(c.name, c.name.replace("_", " ") + ": {detail}")
    return [template.format(detail=c.detail)]


def gate_verdict(criteria: Sequence[CriterionLike], report: BenchReport | None, *,
                 admitted: bool, earlier: Sequence[str] = (),
                 inconclusive: bool = False) -> Verdict:
    """The admission verdict: one sentence per failed criterion (the deciding one if all pass).

    ``earlier`` are reasons from before the gate (verification, an unmeasurable bench);
    ``inconclusive``: the decision's own outcome (the bench was cut short, never a pass).
    """
    bench = bench_verdict(report) if report is not None else None
    p95 = report.settings.p95_concurrency if report is not None else None
    if admitted:
        why = [bench.headline, *bench.reasons[:2]] if bench else []
        return Verdict("admitted", "admitted: every criterion passed", tuple(why), p95)
    failed = [c for c in criteria if not c.passed]
    reasons = list(earlier)
    for c in failed:
        reasons += _criterion_sentence(c, bench)
    st = report.stopping if report is not None else None
    if inconclusive and st is not None:
        cut = {"time_budget": f"its time budget ({st.time_budget_s or 0:.0f} s) ran out",
               "interrupted": "it was interrupted",
               "max_rounds": f"it reached its {st.max_rounds} rounds"}.get(st.reason, st.reason)
        return Verdict("inconclusive", f"inconclusive, not admitted: the benchmark stopped "
                       f"after {st.rounds} rounds because {cut}, before the throughput ratio "
                       f"was clear of the threshold {st.threshold:.2f} either way",
                       tuple(reasons), p95)
    if not failed:
        first = reasons[0] if reasons else "no criterion could be evaluated"
        return Verdict("rejected", f"rejected before the gate: {first}", tuple(reasons[1:]),
                       p95)
    names = ", ".join(c.name for c in failed)
    return Verdict("rejected", f"rejected: {len(failed)} of {len(criteria)} criteria failed "
                   f"({names})", tuple(reasons), p95)


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [_sorted(v) for v in value]
    return value


def verdict_first(doc: dict[str, Any], key: str = "verdict") -> str:
    """JSON text with ``key`` first and every other key sorted (stable, like sort_keys)."""
    ordered = {key: _sorted(doc[key])} if key in doc else {}
    ordered.update(_sorted({k: v for k, v in doc.items() if k != key}))
    return json.dumps(ordered, indent=2, default=str) + "\n"
