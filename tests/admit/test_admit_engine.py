"""Admission end to end on a real llama-server: the good pair is admitted, the bad rejected.

Each bundle is pulled, scanned and signed, then ``admit_bundle`` verifies it, runs the
A/B benchmark from the bundle's rendered shell manifest (2 ABBA rounds) and gates it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from specbundle.admit import STATUS_FILE, Decision, Rejected, admit_bundle, read_status
from specbundle.attest import BENCH_EVIDENCE_V1, SLSA_VSA_V1, check_statement, read_attestations
from specbundle.bench import BenchOptions, BenchReport, load_report, report_schema
from specbundle.cli.admit import _emit as emit
from specbundle.digest import sha256_bytes
from specbundle.synth import SynthPair
from specbundle.verify import verify_bundle
from tests.lib.bundles import Signed, signed_bundle

# A statistical verdict on a shared 2-core box: a failure is re-measured (twice) before it counts.
MEASURED = pytest.mark.flaky(reruns=2, reruns_delay=2)
pytestmark = [pytest.mark.engine, pytest.mark.slow, MEASURED, pytest.mark.integration, pytest.mark.measures]

SCHEMA = Path(__file__).parents[2] / "manifests" / "schemas" / "bench-report.schema.json"
#: The test gate: speculation must be significantly faster (CI lower bound above 1.0).
GATE = {"min_throughput_ratio_lower_bound": 1.0}
#: On CPU the good pair wins by only ~1.3-1.8x (verifying 9 tokens costs several single
#: steps), and a shared 2-core box adds 10-30 % run-to-run noise: while the CI still straddles
#: the threshold the bench adds ABBA pairs, up to 12 rounds. The rule may look 5 times (after
#: 4, 6, ..., 12 rounds), so each look is a repeated CI at 98 % (90 % overall): at a ratio of
#: 1.5 that takes ~6 rounds on average at this noise instead of ~4.5 (benchmarks/README.md).
#: The bad pair's rejection needs no statistics (α ≈ 0 ≤ c), so it runs the spec's 2 rounds.
GOOD_ROUNDS, MAX_ROUNDS = 4, 12


@pytest.fixture(scope="module")
def good(admit_root: Path, bench_pairs: dict[str, SynthPair],
         llama_server_bin: Path) -> tuple[Signed, Decision | Rejected]:
    s = signed_bundle(admit_root / "good", "good", bench_pairs["good"], levels=[1],
                      admission=GATE)
    try:
        return s, admit_bundle(verify_bundle(s.mirror, "good", s.policy), keys=[s.key],
                               bench_options=BenchOptions(binary=llama_server_bin,
                                                          rounds=GOOD_ROUNDS,
                                                          max_rounds=MAX_ROUNDS,
                                                          max_tokens=48))
    except Rejected as err:
        return s, err


@pytest.fixture(scope="module")
def bad(admit_root: Path, bench_pairs: dict[str, SynthPair],
        llama_server_bin: Path) -> tuple[Signed, Decision | Rejected]:
    s = signed_bundle(admit_root / "bad", "bad", bench_pairs["bad"], levels=[1], admission=GATE)
    try:
        return s, admit_bundle(verify_bundle(s.mirror, "bad", s.policy), keys=[s.key],
                               bench_options=BenchOptions(binary=llama_server_bin))
    except Rejected as err:
        return s, err


def _decision(x: Decision | Rejected) -> Decision:
    return x.decision if isinstance(x, Rejected) else x


def test_good_pair_is_admitted(good: tuple[Signed, Decision | Rejected]) -> None:
    s, got = good
    assert isinstance(got, Decision), f"rejected: {getattr(got, 'message', got)}"
    assert got.admitted and got.result == "PASSED" and not got.reasons
    assert {c.name for c in got.criteria} >= {"throughput_ratio", "alpha_above_c",
                                              "ceiling_drop", "token_agreement"}
    status = read_status(s.mirror, "good")
    assert status is not None and status["admitted"] is True
    assert status["bench_report_sha256"] == got.bench_report_sha256
    events = [e for e in s.mirror.read_events() if e["type"] == "admission"]
    assert events and events[-1]["data"]["result"] == "PASSED"


def test_bad_pair_is_rejected_naming_alpha_or_ratio(
        bad: tuple[Signed, Decision | Rejected]) -> None:
    s, got = bad
    assert isinstance(got, Rejected), "the unrelated draft must not be admitted"
    assert got.exit_code == 5
    d = got.decision
    assert d.result == "FAILED" and not d.admitted
    assert any(r.startswith("alpha_above_c: α = ") and "≤ c" in r for r in d.reasons) or \
        any(r.startswith("throughput_ratio:") for r in d.reasons), d.reasons
    assert "α" in got.message or "throughput ratio" in got.message
    status = read_status(s.mirror, "bad")
    assert status is not None and status["admitted"] is False


@pytest.mark.parametrize("which", ["good", "bad"])
def test_decision_is_a_signed_vsa_naming_policy_and_report(
        which: str, good: tuple[Signed, Decision | Rejected],
        bad: tuple[Signed, Decision | Rejected]) -> None:
    s, got = good if which == "good" else bad
    d = _decision(got)
    envs = read_attestations(s.mirror, which)
    vsa_env = envs[d.vsa_line - 1]
    checked = check_statement(vsa_env, [s.key.public])
    st = checked.statement
    assert st.predicate_type == SLSA_VSA_V1
    pred = st.predicate
    assert pred["verificationResult"] == d.result
    assert pred["policy"]["digest"]["sha256"] == s.policy.digest
    stored = s.mirror.read_bundle_file(which, f"bench/{d.bench_run_id}/report.json")
    assert stored is not None and sha256_bytes(stored) == d.bench_report_sha256
    uris = {i["digest"]["sha256"] for i in pred["inputAttestations"]}
    assert d.bench_report_sha256 in uris
    # earlier attestations (provenance, scan, pair binding) are inputs too
    assert len(pred["inputAttestations"]) >= 4
    ev = [check_statement(e, [s.key.public]).statement for e in envs]
    assert any(x.predicate_type == BENCH_EVIDENCE_V1 and
               x.predicate["report"]["digest"]["sha256"] == d.bench_report_sha256 for x in ev)


def test_report_of_the_good_run(good: tuple[Signed, Decision | Rejected]) -> None:
    s, got = good
    d = _decision(got)
    assert d.bench_run_id is not None
    report = load_report(s.mirror, "good", d.bench_run_id)
    data = json.loads(s.mirror.read_bundle_file("good", f"bench/{d.bench_run_id}/report.json")
                      or b"{}")
    jsonschema.validate(data, json.loads(SCHEMA.read_text()))
    assert BenchReport.from_json(data) == report
    rounds = report.settings.rounds
    assert GOOD_ROUNDS <= rounds <= MAX_ROUNDS and rounds % 2 == 0
    assert report.settings.round_order == ("base", "spec", "spec", "base") * (rounds // 2)
    assert report.settings.levels == (1,)
    assert report.validity.settings_equal is True
    assert report.validity.fixed_length and report.validity.engine_errors == 0
    assert report.validity.spec_counters_moved and report.validity.base_counters_flat
    lv = report.at_p95
    assert lv is not None and lv.ratio is not None and lv.ratio.n_base == rounds
    acc = lv.acceptance
    assert acc.source == "counters" and acc.acceptance_rate is not None
    # acceptance from the counters equals the per-request timings the server sent
    assert acc.request_cross_check is True
    assert acc.request_draft_tokens == acc.draft_tokens
    assert acc.request_accepted == acc.accepted
    assert acc.acceptance_rate > 0.5
    # the engine's own per-request log lines agree (they include the warm-up requests)
    logged = report.server["log_acceptance"]
    assert logged["drafted"] >= acc.draft_tokens and logged["accepted"] >= acc.accepted
    assert len(acc.per_position) == 8
    assert acc.mean_acceptance_length == pytest.approx(1 + acc.accepted / acc.drafts)
    assert acc.alpha is not None and lv.c_measured is not None and acc.alpha > lv.c_measured
    # c settled (α far above its interval) after two rounds' pairs: the draft probe stopped,
    # so later rounds launch no draft (issue 24: round cost)
    assert lv.c_ci is not None and lv.c_ci.n_base < 4 * rounds, lv.c_ci
    assert any(n.startswith("draft probe stopped at concurrency 1") for n in report.notes)
    assert lv.predicted_improvement is not None and lv.c_black_box is not None
    assert report.ceiling.drop == 0.0
    html = s.mirror.read_bundle_file("good", f"bench/{d.bench_run_id}/report.html")
    assert html is not None and b"<svg" in html and b"http://" not in html.replace(
        b"http://www.w3.org/2000/svg", b"")
    assert (s.mirror.bundle_dir("good") / STATUS_FILE).is_file()


def test_published_schema_is_the_generated_one() -> None:
    assert json.loads(SCHEMA.read_text()) == report_schema()


DECISION_SCHEMA = SCHEMA.with_name("admission-decision.schema.json")


def _admit_json(capsys: pytest.CaptureFixture[str], s: Signed, d: Decision) -> dict[str, Any]:
    """The document ``admit --json`` prints for ``d`` (the command's own emitter)."""
    capsys.readouterr()
    emit(s.mirror, d, True)
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads(DECISION_SCHEMA.read_text()))
    return doc


