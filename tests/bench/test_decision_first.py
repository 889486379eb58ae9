"""Reports lead with the decision: one word, one sentence of why, then the evidence (issue 24).

The pages are opened in headless Chromium (tests/_browser.py): what a reader sees is the DOM
after the browser parsed it, so the order and the charts are checked there.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from specbundle.bench.html import render_html
from specbundle.bench.report import BenchReport, Stopping
from specbundle.bench.stats import welch_ratio_ci
from specbundle.bench.verdict import Verdict, bench_decision, bench_verdict, c_basis, gate_decision
from tests._browser import dump_dom, requires_chromium
from tests.lib.reports import bench_report


def _stopped(r: BenchReport, outcome: str, reason: str) -> BenchReport:
    st = Stopping(rule="sequential", outcome=outcome, reason=reason,  # type: ignore[arg-type]
                  rounds=4, min_rounds=4, max_rounds=12, threshold=1.05, time_budget_s=900.0,
                  elapsed_s=600.0, rounds_to_resolve=None, looks=5, per_look_confidence=0.98)
    r = replace(r, stopping=st)
    return replace(r, verdict=bench_verdict(r))


def _self_drafting() -> BenchReport:
    """c ≈ 1, α ≈ 1, the ratio around 1 with a wide interval: the issue's 270M pair."""
    base, spec = (100.0, 60.0, 130.0, 80.0), (90.0, 120.0, 70.0, 105.0)
    r = bench_report(base, spec, alpha=0.99, c=1.0)
    lv = replace(r.levels[0], ratio=welch_ratio_ci(base, spec, confidence=0.98),
                 predicted_improvement=0.99)
    return _stopped(replace(r, levels=(lv,)), "inconclusive", "futile")


def test_the_decision_word_follows_the_stopping_rule() -> None:
    r = _self_drafting()
    word, why = bench_decision(r)
    assert word == "REJECTED" and "futility" in why
    assert bench_decision(_stopped(bench_report(), "above", "resolved"))[0] == "PASSES"
    assert bench_decision(_stopped(bench_report(), "inconclusive", "time_budget"))[0] == \
        "INCONCLUSIVE"
    invalid = _stopped(bench_report(problems=("token agreement: the arms differ",)), "above",
                       "resolved")
    assert bench_decision(invalid) == ("REJECTED", "the comparison at your P95 concurrency 4 "
                                       "is not valid: token agreement: the arms differ")
    v = Verdict("rejected", "rejected: 1 of 7 criteria failed (alpha_above_c)",
                ("acceptance does not beat the draft's cost: α = 0.5 ≤ c = 0.9",))
    assert gate_decision(v) == ("REJECTED", v.reasons[0])


def test_c_counts_pairs_apart_from_launches() -> None:
    assert c_basis(12, 4) == "12 request-group pairs from 4 launches"
    assert c_basis(4, 4) == "4 launches"


@requires_chromium
def test_the_bench_page_opens_with_the_decision_and_keeps_the_evidence(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_html(_self_drafting()))
    dom = dump_dom(page)
    body = dom[dom.index("<body"):]
    first = re.search(r"<h1>.*?</h1>\s*<p id=\"decision\"[^>]*><strong[^>]*>(\w+)</strong>: "
                      r"([^<]*)</p>", body, re.S)
    assert first is not None, body[:800]
    assert first.group(1) == "REJECTED" and "futility" in first.group(2)
    assert body.index('id="decision"') < body.index('id="verdict"') < body.index("<svg")
    # the speed-up chart keeps its predicted line although the measured CI is wide
    chart = body[body.index("Speed-up: predicted vs measured"):]
    chart = chart[:chart.index("</svg>")]
    assert "predicted (α, g, c)" in chart and chart.count("<polyline") >= 2
    # per position: accepted bars and the dashed bound of what can have been drafted
    assert body.count('class="drafted-bound"') == 4 and "above it: not drafted" in body
    assert "request-group pairs" in body or "launches" in body


