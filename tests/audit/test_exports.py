"""ML-BOM (validated against the CycloneDX 1.6 schema) and the self-contained HTML report."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from specbundle.audit import audit
from specbundle.audit.bom import bundle_bom, validate_bom
from specbundle.audit.html import render_html
from specbundle.audit.model import BenchAudit, Link
from specbundle.errors import SpecbundleError
from tests.lib.chain import Chain
from tests.lib.policy import policy_for


def test_ml_bom_validates_and_carries_the_pair(chain: Chain) -> None:
    report = audit(chain.mirror, "pair", policy=chain.policy)
    doc = bundle_bom(report.bundles[0], timestamp=report.generated)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(doc)) is None
    assert doc["specVersion"] == "1.6"
    target, draft = doc["components"]
    rec = chain.record
    assert rec.draft is not None
    assert target["type"] == draft["type"] == "machine-learning-model"
    assert draft["purl"] == f"pkg:huggingface/{rec.draft.repo}@{rec.draft.commit}"
    assert draft["licenses"] == [{"license": {"id": "Apache-2.0"}}]
    (ancestor,) = draft["pedigree"]["ancestors"]
    assert ancestor["purl"] == f"pkg:huggingface/{rec.target.repo}@{rec.target.commit}"
    files = {c["name"]: c["hashes"][0]["content"] for c in draft["components"]}
    assert files == {f.path: f.sha256 for f in rec.draft.files}
    assert {"ref": draft["bom-ref"], "dependsOn": [target["bom-ref"]]} in doc["dependencies"]
    props = {p["name"]: p["value"] for p in draft["properties"]}
    assert props["specbundle:model-sig"] == "ok"
    again = bundle_bom(audit(chain.mirror, "pair", policy=chain.policy).bundles[0],
                       timestamp=report.generated)
    assert again["serialNumber"] == doc["serialNumber"]  # same evidence, same identity


def test_bench_figures_land_in_performance_metrics(chain: Chain) -> None:
    (b,) = audit(chain.mirror, "pair", policy=chain.policy).bundles
    run = BenchAudit("r1", "llamacpp", "2026-11-29T00:00:00Z", "0" * 64, 4, 1.31, 1.2, 1.42,
                     0.81, 0.12, 3.4, Link("bench r1", "ok"))
    doc = bundle_bom(replace(b, bench_runs=(run,)), timestamp="2026-11-29T00:00:00Z")
    metrics = doc["components"][1]["modelCard"]["quantitativeAnalysis"]["performanceMetrics"]
    ratio = next(m for m in metrics if m["type"] == "throughput-ratio-spec-vs-base")
    assert ratio["value"] == "1.3100"
    assert ratio["confidenceInterval"] == {"lowerBound": "1.2000", "upperBound": "1.4200"}
    assert {m["type"] for m in metrics} == {"throughput-ratio-spec-vs-base",
                                            "acceptance-rate-alpha", "draft-cost-ratio-c",
                                            "mean-acceptance-length"}
    assert "concurrency 4" in ratio["slice"]


def test_invalid_bom_is_refused() -> None:
    with pytest.raises(SpecbundleError, match="does not validate"):
        validate_bom({"bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1,
                      "components": [{"type": "machine-learning-model", "name": "x",
                                      "modelCard": {"bogus": 1}}]})


def test_html_report_is_self_contained_and_escaped(chain: Chain) -> None:
    report = audit(chain.mirror, "pair", policy=chain.policy)
    page = render_html(report, report.bundles[0])
    assert "Chain of custody verified" in page
    assert chain.record.target.commit in page
    assert not re.search(r"<script|src=\"http|href=\"http|<link ", page)
    broken = audit(chain.mirror, "pair", policy=policy_for({"other": chain.other}))
    page = render_html(broken, broken.bundles[0])
    assert "Chain of custody BROKEN" in page
    assert "revoked or unknown" in page
    hostile = replace(report.bundles[0], links=(Link("x", "failed", "<script>alert(1)</script>"),))
    page = render_html(report, hostile)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>" not in page
