"""Approval status of one bundle version against the trust policy: who signed, who still must.

``exit 3`` alone does not tell an approver what to do next. For each requirement the policy
makes (the manifest's k-of-n, each artifact's ``model.sig``, each statement kind per artifact)
this lists the keys whose signature counts, the ones that signed but do not count (too old,
revoked, out of scope, a failing result) and the eligible keys that have not signed yet, and
says what each signature covers: the whole manifest (spec, thresholds, engine settings,
artifacts) or the artifacts' bytes only. It reads the policy's public fields and never
decides anything: :func:`specbundle.verify.verify_bundle` stays the one verifier.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from specbundle.attest import (
    Envelope,
    Statement,
    check_statement,
    open_model_sig,
    parse_statement,
    read_attestations,
)
from specbundle.attest.manifest import BundleManifest, parse_manifest
from specbundle.errors import VerificationError
from specbundle.mirror import Mirror, versions
from specbundle.mirror.versions import model_sig_rel
from specbundle.review.sides import COVERS
from specbundle.strict import MalformedDocument, loads_json
from specbundle.verify.eligibility import (
    ArtifactRef,
    eligible_keys,
    is_stale,
    statement_exclusion,
)
from specbundle.verify.manifest_check import manifest_threshold
from specbundle.verify.policy import TrustPolicy
from specbundle.verify.revocations import revoked_fingerprints

__all__ = ["ApprovalStatus", "Requirement", "approval_status"]


@dataclass(frozen=True)
class Requirement:
    """One requirement: ``threshold`` of ``eligible`` keys must be among ``signed``."""

    kind: str
    subject: str
    covers: str
    threshold: int
    signed: list[str]
    not_counted: list[str]
    missing: list[str]

    @property
    def satisfied(self) -> bool:
        """Enough counting signatures."""
        return len(self.signed) >= self.threshold

    @property
    def still_needed(self) -> int:
        """How many more eligible keys must sign."""
        return max(0, self.threshold - len(self.signed))

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"kind": self.kind, "subject": self.subject, "covers": self.covers,
                "threshold": self.threshold, "signed": self.signed,
                "not_counted": self.not_counted, "missing": self.missing,
                "still_needed": self.still_needed, "satisfied": self.satisfied}


@dataclass(frozen=True)
class ApprovalStatus:
    """Every requirement for one version; ``problem`` when the manifest cannot be read."""

    bundle: str
    version: int | None
    policy_sha256: str
    requirements: list[Requirement] = field(default_factory=list)
    problem: str | None = None

    @property
    def satisfied(self) -> bool:
        """Whether every requirement has enough counting signatures."""
        return self.problem is None and all(r.satisfied for r in self.requirements)

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"bundle": self.bundle, "version": self.version,
                "policy_sha256": self.policy_sha256, "satisfied": self.satisfied,
                "problem": self.problem, "requirements": [r.to_json() for r in self.requirements]}


def _name(policy: TrustPolicy, fp: str) -> str:
    k = policy.key(fp)
    return k.name if k else f"{fp[:16]}…"


def _manifest(mirror: Mirror, bundle: str, version: int | None
              ) -> tuple[BundleManifest, Envelope] | str:
    """The version's manifest as it claims itself (only for listing what is missing)."""
    try:
        cur = versions.read_current_manifest(mirror, bundle) if version is None else (
            version, versions.read_manifest(mirror, bundle, version))
        if cur is None or cur[1] is None:
            return "no signed manifest: run `specbundle sign`"
        env = Envelope.from_json(loads_json(cur[1], what="bundle manifest"))
        return parse_manifest(parse_statement(env.payload), env.payload), env
    except (VerificationError, MalformedDocument, ValueError) as err:
        return f"manifest unreadable: {err}"


def _manifest_req(policy: TrustPolicy, man: BundleManifest, env: Envelope,
                  revoked: Mapping[str, str]) -> Requirement:
    signers = check_statement(env, policy.public_keys).signers
    eligible = eligible_keys(policy, bundle=man.bundle, repos=man.repos, revoked=revoked)
    return Requirement(
        "manifest", f"bundle {man.bundle} v{man.version}", COVERS["manifest"],
        manifest_threshold(policy), sorted(_name(policy, f) for f in signers & eligible),
        sorted(f"{_name(policy, f)} ({revoked.get(f, 'out of scope')})"
               for f in signers - eligible),
        sorted(_name(policy, f) for f in eligible - signers))


def _model_sig_req(mirror: Mirror, policy: TrustPolicy, man: BundleManifest, role: str,
                   repo: str, revoked: Mapping[str, str]) -> Requirement:
    data = versions.read_version_file(mirror, man.bundle, man.version, model_sig_rel(role))
    eligible = eligible_keys(policy, bundle=man.bundle, repos=(repo,), revoked=revoked,
                             model=True)
    signed: set[str] = set()
    for k in policy.keys:
        if data is None:
            break
        try:
            oms = open_model_sig(data, k.public)
        except VerificationError:
            continue
        if oms.root_digest == man.roots.get(role):
            signed.add(k.fingerprint)
    return Requirement("model.sig", f"{role} ({repo})", "artifact files (OMS digests)", 1,
                       sorted(_name(policy, f) for f in signed & eligible),
                       sorted(_name(policy, f) for f in signed - eligible),
                       sorted(_name(policy, f) for f in eligible - signed))


