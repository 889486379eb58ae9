"""Self-contained HTML of a tune sweep: ratio vs concurrency per setting, and the schedule.

Inline SVG drawn with the bench page's own helpers (no plotting stack, nothing fetched).
"""

from __future__ import annotations

import html

from specbundle.bench.html import (
    _COLORS,
    _H,
    _PAD,
    _W,
    _frame,
    _line,
    _scale,
    _xs,
    _xticks,
    decision_html,
)
from specbundle.bench.tune_analysis import TuneResult, Variant

__all__ = ["render_tune_html"]

_PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
            "#8c8c8c")


def _plot(r: TuneResult) -> str:
    levels = list(r.levels)
    if not levels:
        return "<p>No levels measured.</p>"
    xs = _xs(len(levels))
    ratios = [x.ratio.ratio for x in r.results if x.ratio] + [c.ratio for c in r.choices]
    ymax = max([*ratios, 1.2]) * 1.1
    body = ""
    for k, v in enumerate(r.variants):
        per = {x.concurrency: x for x in r.results if Variant(x.k, x.p_min) == v and x.ratio}
        pts = [(x, per[c].ratio) for x, c in zip(xs, levels, strict=True) if c in per]
        if not pts:
            continue
        color = _PALETTE[k % len(_PALETTE)]
        body += _line([p[0] for p in pts], [p[1].ratio for p in pts if p[1]], ymax, color,
                      v.name, k)
        for x, ci in pts:
            if ci is None:
                continue
            y1, y2 = (_scale(b, 0, ymax, _H - _PAD, 20) for b in (ci.low, min(ci.high, ymax)))
            body += (f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y1:.1f}" y2="{y2:.1f}" '
                     f'stroke="{color}" stroke-opacity="0.35" stroke-width="5"/>')
    sched = [c.ratio for c in r.choices]
    body += _line(xs, sched, ymax, _COLORS["meas"], "schedule", len(r.variants))
    one = _scale(1.0, 0, ymax, _H - _PAD, 20)
    body += (f'<line x1="{_PAD}" x2="{_W - 10}" y1="{one:.1f}" y2="{one:.1f}" stroke="#999" '
             f'stroke-dasharray="4 3"/>')
    return _frame("Throughput ratio vs concurrency per setting (bars: CI)", "concurrency",
                  "spec / base", ymax, body, _xticks([str(c) for c in levels]))


def render_tune_html(r: TuneResult) -> str:
    """The whole page; no scripts, no external references."""
    rows = "".join(
        "<tr>" + "".join(f"<td>{x}</td>" for x in (
            c.concurrency, c.k, "—" if c.p_min is None else f"{c.p_min:g}", f"{c.ratio:.3g}",
            f"{c.ratio_low:.3g}", f"{c.ratio_high:.3g}",
            "—" if c.fixed_ratio is None else f"{c.fixed_ratio:.3g}",
            "—" if c.gain_over_fixed is None else f"{c.gain_over_fixed:.3g}",
            "yes" if c.decided else "no")) + "</tr>" for c in r.choices)
    head = "".join(f"<th>{h}</th>" for h in ("concurrency", "K", "p_min", "ratio", "CI low",
                                              "CI high", "best fixed", "gain", "decided"))
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in r.notes)
    fixed = r.best_fixed.name if r.best_fixed else "—"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>specbundle tune: {html.escape(r.bundle)} on {html.escape(r.engine)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:70em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 6px;font-size:13px;text-align:right}}
figure{{display:inline-block;margin:1em}}figcaption{{font-weight:bold}}</style></head><body>
<h1>K schedule: {html.escape(r.bundle)}</h1>
{decision_html(*r.decision())}
<p>Engine {html.escape(r.engine)}, run {html.escape(r.run_id)}, {r.rounds} rounds,
{r.requests_per_level} requests per level, max_tokens {r.max_tokens};
{r.minutes_per_k:.2f} minutes per setting. Best fixed setting {html.escape(fixed)};
crossover concurrency {r.crossover_concurrency or "—"}. K = 0 means speculation off.</p>
{_plot(r)}<h2>Schedule</h2><table><tr>{head}</tr>{rows}</table>
<h2>Notes</h2><ul>{notes}</ul></body></html>
"""