@requires_chromium
def test_the_tune_page_opens_with_the_schedule_in_one_word(tmp_path: Path) -> None:
    from specbundle.bench.tune_analysis import (
        TUNE_VERSION,
        TuneResult,
        Variant,
        choose,
        variant_levels,
    )
    from specbundle.bench.tune_html import render_tune_html

    base = {1: (100.0, 102.0), 4: (300.0, 306.0)}
    arms = {Variant(2, 0.5): {1: (99.0, 101.0), 4: (290.0, 300.0)}}
    res = variant_levels(base, arms, 0.9)
    choices, fixed, crossover = choose(res, [1, 4])
    r = TuneResult(schema_version=TUNE_VERSION, run_id="t", bundle="b", engine="llamacpp",
                   created="2026-12-03T00:00:00Z", tool_version="0", levels=(1, 4),
                   variants=tuple(arms), rounds=2, round_order=(("base", "k2-p0.5"),),
                   requests_per_level=4, max_tokens=32, confidence=0.9, base_throughput=base,
                   results=res, choices=choices, best_fixed=fixed, crossover_concurrency=crossover,
                   p95_concurrency=4, elapsed_s=60.0, minutes_per_k=0.5)
    page = tmp_path / "tune.html"
    page.write_text(render_tune_html(r))
    dom = dump_dom(page)
    m = re.search(r"</h1>\s*<p id=\"decision\"[^>]*><strong[^>]*>(\w+)</strong>: ([^<]*)</p>",
                  dom)
    assert m is not None and m.group(1) == "OFF"
    assert "speculation stays off (K = 0)" in m.group(2)


@requires_chromium
def test_the_audit_page_opens_with_the_bundles_standing(tmp_path: Path) -> None:
    from specbundle.audit import audit
    from specbundle.audit.html import render_html as audit_html
    from specbundle.audit.model import Link
    from tests.lib.chain import build_chain

    chain = build_chain(tmp_path)
    report = audit(chain.mirror, "pair", policy=chain.policy)
    bundle = report.bundles[0]
    for b, word in ((bundle, "UNADMITTED"),
                    (replace(bundle, admissions=({"line": 7, "time": "t", "result": "FAILED",
                                                  "outcome": "inconclusive",
                                                  "reasons": ["throughput_ratio: inconclusive"],
                                                  "signers": [], "signer_names": [],
                                                  "policy": None, "status": "ok",
                                                  "detail": ""},
                                                 )), "INCONCLUSIVE"),
                    (replace(bundle, links=(Link("model.sig", "failed", "bad signature"),)),
                     "BROKEN")):
        page = tmp_path / f"{word}.html"
        page.write_text(audit_html(report, b))
        m = re.search(r"</h1>\s*<p id=\"decision\"[^>]*><strong>(\w+)</strong>: ([^<]*)</p>",
                      dump_dom(page))
        assert m is not None and m.group(1) == word, word


def test_a_right_c_near_one_with_short_drafts_is_not_called_under_measured() -> None:
    """p_min stopped the drafts early (mean length 1.5 of 8): the draft still ran a forward
    for the token it did not propose, so the black-box c sits above c + 1 and is right; the
    band allows c/g for it instead of blaming "c under-measured" (the 270M pair, c ≈ 1)."""
    from specbundle.bench import stats
    from specbundle.bench.checks import cost_check

    c = stats.paired_ratio_ci([1.0, 1.02, 0.98], [1.0, 1.0, 1.0])
    ratio = welch_ratio_ci([100.0, 101.0, 99.0], [55.0, 56.0, 54.0], confidence=0.9)
    bb = stats.black_box_c_interval(2.4, ratio, 1.5)
    assert bb is not None and bb[0] > c.high + 1.0  # the former band's ceiling: blamed c
    check = cost_check(c, 2.4, 1.5, ratio)
    assert check is not None and check.consistent and "under-measured" not in check.note