def _designated_reqs(policy: TrustPolicy, man: BundleManifest, env: Envelope,
                     revoked: Mapping[str, str]) -> list[Requirement]:
    """Requirements whose policy names its approvers (``signers:``): they must also sign the
    manifest itself, so the spec (K, thresholds, engine arguments) changes only with them."""
    signers = check_statement(env, policy.public_keys).signers
    out = []
    for req in policy.requirements:
        if not req.designated:
            continue
        eligible = eligible_keys(policy, bundle=man.bundle, repos=man.repos, revoked=revoked,
                                 designated=req.signers)
        out.append(Requirement(
            "manifest", f"{req.kind} approvers, bundle {man.bundle} v{man.version}",
            COVERS["manifest"], req.threshold, sorted(_name(policy, f) for f in signers & eligible),
            [], sorted(_name(policy, f) for f in eligible - signers)))
    return out


#: How the review lists a statement verify excludes (verify's rule; the review's words).
_EXCLUDED: Mapping[str, str] = {
    "other-commit": "names another commit", "other-bundle": "for another bundle",
    "other-scan": "names another scan report", "other-spec": "approves another spec",
    "future": "dated in the future",
}


def _why_not(st: Statement, man: BundleManifest, art: ArtifactRef, now: datetime) -> str | None:
    """Why a statement naming this artifact still does not approve this version
    (:func:`~specbundle.verify.eligibility.statement_exclusion`, the verifier's rule)."""
    ex = statement_exclusion(st, art, bundle=man.bundle, now=now,
                             scan_sha=man.scan_report_sha256, spec_sha=man.spec_sha256 or None)
    return None if ex is None else _EXCLUDED.get(ex.kind, ex.message)


def _statement_reqs(mirror: Mirror, policy: TrustPolicy, man: BundleManifest,
                    arts: list[ArtifactRef], revoked: Mapping[str, str], now: datetime
                    ) -> list[Requirement]:
    stmts = []
    for env in read_attestations(mirror, man.bundle, problems=[]):
        try:
            cs = check_statement(env, policy.public_keys)
        except VerificationError:
            continue
        if cs.signers:
            stmts.append(cs)
    out = []
    for req in policy.requirements:
        for art in arts:
            eligible = eligible_keys(policy, bundle=man.bundle, repos=(art.repo,),
                                     revoked=revoked, designated=req.signers)
            fresh: set[str] = set()
            other: dict[str, str] = {}
            for cs in stmts:
                st = cs.statement
                if st.predicate_type != req.predicate_type or art.root not in st.digests(
                        "sha256"):
                    continue
                why = _why_not(st, man, art, now)
                if why is not None:
                    for fp in cs.signers - fresh:
                        other[fp] = why
                    continue
                old = is_stale(st, req.max_age, now)
                for fp in cs.signers:
                    if fp in eligible and not old:
                        fresh.add(fp)
                        other.pop(fp, None)
                    elif fp not in fresh:
                        other[fp] = ("older than max_age" if old and fp in eligible
                                     else revoked.get(fp, "not an eligible signer"))
            out.append(Requirement(
                req.kind, f"{art.role} ({art.repo})", COVERS.get(req.kind, "artifacts"),
                req.threshold, sorted(_name(policy, f) for f in fresh),
                sorted(f"{_name(policy, f)} ({why})" for f, why in other.items()
                       if f not in fresh),
                sorted(_name(policy, f) for f in eligible - fresh)))
    return out


def approval_status(mirror: Mirror, bundle: str, policy: TrustPolicy, *,
                    version: int | None = None, now: datetime | None = None) -> ApprovalStatus:
    """Each requirement of ``policy`` for ``bundle``'s version (default: current)."""
    got = _manifest(mirror, bundle, version)
    if isinstance(got, str):
        return ApprovalStatus(bundle, version, policy.digest, [], got)
    man, env = got
    revoked = revoked_fingerprints(mirror, policy)
    reqs = [_manifest_req(policy, man, env, revoked), *_designated_reqs(policy, man, env, revoked)]
    reqs += [_model_sig_req(mirror, policy, man, a.role, a.repo, revoked)
             for a in man.record.artifacts]
    arts = [ArtifactRef(a.role, a.repo, a.commit, man.roots[a.role])
            for a in man.record.artifacts]
    reqs += _statement_reqs(mirror, policy, man, arts, revoked, now or datetime.now(UTC))
    return ApprovalStatus(bundle, man.version, policy.digest, reqs)
