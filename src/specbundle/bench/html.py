"""Self-contained HTML rendering of a bench report, plots as inline SVG.

Hand-written SVG because the isolated side should not need a plotting stack and the page
must load nothing from anywhere (GuideLLM's HTML report fetches its UI from a CDN); three
small charts are a few dozen lines: throughput vs concurrency for both arms (with the
per-round spread), per-position acceptance, and predicted vs measured speed-up.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from specbundle.bench.report import BenchReport, LevelResult
from specbundle.bench.verdict import bench_decision, looks_text

__all__ = ["decision_html", "render_html"]

_W, _H, _PAD = 520, 260, 44
_COLORS = {"base": "#4c72b0", "spec": "#dd8452", "pred": "#55a868", "meas": "#c44e52",
           "ext": "#8172b3"}


def _scale(v: float, lo: float, hi: float, a: float, b: float) -> float:
    return a + (v - lo) / ((hi - lo) or 1.0) * (b - a)


def _frame(title: str, xlab: str, ylab: str, ymax: float, body: str, xticks: str) -> str:
    ticks = "".join(
        f'<text x="{_PAD - 6}" y="{_scale(f * ymax, 0, ymax, _H - _PAD, 20):.1f}" '
        f'text-anchor="end" font-size="10">{f * ymax:.3g}</text>'
        for f in (0.0, 0.5, 1.0))
    return (
        f'<figure><figcaption>{html.escape(title)}</figcaption>'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" role="img">'
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - 10}" y2="{_H - _PAD}" stroke="#333"/>'
        f'<line x1="{_PAD}" y1="20" x2="{_PAD}" y2="{_H - _PAD}" stroke="#333"/>'
        f'{ticks}{xticks}{body}'
        f'<text x="{_W / 2}" y="{_H - 8}" text-anchor="middle" font-size="11">'
        f'{html.escape(xlab)}</text>'
        f'<text x="12" y="{_H / 2}" transform="rotate(-90 12 {_H / 2})" text-anchor="middle" '
        f'font-size="11">{html.escape(ylab)}</text></svg></figure>')


def _xs(n: int) -> list[float]:
    return [_scale(i, -0.5, n - 0.5, _PAD, _W - 10) for i in range(n)]


def _xticks(labels: Sequence[str]) -> str:
    return "".join(f'<text x="{x:.1f}" y="{_H - _PAD + 14}" text-anchor="middle" '
                   f'font-size="10">{html.escape(lab)}</text>'
                   for x, lab in zip(_xs(len(labels)), labels, strict=True))


def _line(xs: Sequence[float], ys: Sequence[float], ymax: float, color: str, label: str,
          k: int) -> str:
    pts = " ".join(f"{x:.1f},{_scale(y, 0, ymax, _H - _PAD, 20):.1f}"
                   for x, y in zip(xs, ys, strict=True))
    dots = "".join(f'<circle cx="{x:.1f}" cy="{_scale(y, 0, ymax, _H - _PAD, 20):.1f}" r="3" '
                   f'fill="{color}"/>' for x, y in zip(xs, ys, strict=True))
    legend = (f'<rect x="{_W - 150}" y="{24 + 14 * k}" width="10" height="10" fill="{color}"/>'
              f'<text x="{_W - 136}" y="{33 + 14 * k}" font-size="10">{html.escape(label)}</text>')
    return f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>{dots}{legend}'


def _throughput(levels: Sequence[LevelResult]) -> str:
    if not levels:
        return ""
    xs = _xs(len(levels))
    every = [t for lv in levels for t in (*lv.base.round_output_throughput,
                                          *lv.spec.round_output_throughput)] or [1.0]
    ymax = max(every) * 1.1
    body = ""
    for k, arm in enumerate(("base", "spec")):
        ys = [getattr(lv, arm).output_throughput for lv in levels]
        body += _line(xs, ys, ymax, _COLORS[arm], f"{arm} (mean of rounds)", k)
        for x, lv in zip(xs, levels, strict=True):
            rounds = getattr(lv, arm).round_output_throughput
            if rounds:
                y1, y2 = (_scale(v, 0, ymax, _H - _PAD, 20) for v in (min(rounds), max(rounds)))
                body += (f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y1:.1f}" y2="{y2:.1f}" '
                         f'stroke="{_COLORS[arm]}" stroke-opacity="0.5" stroke-width="6"/>')
    return _frame("Output throughput vs concurrency (bars: spread over rounds)", "concurrency",
                  "tokens/s", ymax, body, _xticks([str(lv.concurrency) for lv in levels]))


def _positions(lv: LevelResult | None) -> str:
    """Accepted share per position against the most that can have been drafted there.

    Σ_i x_i = g for the share x_i of verification steps that drafted position i, and x_i
    cannot grow with i, so x_i ≤ min(1, g/(i + 1)): above that outline a position was not
    drafted (p_min stopped the draft early), not drafted-and-rejected. With g = K every
    position was drafted, and everything under 1 is a rejection.
    """
    if lv is None or not lv.acceptance.per_position:
        return "<p>No per-position acceptance reported by the engine.</p>"
    pos = lv.acceptance.per_position
    g = lv.acceptance.mean_draft_length
    xs = _xs(len(pos))
    bw = (_W - _PAD) / max(len(pos), 1) * 0.6
    base = _scale(0, 0, 1, _H - _PAD, 20)
    body = ""
    for i, (x, p) in enumerate(zip(xs, pos, strict=True)):
        if g is not None:
            top = _scale(min(1.0, g / (i + 1)), 0, 1, _H - _PAD, 20)
            body += (f'<rect class="drafted-bound" x="{x - bw / 2:.1f}" y="{top:.1f}" '
                     f'width="{bw:.1f}" height="{base - top:.1f}" fill="none" '
                     f'stroke="#555" stroke-dasharray="3 2"/>')
        y = _scale(p, 0, 1, _H - _PAD, 20)
        body += (f'<rect class="accepted" x="{x - bw / 2:.1f}" y="{y:.1f}" width="{bw:.1f}" '
                 f'height="{base - y:.1f}" fill="{_COLORS["spec"]}"/>')
    legend = ("" if g is None else
              f'<text x="{_W - 150}" y="33" font-size="10">dashed: drafted at most '
              f"(g = {g:.2f})</text>"
              f'<text x="{_W - 150}" y="47" font-size="10">above it: not drafted</text>')
    return _frame(f"Per-position acceptance at concurrency {lv.concurrency}", "draft position",
                  "accepted / verification steps", 1.0, body + legend,
                  _xticks([str(i) for i in range(len(pos))]))


def _dots(xs: Sequence[float], ys: Sequence[float | None], ymax: float, color: str,
          label: str, k: int) -> str:
    """Points (joined where consecutive): a level without a figure leaves a gap, not a hole
    in every other level's series."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    if not pts:
        return ""
    return _line([x for x, _ in pts], [min(y, ymax) for _, y in pts], ymax, color, label, k)


