"""The gate's verdict is explained with the cost model's figures, in every output of a report."""

from __future__ import annotations

import json
from dataclasses import replace

from specbundle.admit import evaluate
from specbundle.bench import costmodel as cm
from specbundle.bench.html import render_html
from specbundle.bench.report import BenchReport
from specbundle.bench.verdict import bench_verdict, gate_verdict
from specbundle.bench.verifycost import VerifySample, verify_cost
from specbundle.spec import AdmissionThresholds
from tests.lib.reports import bench_report


def _with_model(report: BenchReport, v: float) -> BenchReport:
    """The report's one level with a measured v and the model the analysis derives from it."""
    lv = report.levels[0]
    vc = verify_cost([VerifySample(4, 4, 10.0, 10.0 * v * k) for k in (0.97, 1.0, 1.03)])
    assert vc is not None and lv.ratio is not None and lv.c_measured is not None
    alpha, g = 0.8, 4.0
    pred = cm.predict(alpha, g, cm.Interval(lv.c_measured, lv.c_measured, lv.c_measured),
                      cm.Interval(vc.v, vc.low, vc.high))
    model = cm.reconcile(pred, cm.Interval(lv.ratio.ratio, lv.ratio.low, lv.ratio.high))
    lv = replace(lv, verify_cost=vc, model=model, advice=cm.advise(alpha, g, lv.c_measured, v, 4))
    out = replace(report, levels=(lv,))
    return replace(out, verdict=bench_verdict(out))


def test_a_verification_bound_loss_is_explained_in_the_gate() -> None:
    # 100 -> 70 tok/s at P95 4: α 0.8, c 0.1, but verifying 5 tokens costs 3.5 decode steps
    report = _with_model(bench_report(spec=(70.0, 71.0, 69.0, 70.5)), 3.5)
    gate = evaluate(report, AdmissionThresholds())
    v = gate_verdict(gate.criteria, report, admitted=gate.admitted)
    assert v.outcome == "rejected"
    assert v.headline.startswith("rejected: 1 of 7 criteria failed (throughput_ratio)")
    assert v.reasons[0].startswith("throughput: speculation loses at your P95 concurrency 4: 0.70×")
    assert "each verification costs 3.5 decode steps on this hardware; break-even needs v < " \
        in v.reasons[1]
    assert report.verdict is not None and report.verdict.outcome == "loses"


def test_every_output_opens_with_the_verdict_and_keeps_the_new_fields() -> None:
    report = _with_model(bench_report(), 1.2)  # 1.5x measured, the model agrees
    assert report.verdict is not None and report.verdict.outcome == "wins"
    data = json.loads(report.to_bytes())
    assert next(iter(data)) == "verdict"
    assert data["levels"][0]["verify_cost"]["v"] > 1.0
    back = BenchReport.from_json(data)
    assert back == report
    page = render_html(report)
    assert page.index("speculation wins at your P95 concurrency 4") < page.index("Per level")
    for label in ("paper model (v = 1)", "extended model (g·c + v)", "measured ratio",
                  "verification cost v and the model"):
        assert label in page
    ok = gate_verdict(evaluate(report, AdmissionThresholds()).criteria, report, admitted=True)
    assert ok.outcome == "admitted" and ok.reasons[0].startswith("speculation wins")
