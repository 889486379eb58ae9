"""Audit of a bundle that really went through bench + admit (llama-server on loopback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbundle.admit import Rejected, admit_bundle
from specbundle.audit import audit
from specbundle.audit.bom import bundle_bom
from specbundle.bench import BenchOptions
from specbundle.verify import verify_bundle
from tests.lib.bundles import Signed, signed_bundle
from tests.lib.models import PairStore

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="module")
def admitted(module_tmp: Path, llama_server_bin: Path, synth_pairs: PairStore) -> Signed:
    """A bad pair, benchmarked once and rejected: a signed FAILED decision with evidence."""
    root = module_tmp
    pair = synth_pairs.get(quality="bad", seed=7)
    s = signed_bundle(root, "bad", pair, levels=[1],
                      admission={"min_throughput_ratio_lower_bound": 1.0})
    with pytest.raises(Rejected):
        admit_bundle(verify_bundle(s.mirror, "bad", s.policy), keys=[s.key],
                     bench_options=BenchOptions(binary=llama_server_bin))
    return s


def test_bench_runs_and_decisions_are_shown_and_verified(admitted: Signed) -> None:
    report = audit(admitted.mirror, "bad", policy=admitted.policy)
    (b,) = report.bundles
    (run,) = b.bench_runs
    assert run.link.status == "ok", run.link
    assert run.concurrency == 1
    assert run.throughput_ratio is not None
    assert run.alpha is not None
    (decision,) = b.admissions
    assert (decision["result"], decision["status"], decision["signer_names"]) == (
        "FAILED", "ok", ["release"])
    assert "admission" in {e["type"] for e in b.events}
    doc = bundle_bom(b, timestamp=report.generated)
    metrics = doc["components"][1]["modelCard"]["quantitativeAnalysis"]["performanceMetrics"]
    assert {m["type"] for m in metrics} >= {"throughput-ratio-spec-vs-base",
                                             "acceptance-rate-alpha"}


def test_edited_bench_report_breaks_bench_and_admission_links(admitted: Signed) -> None:
    (path,) = (admitted.mirror.bundle_dir("bad") / "bench").glob("*/report.json")
    original = path.read_bytes()
    doc = json.loads(original)
    doc["notes"] = [*doc.get("notes", []), "rewritten"]
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    try:
        (b,) = audit(admitted.mirror, "bad", policy=admitted.policy).bundles
        (run,) = b.bench_runs
        assert run.link.status == "failed"
        assert "not the one signed" in run.link.detail
        (decision,) = b.admissions
        assert decision["status"] == "failed"
        assert "changed since it was signed" in str(decision["detail"])
        assert b.broken
    finally:
        path.write_bytes(original)