def _speedup(levels: Sequence[LevelResult]) -> str:
    """Measured ratio with its CI (whiskers clipped at the top of the chart) beside the
    predictions; the scale follows the point figures, so a wide CI cannot squash them."""
    if not levels:
        return "<p>No levels measured.</p>"
    xs = _xs(len(levels))
    meas = [lv.ratio.ratio if lv.ratio else None for lv in levels]
    pred = [lv.predicted_improvement for lv in levels]
    ext = [lv.model.extended.value if lv.model else None for lv in levels]
    points = [v for v in (*meas, *pred, *ext) if v is not None]
    if not points:
        return "<p>No measured or predicted speed-up (needs two rounds per arm, α and c).</p>"
    ymax = max([*points, 1.2]) * 1.25
    body = _dots(xs, meas, ymax, _COLORS["meas"], "measured ratio (bars: CI)", 0)
    body += _dots(xs, pred, ymax, _COLORS["pred"], "predicted (α, g, c)", 1)
    body += _dots(xs, ext, ymax, _COLORS["ext"], "predicted with v", 2)
    for x, lv in zip(xs, levels, strict=True):
        if lv.ratio is not None:
            y1, y2 = (_scale(min(b, ymax), 0, ymax, _H - _PAD, 20)
                      for b in (lv.ratio.low, lv.ratio.high))
            body += (f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y1:.1f}" y2="{y2:.1f}" '
                     f'stroke="{_COLORS["meas"]}" stroke-opacity="0.35" stroke-width="5"/>')
    one = _scale(1.0, 0, ymax, _H - _PAD, 20)
    body += (f'<line x1="{_PAD}" x2="{_W - 10}" y1="{one:.1f}" y2="{one:.1f}" stroke="#999" '
             f'stroke-dasharray="4 3"/>')
    return _frame("Speed-up: predicted vs measured", "concurrency", "spec / base", ymax, body,
                  _xticks([str(lv.concurrency) for lv in levels]))


