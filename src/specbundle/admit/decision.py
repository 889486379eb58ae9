"""The admission gate: a pure function of the benchmark report and the spec's thresholds.

Fail closed: a criterion that could not be measured fails with "unmeasured", and every
failed criterion is listed (not only the first), so an operator sees all that stands
between the bundle and admission. The operating point is the deployment's P95 concurrency.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbundle.bench.report import BenchReport
from specbundle.bench.verdict import c_basis, looks_text, percent
from specbundle.spec import AdmissionThresholds

__all__ = ["Criterion", "GateResult", "evaluate"]


@dataclass(frozen=True)
class Criterion:
    """One check of the gate: what was measured, against what, and the verdict."""

    name: str
    passed: bool
    measured: str
    threshold: str
    detail: str


#: Why the bench stopped before the evidence could settle the ratio: not a clear "no".
_CUT_SHORT = ("time_budget", "interrupted", "max_rounds")


@dataclass(frozen=True)
class GateResult:
    """All criteria; admitted only if every one passed.

    ``inconclusive``: not admitted only because the bench ran out of rounds, time or was
    interrupted with the throughput ratio still undecided (every other failed criterion
    unmeasured): signed as FAILED all the same, named for what it is.
    """

    criteria: tuple[Criterion, ...]
    inconclusive: bool = False

    @property
    def admitted(self) -> bool:
        """Every criterion passed (and there was at least one)."""
        return bool(self.criteria) and all(c.passed for c in self.criteria)

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why not: one line per failed criterion."""
        return tuple(f"{c.name}: {c.detail}" for c in self.criteria if not c.passed)


def _f(v: float | None, spec: str = ".3f") -> str:
    return "unmeasured" if v is None else format(v, spec)


def _ratio(report: BenchReport, t: AdmissionThresholds) -> Criterion:
    p95 = report.settings.p95_concurrency
    lv = report.at_p95
    thr = f">= {t.min_throughput_ratio_lower_bound:.3f}"
    st = report.stopping
    if lv is None or lv.ratio is None:  # a run cut short before two rounds per arm says so
        cut = (f" (inconclusive: stopped after {st.rounds} rounds, "
               f"{st.reason.replace('_', ' ')})" if st is not None and st.reason in _CUT_SHORT
               else "")
        return Criterion("throughput_ratio", False, "unmeasured", thr,
                         f"throughput ratio at P95 concurrency {p95} unmeasured{cut}")
    r = lv.ratio
    # cut short between the rule's looks (budget, operator): never a pass, whatever the CI
    cut_short = st is not None and st.reason in ("time_budget", "interrupted") \
        and st.outcome == "inconclusive"
    ok = r.low >= t.min_throughput_ratio_lower_bound and not cut_short
    # the sequential rule's repeated CI: the gate reads the interval the rule stopped on
    looks = looks_text(st.looks, st.per_look_confidence, report.settings.confidence) \
        if st is not None and st.looks > 1 else ""
    what = (f"throughput ratio spec/base at concurrency {p95} = {r.ratio:.3f}, "
            f"{percent(r.confidence)} CI [{r.low:.3f}, {r.high:.3f}] over "
            f"{r.n_base}+{r.n_spec} rounds" + (f" (sequential rule: {looks})" if looks else ""))
    if ok:
        return Criterion("throughput_ratio", True, f"{r.low:.3f}", thr, what)
    more = (f"; about {lv.rounds_needed} rounds per arm would resolve it at this noise"
            if lv.rounds_needed else "")
    if st is not None and st.reason == "settled":  # the why: α ≤ c, or the model's bound
        return Criterion("throughput_ratio", False, "settled", thr,
                         f"{what}: not run to a decision, rejection was settled first: "
                         + (st.why or "α ≤ c (see alpha_above_c): no draft length can pay"))
    if st is not None and st.reason == "futile":
        return Criterion("throughput_ratio", False, "futile", thr,
                         f"{what}: futile, even the top of the CI, {r.high:.3f}, could not clear "
                         f"{t.min_throughput_ratio_lower_bound:.3f} by the last planned look "
                         f"({st.max_rounds} rounds) at this noise")
    if st is not None and st.outcome == "inconclusive":  # its own outcome, never a pass
        need = (f"; about {st.rounds_to_resolve} rounds per arm would resolve it at this noise"
                if st.rounds_to_resolve else "; the ratio sits on the threshold")
        held = ("clears" if r.low >= t.min_throughput_ratio_lower_bound else "contains")
        return Criterion("throughput_ratio", False, "inconclusive", thr,
                         f"{what}: inconclusive, the CI {held} "
                         f"{t.min_throughput_ratio_lower_bound:.3f} after {st.rounds} rounds "
                         f"(stopped: {st.reason.replace('_', ' ')}, before the rule's look: "
                         f"never a pass){need}")
    return Criterion("throughput_ratio", False, f"{r.low:.3f}", thr,
                     f"{what}: lower bound {r.low:.3f} < "
                     f"{t.min_throughput_ratio_lower_bound:.3f}{more}")


