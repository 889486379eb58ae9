"""Which signatures count and which statements are excluded, and why: the verifier's rules.

Every place that asks "does this signature count for this bundle under the trust policy?"
(verify itself, the approval status review shows, ``oci pull``'s choice among manifest copies,
audit) calls these two functions, so no stage can count a signature the verifier would not.

* :func:`eligible_signers`: a signer counts when its key is in the policy, not revoked, scoped
  to the bundle name *and* every repo the signed thing names, a model signer for a
  ``model.sig``, and one of the requirement's designated approvers where the policy names
  them (``signers:``).
* :func:`statement_exclusion`: a statement naming an artifact's signed root still does not
  count when it names another commit, another bundle, another spec or scan report than the
  signed ones, reports a failed check, or is dated in the future beyond the clock skew.
  :func:`is_stale` adds the requirement's ``max_age``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from specbundle.attest import KIND_BY_PREDICATE, CheckedStatement, Statement
from specbundle.attest.models import (
    FetchProvenanceV1,
    PairBindingV1,
    ScanResultV01,
    VerificationSummaryV1,
)
from specbundle.verify.policy import MAX_CLOCK_SKEW, TrustPolicy

__all__ = ["ArtifactRef", "Exclusion", "Signers", "StatementVerdict", "eligible_keys",
           "eligible_signers", "is_stale", "statement_exclusion", "statement_verdicts"]


@dataclass(frozen=True)
class ArtifactRef:
    """What the statements must name: role, repo, commit and the signed OMS root digest."""

    role: str
    repo: str
    commit: str
    root: str


@dataclass(frozen=True)
class Signers:
    """The verdict on a set of signers: who counts, and why each other one does not."""

    counted: frozenset[str]
    excluded: Mapping[str, str] = field(default_factory=dict)


def _why_not(policy: TrustPolicy, fp: str, bundle: str, repos: Sequence[str],
             revoked: Mapping[str, str], designated: frozenset[str] | None,
             model: bool) -> str | None:
    key = policy.key(fp)
    if key is None:
        return "not a key of the trust policy"
    if fp in revoked:
        return revoked[fp]
    if model and fp not in policy.model_signers:
        return "not a model signer of the policy"
    if not key.may_sign_all(tuple(repos), bundle):
        return f"out of scope (bundle {bundle!r}, repo(s) {', '.join(repos)})"
    if designated is not None and fp not in designated:
        return "not a designated signer of this requirement"
    return None


def eligible_signers(
    policy: TrustPolicy, signers: Iterable[str], *, bundle: str, repos: Sequence[str],
    revoked: Mapping[str, str], designated: frozenset[str] | None = None, model: bool = False,
) -> Signers:
    """The one eligible-signer rule: which of ``signers`` count for a signed thing.

    Args:
        policy: the trust policy.
        signers: fingerprints whose signature verified.
        bundle: the bundle name the signed thing belongs to.
        repos: every repo it names (one artifact's repo for a per-artifact statement or
            ``model.sig``; all of them for a manifest or a whole-bundle statement).
        revoked: fingerprint -> why it is revoked (policy, log, transfer index).
        designated: the requirement's named approvers, where the policy names them.
        model: the signature is a ``model.sig`` (only the policy's model signers count).

    Returns:
        Who counts, and a reason for every signer that does not.
    """
    counted: set[str] = set()
    excluded: dict[str, str] = {}
    for fp in sorted(set(signers)):
        why = _why_not(policy, fp, bundle, repos, revoked, designated, model)
        if why is None:
            counted.add(fp)
        else:
            excluded[fp] = why
    return Signers(frozenset(counted), excluded)


def eligible_keys(
    policy: TrustPolicy, *, bundle: str, repos: Sequence[str], revoked: Mapping[str, str],
    designated: frozenset[str] | None = None, model: bool = False,
) -> frozenset[str]:
    """Every policy key whose signature would count (:func:`eligible_signers` over all)."""
    return eligible_signers(policy, (k.fingerprint for k in policy.keys), bundle=bundle,
                            repos=repos, revoked=revoked, designated=designated,
                            model=model).counted


ExclusionKind = Literal["other-commit", "other-bundle", "other-scan", "other-spec", "failed",
                        "future"]


@dataclass(frozen=True)
class Exclusion:
    """Why a statement naming an artifact's root does not count for this version."""

    kind: ExclusionKind
    message: str


def _other_bundle(st: Statement, bundle: str, scan_sha: str | None) -> Exclusion | None:
    """Statements of other bundles (or naming another scan report) never count."""
    typed = st.typed
    if isinstance(typed, PairBindingV1):
        named: str | None = typed.bundle
    elif isinstance(typed, FetchProvenanceV1):
        named = typed.build_definition.internal_parameters.bundle
    elif isinstance(typed, ScanResultV01):
        got = typed.specbundle_scan.report_sha256 if typed.specbundle_scan else None
        if scan_sha is not None and got != scan_sha:
            return Exclusion("other-scan", f"a scan result names report {str(got)[:16]}…, "
                             "not the signed one")
        return None
    else:
        return None
    if named == bundle:
        return None
    kind = "pair-binding" if isinstance(typed, PairBindingV1) else "fetch-provenance"
    return Exclusion("other-bundle", f"a {kind} is for bundle {named!r}")


def _other_spec(st: Statement, spec_sha: str | None) -> Exclusion | None:
    """An approval naming a spec approves only that spec. Statements made before approvals
    named the spec name none; they still count, and the manifest itself must carry the
    designated approvers' signatures."""
    typed = st.typed
    if isinstance(typed, PairBindingV1):
        named, kind = typed.spec_sha256, "pair-binding"
    elif isinstance(typed, ScanResultV01):
        named = typed.specbundle_scan.spec_sha256 if typed.specbundle_scan else None
        kind = "scan-result"
    else:
        return None
    if spec_sha is None or named is None or named == spec_sha:
        return None
    return Exclusion("other-spec", f"a {kind} approves another spec ({named[:16]}…)")


def _failing(st: Statement) -> Exclusion | None:
    typed = st.typed
    if isinstance(typed, ScanResultV01) and typed.result not in ("PASSED", "WARNED"):
        return Exclusion("failed", f"scan result is {typed.result!r}")
    if isinstance(typed, VerificationSummaryV1) and typed.verification_result != "PASSED":
        return Exclusion("failed", f"verification result is {typed.verification_result!r}")
    return None


def statement_exclusion(
    st: Statement, art: ArtifactRef, *, bundle: str, now: datetime,
    scan_sha: str | None = None, spec_sha: str | None = None,
) -> Exclusion | None:
    """Why ``st`` (which names ``art``'s signed root) does not count, or None when it does.

    ``scan_sha`` / ``spec_sha``: the signed scan report's and spec's digests of the version.
    """
    commits = st.digests("gitCommit") | st.digests("specbundleContentCommit")
    if art.commit not in commits:
        return Exclusion("other-commit",
                         f"a statement names commit(s) {sorted(commits)}, not {art.commit}")
    why = _other_bundle(st, bundle, scan_sha) or _other_spec(st, spec_sha) or _failing(st)
    if why is not None:
        return why
    t = st.time
    if t is not None and t - now > MAX_CLOCK_SKEW:
        return Exclusion("future", f"signed {t.isoformat()}, in the future (more than "
                         f"{MAX_CLOCK_SKEW} ahead of this clock); not counted")
    return None


def is_stale(st: Statement, max_age: timedelta | None, now: datetime) -> bool:
    """Older than ``max_age`` (a statement without a signed time is stale under any max age)."""
    t = st.time
    return max_age is not None and (t is None or now - t > max_age)


@dataclass(frozen=True)
class StatementVerdict:
    """The verifier's verdict on one signed attestation line, as audit renders it.

    ``counted``: signers whose signature counts for at least one artifact the statement names
    (under :func:`eligible_signers`, without any one requirement's designated approvers);
    ``excluded``: every other signer and why; ``reason``: why the statement as a whole does
    not count for this version (None: it does); ``superseded``: it was excluded only for
    naming another spec or scan report of this bundle (an earlier version's approval). A
    failing result (a rejected admission, a failed scan) is a valid record of that failure: it
    never counts toward a requirement, but it is not excluded from the trail.
    """

    line: int
    kind: str
    counted: frozenset[str]
    excluded: Mapping[str, str]
    reason: str | None
    superseded: bool = False

    @property
    def ok(self) -> bool:
        """The statement belongs to this version and an eligible key signed it."""
        return self.reason is None and bool(self.counted)


def statement_verdicts(
    stmts: Sequence[tuple[int, CheckedStatement]], policy: TrustPolicy, bundle: str,
    arts: Mapping[str, ArtifactRef], now: datetime, revoked: Mapping[str, str],
    scan_sha: str | None = None, spec_sha: str | None = None,
) -> tuple[StatementVerdict, ...]:
    """One :class:`StatementVerdict` per signed statement (``(line, statement)`` pairs)."""
    out: list[StatementVerdict] = []
    for line, cs in stmts:
        st = cs.statement
        kind = KIND_BY_PREDICATE.get(st.predicate_type)
        named = [a for a in arts.values() if a.root in st.digests("sha256")]
        counted: set[str] = set()
        excluded: dict[str, str] = {}
        reasons: list[str] = []
        kinds: set[str] = set()
        if kind is None:
            reasons.append(f"predicate type {st.predicate_type} is not one the policy knows")
        elif not named:
            reasons.append("its subjects name none of this bundle's signed root digests")
        elif (why := _binding_mismatch(st, arts)) is not None:
            reasons.append(why)
        for art in named if not reasons else ():
            ex = statement_exclusion(st, art, bundle=bundle, now=now, scan_sha=scan_sha,
                                     spec_sha=spec_sha)
            if ex is not None and ex.kind != "failed":
                reasons.append(ex.message)
                kinds.add(ex.kind)
                continue
            v = eligible_signers(policy, cs.signers, bundle=bundle, repos=(art.repo,),
                                 revoked=revoked)
            counted |= v.counted
            excluded.update(v.excluded)
        excluded = {fp: why for fp, why in excluded.items() if fp not in counted}
        reason = None if counted else ("; ".join(dict.fromkeys(reasons)) or "no signer is "
                                       "eligible: " + "; ".join(
                                           f"{fp[:16]}… {why}" for fp, why in excluded.items()))
        out.append(StatementVerdict(
            line, kind or st.predicate_type, frozenset(counted), excluded, reason,
            not counted and bool(kinds) and kinds <= {"other-spec", "other-scan"}))
    return tuple(out)


def _binding_mismatch(st: Statement, arts: Mapping[str, ArtifactRef]) -> str | None:
    """A pair binding must name both current roots: a swapped draft is bound to nothing."""
    if not isinstance(st.typed, PairBindingV1) or "target" not in arts:
        return None
    draft = arts.get("draft")  # absent: no draft, or its model.sig did not verify
    bound = st.typed.draft.root_digest if st.typed.draft else None
    if (draft is not None and draft.root != bound) or arts["target"].root not in st.digests(
            "sha256"):
        return "the pair binding does not name both current roots (draft swapped?)"
    return None