def _models(levels: Sequence[LevelResult]) -> str:
    """Paper model, extended model (band: its interval) and measured ratio vs concurrency."""
    rows = [lv for lv in levels if lv.model is not None]
    if not rows:
        return "<p>No extended-model prediction (verification cost, α or c unmeasured).</p>"
    xs = _xs(len(rows))
    ms = [lv.model for lv in rows if lv.model is not None]
    vals = [m.paper for m in ms] + [m.extended.high for m in ms] + \
        [m.measured_high for m in ms if m.measured_high is not None] + [1.2]
    ymax = max(vals) * 1.1
    band = [f"{x:.1f},{_scale(m.extended.high, 0, ymax, _H - _PAD, 20):.1f}"
            for x, m in zip(xs, ms, strict=True)]
    band += [f"{x:.1f},{_scale(m.extended.low, 0, ymax, _H - _PAD, 20):.1f}"
             for x, m in reversed(list(zip(xs, ms, strict=True)))]
    body = (f'<polygon points="{" ".join(band)}" fill="{_COLORS["ext"]}" fill-opacity="0.2"/>'
            + _line(xs, [m.paper for m in ms], ymax, _COLORS["pred"], "paper model (v = 1)", 0)
            + _line(xs, [m.extended.value for m in ms], ymax, _COLORS["ext"],
                    "extended model (g·c + v)", 1))
    meas = [(x, m) for x, m in zip(xs, ms, strict=True) if m.measured is not None]
    if meas:
        body += _line([x for x, _ in meas], [m.measured or 0.0 for _, m in meas], ymax,
                      _COLORS["meas"], "measured ratio", 2)
        for x, m in meas:
            y1, y2 = (_scale(v or 0.0, 0, ymax, _H - _PAD, 20)
                      for v in (m.measured_low, m.measured_high))
            body += (f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y1:.1f}" y2="{y2:.1f}" '
                     f'stroke="{_COLORS["meas"]}" stroke-opacity="0.5" stroke-width="4"/>')
    one = _scale(1.0, 0, ymax, _H - _PAD, 20)
    body += (f'<line x1="{_PAD}" x2="{_W - 10}" y1="{one:.1f}" y2="{one:.1f}" stroke="#999" '
             f'stroke-dasharray="4 3"/>')
    return _frame("Speed-up vs concurrency: paper model, extended model, measured", "concurrency",
                  "spec / base", ymax, body, _xticks([str(lv.concurrency) for lv in rows]))


def _cost_table(levels: Sequence[LevelResult]) -> str:
    """Per level: v with its interval, both predictions, the measured ratio, the advice."""
    head = ("concurrency", "v", "v low", "v high", "g", "paper", "extended (decode)",
            "prefill share", "extended", "ext low", "ext high", "measured", "agrees",
            "largest paying K", "break-even c", "break-even v")
    body = ""
    for lv in levels:
        vc, m, a = lv.verify_cost, lv.model, lv.advice
        cells = (lv.concurrency, _fmt(m.v.value if m else vc.v if vc else None),
                 _fmt(m.v.low if m else vc.low if vc else None),
                 _fmt(m.v.high if m else vc.high if vc else None), _fmt(m.g if m else None),
                 _fmt(m.paper if m else None),
                 _fmt(m.extended_decode.value if m and m.extended_decode else None),
                 _fmt(m.prefill_share if m else None), _fmt(m.extended.value if m else None),
                 _fmt(m.extended.low if m else None), _fmt(m.extended.high if m else None),
                 _fmt(m.measured if m else None), _fmt(m.agrees if m else None),
                 _fmt(a.largest_paying_k if a else None), _fmt(a.break_even_c if a else None),
                 _fmt(a.break_even_v if a else None))
        body += "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
    notes = "".join(f"<li>concurrency {lv.concurrency}: {html.escape(lv.verify_note)}</li>"
                    for lv in levels if lv.verify_note)
    return ("<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + f"</tr>{body}</table>"
            + (f"<ul>{notes}</ul>" if notes else ""))