def _alpha_c(report: BenchReport) -> Criterion:
    """α against c's upper confidence bound (the point c when only one round measured it)."""
    lv = report.at_p95
    alpha = lv.acceptance.alpha if lv else None
    ci = lv.c_ci if lv else None
    c = ci.high if ci is not None else (lv.c_measured if lv else None)
    shown = (f"c = {ci.ratio:.3f} (upper bound {ci.high:.3f}, {percent(ci.confidence)} CI over "
             f"{c_basis(ci.n_base, len(lv.base.round_output_throughput) if lv else 0)})"
             if ci is not None else f"c = {_f(c)}")
    measured = f"α={_f(alpha)} c={_f(c)}"
    if alpha is None or c is None:
        missing = " and ".join(n for n, v in (("α", alpha), ("c", c)) if v is None)
        why = lv.acceptance.note if lv and lv.acceptance.note else ""
        return Criterion("alpha_above_c", False, measured, "α > c",
                         f"{missing} unmeasured" + (f" ({why})" if why else ""))
    if lv is not None and lv.c_check is not None and not lv.c_check.consistent:
        return Criterion("alpha_above_c", False, f"α={alpha:.3f} c=unmeasured", "α > c",
                         f"c unmeasured: measured and black-box c disagree ({lv.c_check.note})")
    if alpha > c:
        return Criterion("alpha_above_c", True, measured, "α > c", f"α = {alpha:.3f} > {shown}")
    return Criterion("alpha_above_c", False, measured, "α > c",
                     f"α = {alpha:.3f} ≤ {shown}: no speed-up is possible at any draft depth")


def _ceiling(report: BenchReport, t: AdmissionThresholds) -> Criterion:
    drop = report.ceiling.drop
    thr = f"<= {t.max_concurrency_ceiling_drop:.3f}"
    if drop is None:
        return Criterion("ceiling_drop", False, "unmeasured", thr,
                         f"concurrency ceiling unmeasured: {report.ceiling.note}")
    ok = drop <= t.max_concurrency_ceiling_drop
    return Criterion("ceiling_drop", ok, f"{drop:.3f}", thr,
                     f"KV capacity drops by {drop:.1%} with speculation"
                     + ("" if ok else f" (> {t.max_concurrency_ceiling_drop:.1%})"))


def _preemption(report: BenchReport, t: AdmissionThresholds) -> Criterion:
    lv = report.at_p95
    thr = f"<= {t.max_preemption_increase}"
    if lv is None or lv.preemptions_base is None or lv.preemptions_spec is None:
        return Criterion("preemption_increase", False, "unmeasured", thr,
                         "preemptions unmeasured at P95 concurrency")
    inc = lv.preemptions_spec - lv.preemptions_base
    ok = inc <= t.max_preemption_increase
    return Criterion("preemption_increase", ok, f"{inc:g}", thr,
                     f"preemptions spec {lv.preemptions_spec:g} vs base {lv.preemptions_base:g}")


def _errors(report: BenchReport, t: AdmissionThresholds) -> Criterion:
    n = report.validity.engine_errors
    ok = n <= t.max_engine_errors
    sample = f": {report.validity.error_samples[0]}" if report.validity.error_samples else ""
    return Criterion("engine_errors", ok, str(n), f"<= {t.max_engine_errors}",
                     f"{n} failed request(s){sample if not ok else ''}")


def _agreement(report: BenchReport, t: AdmissionThresholds) -> Criterion:
    """Speculation's common prefix with the baseline relative to the baseline's own A/A prefix.

    Reports without the floor (before it was measured) keep the old full-output rule.
    """
    fl = report.validity.agreement
    if fl is not None:
        return _agreement_floor(report, t)
    a = report.validity.token_agreement
    thr = f">= {t.min_token_agreement:.3f}"
    if a is None:
        return Criterion("token_agreement", False, "unmeasured", thr,
                         "token agreement unmeasured: no prompt completed in both arms")
    ok = a >= t.min_token_agreement
    return Criterion("token_agreement", ok, f"{a:.3f}", thr,
                     f"{a:.1%} of {report.validity.compared_outputs} outputs identical in both "
                     "arms" + ("" if ok else f" (< {t.min_token_agreement:.1%})"))


