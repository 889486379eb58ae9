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

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.integration, pytest.mark.measures]


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


def test_a_digest_merely_mentioned_in_a_signed_statement_vouches_for_nothing(
        admitted: Signed) -> None:
    """Only the report field's digest vouches for a report's bytes: a statement that names
    the edited report's digest in a figure (signed by the release key) links nothing."""
    from specbundle.attest import Statement, append_attestation, sign_statement
    from specbundle.attest.mirrored import claimed_subjects
    from specbundle.attest.models import BenchEvidenceV1, DigestRef
    from specbundle.digest import sha256_bytes

    (path,) = (admitted.mirror.bundle_dir("bad") / "bench").glob("*/report.json")
    original = path.read_bytes()
    log = admitted.mirror.bundle_dir("bad") / "attestations.jsonl"
    log_before = log.read_bytes()
    doc = json.loads(original)
    doc["notes"] = [*doc.get("notes", []), "rewritten"]
    edited = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    path.write_bytes(edited)
    subjects = claimed_subjects(admitted.mirror, admitted.mirror.load_bundle("bad"))
    decoy = Statement.of(subjects, BenchEvidenceV1(
        time_created="2026-12-01T00:00:00Z", run_id="another-run", engine="llamacpp",
        report=DigestRef(uri="specbundle:bundle/bad/bench/another-run/report.json",
                         digest={"sha256": "0" * 64}),
        figures={"note": sha256_bytes(edited)}))
    append_attestation(admitted.mirror, "bad", sign_statement(decoy, [admitted.key]))
    try:
        (b,) = audit(admitted.mirror, "bad", policy=admitted.policy).bundles
        (run,) = b.bench_runs
        assert run.link.status == "failed" and "not the one signed" in run.link.detail
    finally:
        path.write_bytes(original)
        log.write_bytes(log_before)