def decision_html(word: str, why: str) -> str:
    """The decision in one word, then one sentence of why: the first thing on every page."""
    color = {"PASSES": "#1a7f37", "ADMITTED": "#1a7f37", "REJECTED": "#b42318",
             "OFF": "#b42318"}.get(word, "#9a6700")
    return (f'<p id="decision" style="font-size:1.3em"><strong style="color:{color}">'
            f"{html.escape(word)}</strong>: {html.escape(why)}</p>")


def _verdict(report: BenchReport) -> str:
    """The decision first, then the headline and one sentence per deciding reason."""
    v = report.verdict
    if v is None:
        return ""
    items = "".join(f"<li>{html.escape(r)}</li>" for r in v.reasons)
    color = {"wins": "#1a7f37", "admitted": "#1a7f37", "loses": "#b42318",
             "rejected": "#b42318"}.get(v.outcome, "#9a6700")
    return (decision_html(*bench_decision(report))
            + f'<section id="verdict"><h2 style="color:{color}">{html.escape(v.headline)}</h2>'
            f"<ul>{items}</ul></section>")


def _fmt(v: object, spec: str = ".3g") -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return format(v, spec)
    return html.escape(str(v))


def _table(levels: Sequence[LevelResult]) -> str:
    head = ("concurrency", "base tok/s", "spec tok/s", "ratio", "CI low", "CI high",
            "acceptance", "τ", "α", "c", "c (black box)", "predicted", "α > c")
    rows = "".join(
        "<tr>" + "".join(f"<td>{c}</td>" for c in (
            lv.concurrency, _fmt(lv.base.output_throughput, ".1f"),
            _fmt(lv.spec.output_throughput, ".1f"),
            _fmt(lv.ratio.ratio if lv.ratio else None), _fmt(lv.ratio.low if lv.ratio else None),
            _fmt(lv.ratio.high if lv.ratio else None), _fmt(lv.acceptance.acceptance_rate),
            _fmt(lv.acceptance.mean_acceptance_length), _fmt(lv.acceptance.alpha),
            _fmt(lv.c_measured), _fmt(lv.c_black_box), _fmt(lv.predicted_improvement),
            _fmt(lv.alpha_above_c))) + "</tr>" for lv in levels)
    return ("<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + f"</tr>{rows}</table>")


def _measurement(report: BenchReport) -> str:
    """c with its interval and its black-box cross-check, the agreement floor, the stopping."""
    rows = "".join(
        "<tr>" + "".join(f"<td>{x}</td>" for x in (
            lv.concurrency, _fmt(lv.c_ci.ratio if lv.c_ci else lv.c_measured),
            _fmt(lv.c_ci.low if lv.c_ci else None), _fmt(lv.c_ci.high if lv.c_ci else None),
            _fmt(lv.c_ci.n_base if lv.c_ci else None),
            _fmt(len(lv.base.round_output_throughput)),
            _fmt(lv.c_check.black_box_low if lv.c_check else None),
            _fmt(lv.c_check.black_box_high if lv.c_check else None),
            _fmt(lv.c_check.consistent if lv.c_check else None))) + "</tr>"
        for lv in report.levels)
    checks = "".join(f"<li>concurrency {lv.concurrency}: {html.escape(lv.c_check.note)}</li>"
                     for lv in report.levels if lv.c_check)
    out = ("<h2>Draft cost c (interleaved: request-group pairs with the baseline, counted "
           "apart from the baseline launches they came from)</h2><table><tr>"
           + "".join(f"<th>{h}</th>" for h in ("concurrency", "c", "CI low", "CI high",
                                                "pairs", "launches", "black-box low",
                                                "black-box high",
                                                "consistent"))
           + f"</tr>{rows}</table><ul>{checks}</ul>")
    a = report.validity.agreement
    if a is not None:
        out += (f"<h2>Output agreement against its floor</h2><p>Mean common prefix "
                f"({html.escape(a.basis)}) of speculation with the baseline "
                f"{_fmt(a.spec_mean_prefix, '.1f')} of {a.max_tokens} tokens over "
                f"{a.spec_pairs} pairs; the baseline with itself (A/A, relaunched) "
                f"{_fmt(a.aa_mean_prefix, '.1f')} over {a.aa_pairs} pairs; relative "
                f"{_fmt(a.relative)}. Identical full outputs: speculation "
                f"{_fmt(a.spec_identical)}, A/A {_fmt(a.aa_identical)}. Near-ties: "
                f"{a.near_ties} of {a.probed} first divergences probed on the target were "
                f"flips to its close runner-up (numerics); forgiven, relative "
                f"{_fmt(a.relative_numerics)}. {html.escape(a.probe_note)}</p><table><tr>"
                "<th>prompt</th><th>mean first divergence (tokens)</th></tr>"
                + "".join(f"<tr><td>{html.escape(k)}</td><td>{v:.1f}</td></tr>"
                          for k, v in a.first_divergence.items()) + "</table>")
    st = report.stopping
    if st is not None:
        need = f"; about {st.rounds_to_resolve} rounds per arm would resolve it" \
            if st.rounds_to_resolve else ""
        looks = looks_text(st.looks, st.per_look_confidence, report.settings.confidence)
        looks = (f" Looks: {html.escape(looks)} (Bonferroni split: the throughput-ratio CIs in "
                 "this report are these repeated CIs, valid at whatever round the rule "
                 "stopped)." if looks else
                 " Looks not recorded: each used the nominal confidence.")
        out += (f"<h2>Stopping</h2><p>{html.escape(st.rule)} rule: {st.rounds} rounds "
                f"(min {st.min_rounds}, max {st.max_rounds}), stopped: "
                f"{html.escape(st.reason)}; outcome at P95 against {st.threshold:.3g}: "
                f"<b>{html.escape(st.outcome)}</b>{need}; {st.elapsed_s:.0f} s.{looks}</p>")
    return out


def render_html(report: BenchReport) -> str:
    """The whole page; no scripts, no external references."""
    v = report.validity
    problems = "".join(f"<li>{html.escape(p)}</li>" for p in v.problems) or "<li>none</li>"
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in report.notes)
    p95 = report.at_p95
    ceiling = report.ceiling
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>specbundle bench: {html.escape(report.bundle)} on {html.escape(report.engine)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:70em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 6px;font-size:13px;text-align:right}}
figure{{display:inline-block;margin:1em}}figcaption{{font-weight:bold}}</style></head><body>
<h1>Verification benchmark: {html.escape(report.bundle)}</h1>
{_verdict(report)}
<p>Engine {html.escape(report.engine)}, run {html.escape(report.run_id)},
{html.escape(report.created)}, specbundle {html.escape(report.tool_version)};
{report.settings.rounds} rounds
({html.escape(" ".join(report.settings.round_order))}), {report.settings.requests_per_level}
requests per level, max_tokens {report.settings.max_tokens}, temperature
{report.settings.temperature}, ignore_eos; prompts: {html.escape(report.workload_source)}
(sha256 {report.workload_sha256[:16]}…). P95 concurrency {report.settings.p95_concurrency};
crossover concurrency {_fmt(report.crossover_concurrency)}.</p>
<p>ITL is reported per chunk and per token: speculation sends several tokens per chunk, so
per-chunk ITL rises while throughput improves.</p>
{_throughput(report.levels)}{_positions(p95)}{_speedup(report.levels)}{_models(report.levels)}
<h2>Per level</h2>{_table(report.levels)}
<h2>Per level: verification cost v and the model</h2>{_cost_table(report.levels)}
{_measurement(report)}
<h2>Concurrency ceiling</h2><p>KV capacity base {_fmt(ceiling.kv_capacity_base)}, spec
{_fmt(ceiling.kv_capacity_spec)}, drop {_fmt(ceiling.drop)}. {html.escape(ceiling.note)}</p>
<h2>Validity</h2><p>Token agreement {_fmt(v.token_agreement)} over {v.compared_outputs}
outputs; engine errors {v.engine_errors}; settings equal {_fmt(v.settings_equal)}.</p>
<ul>{problems}</ul><h2>Notes</h2><ul>{notes}</ul></body></html>
"""
