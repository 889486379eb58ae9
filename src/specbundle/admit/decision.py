"""The admission gate: a pure function of the benchmark report and the spec's thresholds.

Fail closed: a criterion that could not be measured fails with "unmeasured", and every
failed criterion is listed (not only the first), so an operator sees all that stands
between the bundle and admission. The operating point is the deployment's P95 concurrency.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbundle.bench.report import BenchReport
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


@dataclass(frozen=True)
class GateResult:
    """All criteria; admitted only if every one passed."""

    criteria: tuple[Criterion, ...]

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
    if lv is None or lv.ratio is None:
        return Criterion("throughput_ratio", False, "unmeasured", thr,
                         f"throughput ratio at P95 concurrency {p95} unmeasured")
    r = lv.ratio
    ok = r.low >= t.min_throughput_ratio_lower_bound
    what = (f"throughput ratio spec/base at concurrency {p95} = {r.ratio:.3f}, "
            f"{r.confidence:.0%} CI [{r.low:.3f}, {r.high:.3f}] over {r.n_base}+{r.n_spec} rounds")
    if ok:
        return Criterion("throughput_ratio", True, f"{r.low:.3f}", thr, what)
    more = (f"; about {lv.rounds_needed} rounds per arm would resolve it at this noise"
            if lv.rounds_needed else "")
    return Criterion("throughput_ratio", False, f"{r.low:.3f}", thr,
                     f"{what}: lower bound {r.low:.3f} < "
                     f"{t.min_throughput_ratio_lower_bound:.3f}{more}")


def _alpha_c(report: BenchReport) -> Criterion:
    lv = report.at_p95
    alpha = lv.acceptance.alpha if lv else None
    c = lv.c_measured if lv else None
    measured = f"α={_f(alpha)} c={_f(c)}"
    if alpha is None or c is None:
        missing = " and ".join(n for n, v in (("α", alpha), ("c", c)) if v is None)
        why = lv.acceptance.note if lv and lv.acceptance.note else ""
        return Criterion("alpha_above_c", False, measured, "α > c",
                         f"{missing} unmeasured" + (f" ({why})" if why else ""))
    if alpha > c:
        return Criterion("alpha_above_c", True, measured, "α > c",
                         f"α = {alpha:.3f} > c = {c:.3f}")
    return Criterion("alpha_above_c", False, measured, "α > c",
                     f"α = {alpha:.3f} ≤ c = {c:.3f}: no speed-up is possible at any draft depth")


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
    a = report.validity.token_agreement
    thr = f">= {t.min_token_agreement:.3f}"
    if a is None:
        return Criterion("token_agreement", False, "unmeasured", thr,
                         "token agreement unmeasured: no prompt completed in both arms")
    ok = a >= t.min_token_agreement
    return Criterion("token_agreement", ok, f"{a:.3f}", thr,
                     f"{a:.1%} of {report.validity.compared_outputs} outputs identical in both "
                     "arms" + ("" if ok else f" (< {t.min_token_agreement:.1%})"))


def _validity(report: BenchReport) -> Criterion:
    covered = ("token agreement", "request(s) failed")
    rest = [p for p in report.validity.problems if not any(c in p for c in covered)]
    return Criterion("validity", not rest, "; ".join(rest) or "ok", "no problems",
                     "; ".join(rest) or "fixed length, no repetition, counters, equal settings")


def evaluate(report: BenchReport, thresholds: AdmissionThresholds) -> GateResult:
    """Apply every criterion of ``thresholds`` to ``report``."""
    crit = [_ratio(report, thresholds)]
    if thresholds.require_alpha_above_c:
        crit.append(_alpha_c(report))
    crit += [_ceiling(report, thresholds), _preemption(report, thresholds),
             _errors(report, thresholds), _agreement(report, thresholds), _validity(report)]
    return GateResult(tuple(crit))
