"""One offline page for the person who decides: the approver before ``sign``, the operator
before deploy.

The decision comes first (what this version changes, whether the trust policy is satisfied,
what the scan, the benchmark and admission said), then the diff against the last approved
version, the findings with their evidence, provenance, the approval table and the signatures.
The page is one file: inline CSS, no script, nothing fetched, every string autoescaped (model
names, chat templates, finding messages and evidence all come from files an attacker may
have written). Template: ``templates/review/review.html.j2``.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Literal

import jinja2

from specbundle import __version__
from specbundle.attest import SLSA_VSA_V1, Envelope, check_statement, parse_statement
from specbundle.attest.models import VerificationSummaryV1
from specbundle.digest import sha256_bytes
from specbundle.errors import SpecbundleError
from specbundle.mirror import Mirror, utc_now, versions
from specbundle.render.targets import templates_dir
from specbundle.review.approval import ApprovalStatus, approval_status
from specbundle.review.diff import DiffReport, diff_sides
from specbundle.review.sides import OCI_PREFIX, OciAccess, Side, StoreOpener, load_side
from specbundle.strict import MalformedDocument, loads_json, read_mirror_file
from specbundle.verify.policy import TrustPolicy

__all__ = ["Decision", "Review", "build_review", "render_review_html"]

Tone = Literal["good", "bad", "attention", "neutral"]


@dataclass(frozen=True)
class Decision:
    """One line of the decision block: a topic, what it says, and how it reads."""

    topic: str
    text: str
    tone: Tone


@dataclass(frozen=True)
class Review:
    """Everything the page shows, gathered once."""

    bundle: str
    generated: str
    side: Side
    against: Side | None
    diff: DiffReport | None
    approval: ApprovalStatus | None
    policy: str | None
    bench: list[dict[str, Any]] = field(default_factory=list)
    admissions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def decisions(self) -> list[Decision]:
        """The decision block, in the order a reader needs it."""
        return [self._changes(), self._policy(), self._scan(), self._bench()]

    def _changes(self) -> Decision:
        if self.diff is None:
            return Decision("changes", "first version: nothing to compare against", "neutral")
        c = self.diff.changes
        run, gate = sum(x.runtime for x in c), sum(x.gate for x in c)
        text = (f"{len(c)} change(s) against {self.diff.old.label}: {run} alter what runs, "
                f"{gate} alter the admission gate")
        return Decision("changes", text, "attention" if run or gate else "good")

    def _policy(self) -> Decision:
        a = self.approval
        if a is None:
            return Decision("approvals", "no trust policy given, or this version is not in "
                            "the mirror: approvals not evaluated", "neutral")
        if a.problem is not None:
            return Decision("approvals", a.problem, "bad")
        unmet = [r for r in a.requirements if not r.satisfied]
        if not unmet:
            return Decision("approvals", "every requirement of the trust policy is met", "good")
        who = sorted({m for r in unmet for m in r.missing})
        return Decision("approvals", f"{len(unmet)} requirement(s) unmet; still to sign: "
                        f"{', '.join(who) or 'no eligible key left'}", "bad")

    def _scan(self) -> Decision:
        s = self.side.scan
        if s is None:
            return Decision("scan", self.side.scan_note or "no scan report", "bad")
        counts = ", ".join(f"{n} {k}" for k, n in s.counts().items() if n) or "no findings"
        if s.blocked:
            return Decision("scan", f"BLOCKED at {s.fail_on.value}: {counts}", "bad")
        return Decision("scan", f"passed (blocks at {s.fail_on.value}): {counts}", "good")

    def _bench(self) -> Decision:
        adm = self.admissions[-1] if self.admissions else None
        if adm is not None:
            ok = adm["result"] == "PASSED"
            return Decision("admission", f"{adm['result']} at {adm['time']}: "
                            + ("; ".join(adm["reasons"]) or "all criteria met"),
                            "good" if ok else "bad")
        if self.bench:
            b = self.bench[-1]
            return Decision("benchmark", f"{b['engine']} run {b['run_id']}: {b['headline']} "
                            "(not yet admitted for this version)", "attention")
        return Decision("benchmark", "no benchmark or admission for this version yet",
                        "neutral")


def _signed_by(env: Envelope, policy: TrustPolicy | None) -> tuple[list[str], bool | None]:
    if policy is None:
        return [s.keyid or "?" for s in env.signatures], None
    signers = check_statement(env, policy.public_keys).signers
    names = [(k.name if (k := policy.key(fp)) else fp[:16]) for fp in sorted(signers)]
    return names, bool(signers)


def _admissions(raw: bytes | None, side: Side, policy: TrustPolicy | None
                ) -> list[dict[str, Any]]:
    """Admission VSAs that name this very version's manifest digest."""
    out = []
    for line in (raw or b"").splitlines():
        try:
            env = Envelope.from_json(loads_json(line, what="attestation"))
            st = parse_statement(env.payload)
            if st.predicate_type != SLSA_VSA_V1:
                continue
            vsa = st.typed_as(VerificationSummaryV1)  # the signed shape, never .get() chains
        except (MalformedDocument, ValueError, SpecbundleError):
            continue
        sb = vsa.specbundle
        if sb is None or sb.manifest_sha256 != side.manifest_digest:
            continue
        names, ok = _signed_by(env, policy)
        out.append({"result": vsa.verification_result, "time": vsa.time_verified,
                    "reasons": list(sb.reasons or []), "signed_by": names, "verified": ok,
                    "criteria": [c.model_dump(mode="json", by_alias=True)
                                 for c in sb.criteria or []]})
    return out