@pytest.mark.parametrize("which", ["good", "bad"])
def test_admit_json_of_the_real_runs_validates(
        which: str, good: tuple[Signed, Decision | Rejected],
        bad: tuple[Signed, Decision | Rejected], capsys: pytest.CaptureFixture[str]) -> None:
    """The published schema holds the PASSED/admitted decision of the engine run above, and
    its rejected twin, exactly as ``admit --json`` prints them."""
    s, got = good if which == "good" else bad
    doc = _admit_json(capsys, s, _decision(got))
    want = ("PASSED", "admitted") if which == "good" else ("FAILED", "rejected")
    assert (doc["result"], doc["outcome"], doc["verdict"]["outcome"]) == (*want, want[1])
    assert doc["criteria"] and doc["bench_report_sha256"]


def test_a_bench_cut_short_is_an_inconclusive_decision(
        admit_root: Path, bench_pairs: dict[str, SynthPair], llama_server_bin: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A real admission whose time budget runs out before the first launch: signed FAILED,
    outcome inconclusive (never admitted), and the schema holds that document too."""
    s = signed_bundle(admit_root / "cut", "cut", bench_pairs["good"], levels=[1],
                      admission=GATE)
    with pytest.raises(Rejected) as err:
        admit_bundle(verify_bundle(s.mirror, "cut", s.policy), keys=[s.key],
                     bench_options=BenchOptions(binary=llama_server_bin, time_budget_s=1e-6))
    d = err.value.decision
    assert (d.result, d.outcome) == ("FAILED", "inconclusive"), d.reasons
    doc = _admit_json(capsys, s, d)
    assert doc["outcome"] == doc["verdict"]["outcome"] == "inconclusive"
