"""``admit_bundle``: verify, benchmark, gate, then sign the decision (SLSA VSA).

Any stage that fails or cannot measure rejects the bundle with its reason; the decision,
PASSED or FAILED, is always signed into the bundle's attestation log (with a bench-evidence
statement naming the report's digest when a report exists), so an auditor sees refusals as
well as admissions. ``admit/status.json`` is rewritten on every decision: only the latest
PASSED one marks the bundle admitted, and a later rejection clears it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from specbundle import __version__
from specbundle._fsutil import canonical_json
from specbundle.admit.decision import Criterion, GateResult, evaluate
from specbundle.attest import (
    SigningKey,
    Statement,
    Subject,
    append_attestation,
    read_attestations,
    sign_statement,
)
from specbundle.attest.mirrored import claimed_subjects
from specbundle.attest.models import (
    AdmissionDetails,
    BenchEvidenceV1,
    CriterionResult,
    DigestRef,
    ResourceDescriptor,
    VerificationSummaryV1,
)
from specbundle.attest.models.standard import PolicyRef, Verifier
from specbundle.bench import BenchOptions, BenchReport, run_bench
from specbundle.bench.runner import Progress
from specbundle.digest import sha256_bytes
from specbundle.errors import AdmissionRejected, MirrorError, SpecbundleError, UsageError
from specbundle.mirror import Mirror, utc_now
from specbundle.strict import MalformedDocument, loads_json
from specbundle.verify import TrustPolicy, VerifiedBundle, verify_bundle

__all__ = ["STATUS_FILE", "VERIFIER_ID", "Decision", "Rejected", "admit_bundle", "read_status",
           "reject_unverified"]

VERIFIER_ID = "https://specbundle.dev/admit"
STATUS_FILE = "admit/status.json"


@dataclass(frozen=True)
class Decision:
    """The signed outcome of one admission run."""

    bundle: str
    result: Literal["PASSED", "FAILED"]
    reasons: tuple[str, ...]
    criteria: tuple[Criterion, ...]
    time: str
    policy_sha256: str
    bench_run_id: str | None
    bench_report_sha256: str | None
    vsa_line: int
    signers: tuple[str, ...]
    # FAILED splits into "rejected" and "inconclusive" (the bench was cut short by its time
    # budget, its rounds or an interrupt before the ratio was settled): never admitted
    outcome: Literal["admitted", "rejected", "inconclusive"] = "rejected"

    @property
    def admitted(self) -> bool:
        """PASSED."""
        return self.result == "PASSED"

    def to_json(self) -> dict[str, Any]:
        """JSON form (``--json``)."""
        return {"bundle": self.bundle, "result": self.result, "outcome": self.outcome,
                "admitted": self.admitted,
                "reasons": list(self.reasons),
                "criteria": [{"name": c.name, "passed": c.passed, "measured": c.measured,
                              "threshold": c.threshold, "detail": c.detail}
                             for c in self.criteria],
                "time": self.time, "policy_sha256": self.policy_sha256,
                "bench_run_id": self.bench_run_id,
                "bench_report_sha256": self.bench_report_sha256,
                "vsa_line": self.vsa_line, "signers": list(self.signers)}


class Rejected(AdmissionRejected):
    """The gate said no (exit 5); ``decision`` is the signed FAILED decision."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(f"bundle {decision.bundle!r} rejected:\n  "
                         + "\n  ".join(decision.reasons))
        self.decision = decision


def _inputs(mirror: Mirror, name: str) -> list[ResourceDescriptor]:
    envs = read_attestations(mirror, name, problems=[])
    return [ResourceDescriptor(uri=f"specbundle:bundle/{name}/attestations.jsonl#{i}",
                               digest={"sha256": sha256_bytes(env.to_line())})
            for i, env in enumerate(envs, 1)]


def _figures(report: BenchReport) -> dict[str, str]:
    lv = report.at_p95
    if lv is None:
        return {}
    vals: dict[str, float | None] = {"concurrency": float(lv.concurrency),
            "throughput_ratio": lv.ratio.ratio if lv.ratio else None,
            "ratio_low": lv.ratio.low if lv.ratio else None,
            "ratio_high": lv.ratio.high if lv.ratio else None,
            # the sequential rule's per-look confidence when it looked more than once
            "ratio_confidence": lv.ratio.confidence if lv.ratio else None,
            "acceptance_rate": lv.acceptance.acceptance_rate,
            "mean_acceptance_length": lv.acceptance.mean_acceptance_length,
            "alpha": lv.acceptance.alpha, "c": lv.c_measured, "c_black_box": lv.c_black_box}
    # Statements carry no floats (canonical JSON): figures travel as decimal strings.
    return {k: format(v, ".6g") for k, v in vals.items() if v is not None}


@dataclass(frozen=True)
class _Judged:
    """What the decision names: the verified version, or what a refused record claims."""

    mirror: Mirror
    name: str
    subjects: list[Subject]
    manifest_sha256: str | None = None
    version: int | None = None