def _bench_runs(mirror: Mirror, bundle: str) -> list[dict[str, Any]]:
    """Stored benchmark reports' verdicts (unsigned unless an admission bound their digest).

    Read as plain JSON for the few fields shown: the page never loads the benchmark stack.
    """
    out = []
    root = mirror.bundle_dir(bundle) / "bench"
    for path in sorted(root.glob("*/report.json")) if root.is_dir() else []:
        try:
            data = read_mirror_file(path)
            doc = loads_json(data, what="bench report")
        except (OSError, MalformedDocument):
            continue
        if not isinstance(doc, dict):
            continue
        verdict = doc.get("verdict")
        v: dict[str, Any] = verdict if isinstance(verdict, dict) else {}
        out.append({k: str(doc.get(k, "-")) for k in ("run_id", "engine", "created")} | {
            "headline": str(v.get("headline", "no verdict recorded")),
            "outcome": str(v.get("outcome", "unmeasured")), "sha256": sha256_bytes(data)})
    return sorted(out, key=lambda r: r["created"])


def _last_approved(mirror: Mirror, bundle: str, version: int, policy: TrustPolicy) -> str:
    """The newest earlier version whose approvals are complete, else the one before."""
    for v in range(version - 1, 0, -1):
        if approval_status(mirror, bundle, policy, version=v).satisfied:
            return str(v)
    return str(version - 1)


def build_review(mirror: Mirror, bundle: str, *, version: str = "current",
                 against: str | None = None, policy: TrustPolicy | None = None,
                 open_store: StoreOpener | None = None) -> Review:
    """Gather the page: the version under review and what it is compared with.
    ``open_store`` reaches ``oci://`` operands (verified copies removed before returning)."""
    with ExitStack() as stack:
        oci = OciAccess(open_store, stack) if open_store is not None else None
        return _build(mirror, bundle, version, against, policy, oci)


def _build(mirror: Mirror, bundle: str, version: str, against: str | None,
           policy: TrustPolicy | None, oci: OciAccess | None) -> Review:
    if versions.current_version(mirror, bundle) is None and version != "working" \
            and not version.startswith(OCI_PREFIX):
        mirror.load_bundle(bundle)  # BundleNotFound for an unknown name
    side = load_side(mirror, bundle, version, policy, oci=oci)
    in_mirror = side.version is not None and side.label == f"{bundle} v{side.version}"
    if against is None and in_mirror and side.version is not None and side.version > 1:
        against = (_last_approved(mirror, bundle, side.version, policy) if policy
                   else str(side.version - 1))
    elif against is None and not in_mirror and versions.current_version(mirror, bundle):
        against = "current"  # the working record before sign, a transfer set before import
    old = load_side(mirror, bundle, against, policy, oci=oci) if against is not None else None
    approval = approval_status(mirror, bundle, policy, version=side.version) \
        if policy is not None and in_mirror else None
    log = mirror.read_bundle_file(bundle, "attestations.jsonl")
    return Review(bundle, utc_now(), side, old, diff_sides(old, side) if old else None,
                  approval, policy.source if policy else None,
                  _bench_runs(mirror, bundle) if in_mirror else [],
                  _admissions(log, side, policy) if side.manifest_digest else [])


def render_review_html(review: Review) -> str:
    """The page's HTML text."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir() / "review")),
        autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template("review.html.j2").render(r=review, version=__version__)