def _agreement_floor(report: BenchReport, t: AdmissionThresholds) -> Criterion:
    fl = report.validity.agreement
    assert fl is not None  # noqa: S101 - checked by the caller
    thr = f">= {t.min_agreement_vs_floor:.2f} of the A/A floor"
    if fl.relative is None or fl.spec_mean_prefix is None or fl.aa_mean_prefix is None:
        why = "no baseline A/A pair" if not fl.aa_pairs else "no prompt completed in both arms"
        return Criterion("token_agreement", False, "unmeasured", thr,
                         f"token agreement unmeasured: {why}")
    rel = fl.relative if fl.relative_numerics is None else max(fl.relative,
                                                                 fl.relative_numerics)
    ok = rel >= t.min_agreement_vs_floor
    ident = f"{fl.spec_identical:.0%}" if fl.spec_identical is not None else "-"
    what = (f"mean common prefix {fl.spec_mean_prefix:.1f} of {fl.max_tokens} tokens "
            f"({fl.basis}) vs the baseline's own {fl.aa_mean_prefix:.1f} over {fl.aa_pairs} "
            f"A/A pairs = {fl.relative:.2f}; {ident} of {fl.spec_pairs} outputs identical")
    if fl.probed:
        what += (f"; at {fl.near_ties} of {fl.probed} first divergences speculation took the "
                 f"target's close runner-up (a near-tie: numerics of the verification batch), "
                 f"which forgiven gives {rel:.2f}")
    return Criterion("token_agreement", ok, f"{rel:.3f}", thr,
                     what + ("" if ok else f" (< {t.min_agreement_vs_floor:.2f}: speculation "
                                           "changes the outputs beyond numerics)"))


def _validity(report: BenchReport) -> Criterion:
    covered = ("token agreement", "request(s) failed")
    rest = [p for p in report.validity.problems if not any(c in p for c in covered)]
    return Criterion("validity", not rest, "; ".join(rest) or "ok", "no problems",
                     "; ".join(rest) or "fixed length, no repetition, counters, equal settings")


def _tuned(report: BenchReport) -> Criterion | None:
    """With a tuned schedule in force: the levels where it switches speculation off.

    Off at the P95 operating point means there is no speculative configuration to admit
    there (llama.cpp serves one K for every load): rejected, saying so.
    """
    t = report.server.get("tuned_schedule")
    if not isinstance(t, dict):
        return None
    off = [int(x) for x in t.get("off_levels", [])]
    k95 = t.get("k_at_p95")
    p95 = report.settings.p95_concurrency
    where = f"speculation off at concurrency {', '.join(map(str, off))}" if off else \
        "speculation on at every measured level"
    run = t.get("run_id", "?")
    if k95 == 0:
        return Criterion("tuned_schedule", False, f"K=0 at {p95}", "K > 0 at P95",
                         f"tuned schedule (run {run}) switches speculation off at the P95 "
                         f"concurrency {p95}: {where}")
    return Criterion("tuned_schedule", True, f"K={k95} at {p95}", "K > 0 at P95",
                     f"tuned schedule (run {run}) in force: {where}")


def evaluate(report: BenchReport, thresholds: AdmissionThresholds) -> GateResult:
    """Apply every criterion of ``thresholds`` to ``report``."""
    crit = [_ratio(report, thresholds)]
    if thresholds.require_alpha_above_c:
        crit.append(_alpha_c(report))
    crit += [_ceiling(report, thresholds), _preemption(report, thresholds),
             _errors(report, thresholds), _agreement(report, thresholds), _validity(report)]
    tuned = _tuned(report)
    if tuned is not None:
        crit.append(tuned)
    return GateResult(tuple(crit), _inconclusive(report, crit))


def _inconclusive(report: BenchReport, crit: list[Criterion]) -> bool:
    """The run was cut short with the ratio undecided, and nothing else clearly failed."""
    st = report.stopping
    if st is None or st.reason not in _CUT_SHORT or st.outcome not in ("inconclusive",
                                                                       "unmeasured"):
        return False
    failed = [c for c in crit if not c.passed]
    return bool(failed) and all(c.measured == "inconclusive" or "unmeasured" in c.measured
                                for c in failed)