def _sign(judged: _Judged, keys: Sequence[SigningKey], policy: TrustPolicy,
          report: BenchReport | None, gate: GateResult, reasons: tuple[str, ...]) -> Decision:
    now = utc_now()
    mirror, name, subjects = judged.mirror, judged.name, judged.subjects
    result: Literal["PASSED", "FAILED"] = "PASSED" if not reasons else "FAILED"
    outcome: Literal["admitted", "rejected", "inconclusive"] = (
        "admitted" if not reasons else "inconclusive"
        if gate.inconclusive and len(reasons) == len(gate.reasons) else "rejected")
    digest = sha256_bytes(report.to_bytes()) if report else None
    with mirror.lock():
        inputs = _inputs(mirror, name)
        if report is not None:
            ran = DigestRef(uri=f"specbundle:bundle/{name}/bench/{report.run_id}/report.json",
                            digest={"sha256": sha256_bytes(report.to_bytes())},
                            schema_=report.schema_version)
            ev = Statement.of(subjects, BenchEvidenceV1(
                time_created=now, run_id=report.run_id, engine=report.engine, report=ran,
                figures=_figures(report)))
            env = sign_statement(ev, keys)
            line = append_attestation(mirror, name, env)
            inputs.append(ResourceDescriptor(uri=ran.uri, digest=ran.digest))
            inputs.append(ResourceDescriptor(
                uri=f"specbundle:bundle/{name}/attestations.jsonl#{line}",
                digest={"sha256": sha256_bytes(env.to_line())}))
        vsa = Statement.of(subjects, VerificationSummaryV1(
            verifier=Verifier(id=VERIFIER_ID, version={"specbundle": __version__}),
            time_verified=now, resource_uri=f"specbundle:bundle/{name}",
            policy=PolicyRef(uri=policy.source, digest={"sha256": policy.digest}),
            input_attestations=inputs, verification_result=result,
            verified_levels=["SLSA_BUILD_LEVEL_UNEVALUATED"],
            specbundle=AdmissionDetails(
                reasons=list(reasons), outcome=outcome,
                manifest_sha256=judged.manifest_sha256, version=judged.version,
                criteria=[CriterionResult(name=c.name, passed=c.passed, measured=c.measured,
                                          threshold=c.threshold) for c in gate.criteria]),
        ))
        vsa_line = append_attestation(mirror, name, sign_statement(vsa, keys))
        status = {"bundle": name, "admitted": result == "PASSED", "result": result,
                  "outcome": outcome,
                  "manifest_sha256": judged.manifest_sha256,
                  "time": now, "vsa_line": vsa_line, "policy_sha256": policy.digest,
                  "bench_run_id": report.run_id if report else None,
                  "bench_report_sha256": digest}
        mirror.write_bundle_file(name, STATUS_FILE, canonical_json(status) + b"\n")
        mirror.append_event("admission", name, {
            "result": result, "outcome": outcome, "reasons": list(reasons),
            "vsa_line": vsa_line,
            "manifest_sha256": judged.manifest_sha256,
            "bench_run_id": status["bench_run_id"], "bench_report_sha256": digest})
    return Decision(name, result, reasons, gate.criteria, now, policy.digest,
                    report.run_id if report else None, digest, vsa_line,
                    tuple(k.fingerprint for k in keys), outcome)


def admit_bundle(bundle: VerifiedBundle, *, keys: Sequence[SigningKey],
                 engine: str = "llamacpp", bench_options: BenchOptions | None = None,
                 progress: Progress | None = None,
                 on_stage: Callable[[str], None] | None = None) -> Decision:
    """Bench and gate a verified bundle version; sign the decision; raise if rejected.

    The thresholds are the signed spec's; after the benchmark the bundle is verified again
    under the same policy and must still be the very version benchmarked.

    Raises:
        Rejected: (an :class:`AdmissionRejected`, exit 5) with every reason; the FAILED
            decision is signed and logged before it is raised.
        UsageError: no signing key.
    """
    if not keys:
        raise UsageError("no signing key given", hint="pass --key KEY.pem")
    stage = on_stage or (lambda _s: None)
    mirror, name, policy = bundle.mirror, bundle.name, bundle.policy
    reasons: list[str] = []
    report: BenchReport | None = None
    gate = GateResult(())
    stage("bench")
    try:
        report = run_bench(bundle, engine=engine, options=bench_options, progress=progress)
    except SpecbundleError as err:
        reasons.append(f"bench: could not measure: {err.message}")
    if report is not None:
        stage("gate")
        gate = evaluate(report, bundle.spec.admission)  # thresholds from the signed manifest
        reasons += gate.reasons
        # The bundle must still be the very version benchmarked (nothing swapped meanwhile).
        try:
            again = verify_bundle(mirror, name, policy)
            if again.manifest_digest != bundle.manifest_digest:
                reasons.append("verification: the bundle changed to another version during "
                               "the benchmark")
        except SpecbundleError as err:
            reasons.append(f"verification after the benchmark: {err.message}")
    stage("sign")
    judged = _Judged(mirror, name, bundle.subjects(), bundle.manifest_digest, bundle.version)
    decision = _sign(judged, keys, policy, report, gate, tuple(reasons))
    if not decision.admitted:
        raise Rejected(decision)
    return decision


def reject_unverified(mirror: Mirror, name: str, failure: SpecbundleError, *,
                      policy: TrustPolicy, keys: Sequence[SigningKey]) -> Rejected:
    """Sign and log the FAILED decision for a bundle that did not verify; returns the
    :class:`Rejected` to raise. The decision names the artifacts as the record claims them."""
    if not keys:
        raise UsageError("no signing key given", hint="pass --key KEY.pem")
    judged = _Judged(mirror, name, claimed_subjects(mirror, mirror.load_bundle(name)))
    return Rejected(_sign(judged, keys, policy, None, GateResult(()),
                          (f"verification: {failure.message}",)))


def read_status(mirror: Mirror, name: str) -> dict[str, Any] | None:
    """The bundle's latest admission status, or ``None`` if it was never decided."""
    data = mirror.read_bundle_file(name, STATUS_FILE)
    if data is None:
        return None
    try:
        doc = loads_json(data, what=STATUS_FILE)
    except MalformedDocument as err:
        raise MirrorError(f"bundle {name!r}: {err}") from None
    if not isinstance(doc, dict):
        raise MirrorError(f"bundle {name!r}: {STATUS_FILE} is not a JSON object")
    return doc
