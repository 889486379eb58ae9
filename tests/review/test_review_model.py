"""What the review page is built from, without a browser: defaults and the decision block."""

from __future__ import annotations

import json
from pathlib import Path

from specbundle.pull import pull_bundle
from specbundle.review import diff_bundle
from specbundle.review.page import build_review, render_review_html
from specbundle.spec import load_spec
from specbundle.transfer import export_bundle
from specbundle.verify import load_policy
from tests.lib.versions import Versions


def test_working_record_before_sign_against_current(tmp_path: Path) -> None:
    v = Versions(tmp_path)
    v.sign()
    spec = (tmp_path / "pair.yaml").read_text().replace('"num_speculative_tokens": 4',
                                                        '"num_speculative_tokens": 9')
    (tmp_path / "pair.yaml").write_text(spec)
    pull_bundle(load_spec(tmp_path / "pair.yaml"), v.mirror)  # pulled, not yet signed
    r = build_review(v.mirror, "pair", version="working", policy=load_policy(v.policy_path))
    assert r.against is not None and r.against.label == "pair v1"
    assert r.diff is not None and r.approval is None
    topics = {d.topic: d for d in r.decisions}
    assert topics["changes"].tone == "attention" and "1 alter what runs" in topics["changes"].text
    assert "not evaluated" in topics["approvals"].text
    assert "none: this version is not signed" in render_review_html(r)


def test_transfer_set_before_import_against_current(tmp_path: Path) -> None:
    v = Versions(tmp_path)
    v.sign()
    v.sign(min_ratio=0.5)
    export_bundle(v.mirror, "pair", tmp_path / "set", [v.key])
    r = build_review(v.mirror, "pair", version=str(tmp_path / "set"))
    assert r.against is not None and r.against.label == "pair v2" and r.diff is not None
    assert r.diff.changes == []  # the set carries exactly the current version


def test_another_bundle_and_hidden_characters(tmp_path: Path) -> None:
    v = Versions(tmp_path)
    v.sign()
    other = Versions(tmp_path / "o", name="other")
    other.mirror = v.mirror
    other.sign(k=3, model_name="evil\x1b[2J\u202ename")
    rep = diff_bundle(v.mirror, "pair", "current", "other@1")
    paths = {c.path: c for c in rep.changes}
    assert paths["metadata.name"].after == '"other"'
    desc = paths["metadata.description"].after
    assert desc is not None and "\x1b" not in desc and "\u202e" not in desc
    assert paths["speculative.num_speculative_tokens"].runtime


def test_stored_bench_verdict_shows_until_admitted(tmp_path: Path) -> None:
    v = Versions(tmp_path)
    v.sign()
    v.mirror.write_bundle_file("pair", "bench/run1/report.json", json.dumps({
        "run_id": "run1", "engine": "llamacpp", "created": "2026-12-01T00:00:00Z",
        "verdict": {"outcome": "wins", "headline": "speculation wins: 1.4x at P95"}}).encode())
    v.mirror.write_bundle_file("pair", "bench/broken/report.json", b"{not json")
    r = build_review(v.mirror, "pair")
    assert [b["run_id"] for b in r.bench] == ["run1"]
    bench = {d.topic: d for d in r.decisions}["benchmark"]
    assert "1.4x at P95" in bench.text and bench.tone == "attention"
    assert "speculation wins: 1.4x at P95" in render_review_html(r)


def _admission(v: Versions, manifest: str, result: str, reasons: list[str]) -> None:
    """Sign and append an admission VSA as admit does (the typed model, the real log)."""
    from specbundle.attest import Statement, Subject, append_attestation, sign_statement
    from specbundle.attest.models import AdmissionDetails, CriterionResult, VerificationSummaryV1
    from specbundle.attest.models.standard import PolicyRef, Verifier

    vsa = VerificationSummaryV1(
        verifier=Verifier(id="https://specbundle.dev/admit", version={"specbundle": "t"}),
        time_verified="2026-12-01T00:00:00Z", resource_uri="specbundle:bundle/pair",
        policy=PolicyRef(uri="trust.yaml", digest={"sha256": "0" * 64}),
        verification_result=result,  # type: ignore[arg-type]
        verified_levels=["SLSA_BUILD_LEVEL_UNEVALUATED"],
        specbundle=AdmissionDetails(
            reasons=reasons, manifest_sha256=manifest,
            criteria=[CriterionResult(name="throughput_ratio", passed=not reasons,
                                      measured="1.400", threshold="1.050")]))
    subject = Subject(name="pair", digest={"sha256": manifest})
    append_attestation(v.mirror, "pair", sign_statement(Statement.of([subject], vsa), [v.key]))


def test_admission_of_this_version_is_the_decision(tmp_path: Path) -> None:
    """Only an admission naming this very version's manifest counts; a malformed or other
    version's line is skipped, never read field by field."""
    v = Versions(tmp_path)
    v.sign()
    manifest = build_review(v.mirror, "pair").side.manifest_digest
    assert manifest is not None
    _admission(v, "f" * 64, "PASSED", [])  # another version's: not this one's decision
    _admission(v, manifest, "FAILED", ["throughput_ratio: 0.9 below 1.05"])
    with (v.mirror.bundle_dir("pair") / "attestations.jsonl").open("ab") as log:
        log.write(b'{"payloadType": "x", "payload": "e30=", "signatures": []}\n')
    r = build_review(v.mirror, "pair", policy=load_policy(v.policy_path))
    assert [a["result"] for a in r.admissions] == ["FAILED"]
    adm = r.admissions[0]
    assert adm["verified"] is True and adm["signed_by"] == ["release"]
    assert adm["criteria"] == [{"name": "throughput_ratio", "passed": False,
                                "measured": "1.400", "threshold": "1.050"}]
    decision = {d.topic: d for d in r.decisions}["admission"]
    assert decision.tone == "bad" and "0.9 below 1.05" in decision.text
