"""Count signed, fresh, in-scope statements per artifact against the policy's k-of-n rules.

The attestation log is not authenticated as a whole, so nothing in it counts unless its
envelope verifies under a policy key that is scoped to the artifact's repo or the bundle, the
statement names the artifact's signed root digest *and* its commit, it is younger than the
requirement's max age, and (for results) it says the check passed. Anything malformed, badly
signed, or of a predicate type the policy does not know is a failure, not noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from specbundle.attest import (
    KIND_BY_PREDICATE,
    PAIR_BINDING_V1,
    SCAN_RESULT,
    SLSA_PROVENANCE_V1,
    SLSA_VSA_V1,
    CheckedStatement,
    Envelope,
    WrongPredicateType,
    check_statement,
)
from specbundle.attest.predicates import TUNE_SCHEDULE_V1
from specbundle.errors import VerificationError
from specbundle.schedule import SCHEDULE_FILE, schedule_digest
from specbundle.verify.diff import Problem, ProblemKind
from specbundle.verify.policy import MAX_CLOCK_SKEW, Requirement, TrustPolicy

__all__ = ["ArtifactRef", "evaluate_attestations"]


@dataclass(frozen=True)
class ArtifactRef:
    """What the statements must name: role, repo, commit and the signed OMS root digest."""

    role: str
    repo: str
    commit: str
    root: str


def _failing(st_type: str, predicate: Mapping[str, Any]) -> str | None:
    if st_type == SCAN_RESULT and predicate.get("result") not in ("PASSED", "WARNED"):
        return f"scan result is {predicate.get('result')!r}"
    if st_type == SLSA_VSA_V1 and predicate.get("verificationResult") != "PASSED":
        return f"verification result is {predicate.get('verificationResult')!r}"
    return None


def _other_bundle(st_type: str, predicate: Mapping[str, Any], bundle: str,
                  scan_sha: str | None) -> str | None:
    """Why a statement belongs to another bundle (statements of other bundles never count)."""
    if st_type == PAIR_BINDING_V1:
        named = predicate.get("bundle")
    elif st_type == SLSA_PROVENANCE_V1:
        bd = predicate.get("buildDefinition")
        ip = bd.get("internalParameters") if isinstance(bd, dict) else None
        named = ip.get("bundle") if isinstance(ip, dict) else None
    elif st_type == SCAN_RESULT:
        sc = predicate.get("specbundle_scan")
        got = sc.get("reportSha256") if isinstance(sc, dict) else None
        if scan_sha is not None and got != scan_sha:
            return f"a scan result names report {str(got)[:16]}…, not the signed one"
        return None
    else:
        return None
    return None if named == bundle else f"a {KIND_BY_PREDICATE[st_type]} is for bundle {named!r}"


def _other_spec(st_type: str, predicate: Mapping[str, Any], spec_sha: str | None) -> str | None:
    """Why an approval that names a spec does not approve this version's signed spec.

    Statements made before approvals named the spec name none; they still count, and the
    manifest itself must carry the designated approvers' signatures (manifest_check).
    """
    if st_type == PAIR_BINDING_V1:
        named = predicate.get("specSha256")
    elif st_type == SCAN_RESULT:
        sc = predicate.get("specbundle_scan")
        named = sc.get("specSha256") if isinstance(sc, dict) else None
    else:
        return None
    if spec_sha is None or named is None or named == spec_sha:
        return None
    return f"a {KIND_BY_PREDICATE[st_type]} approves another spec ({str(named)[:16]}…)"


def _open_all(envs: Sequence[Envelope], policy: TrustPolicy) -> tuple[
        list[CheckedStatement], list[Problem]]:
    checked: list[CheckedStatement] = []
    problems: list[Problem] = []
    for i, env in enumerate(envs, start=1):
        where = f"attestation #{i}"
        try:
            cs = check_statement(env, policy.public_keys)
        except WrongPredicateType as err:  # a type (or version) no model exists for
            problems.append(Problem("wrong-predicate-type", where, err.message,
                                    ", ".join(sorted(KIND_BY_PREDICATE)), err.predicate_type))
            continue
        except VerificationError as err:
            problems.append(Problem("malformed", where, err.message))
            continue
        kind = KIND_BY_PREDICATE.get(cs.statement.predicate_type, "?")
        for msg in cs.check.problems:
            pk: ProblemKind = "bad-signature" if msg.startswith("bad") else "unknown-signature"
            problems.append(Problem(pk, f"{where} ({kind})", msg))
        if cs.signers and cs.statement.predicate_type not in KIND_BY_PREDICATE:
            problems.append(Problem("wrong-predicate-type", where,
                                    "predicate type is not one the policy knows",
                                    ", ".join(sorted(KIND_BY_PREDICATE)),
                                    cs.statement.predicate_type))
        if cs.signers:
            checked.append(cs)
    return checked, problems


def _evaluate(req: Requirement, art: ArtifactRef, bundle: str, policy: TrustPolicy,
              stmts: list[CheckedStatement], now: datetime, revoked: Mapping[str, str],
              scan_sha: str | None, spec_sha: str | None = None) -> Problem | None:
    fresh: set[str] = set()
    stale: set[str] = set()
    notes: list[str] = []
    eligible = {k.fingerprint for k in policy.keys
                if k.may_sign(art.repo, bundle) and k.fingerprint not in revoked}
    for cs in stmts:
        st = cs.statement
        if st.predicate_type != req.predicate_type or art.root not in st.digests("sha256"):
            continue
        commits = st.digests("gitCommit") | st.digests("specbundleContentCommit")
        if art.commit not in commits:
            notes.append(f"a statement names commit(s) {sorted(commits)}, not {art.commit}")
            continue
        why = _other_bundle(st.predicate_type, st.predicate, bundle, scan_sha) or _other_spec(
            st.predicate_type, st.predicate, spec_sha) or _failing(st.predicate_type, st.predicate)
        if gone := sorted(cs.signers & revoked.keys()):
            notes += [f"key {fp[:16]}… {revoked[fp]}" for fp in gone]
        if why:
            notes.append(why)
            continue
        who = cs.signers & req.signers & eligible
        if cs.signers - who:
            notes.append(f"signer(s) {sorted(x[:16] for x in cs.signers - who)} not eligible")
        t = st.time
        if t is not None and t - now > MAX_CLOCK_SKEW:
            notes.append(f"signed {t.isoformat()}, in the future (more than {MAX_CLOCK_SKEW} "
                         "ahead of this clock); not counted")
            continue
        if req.max_age is not None and (t is None or now - t > req.max_age):
            stale |= who
            notes.append("no signed time" if t is None else f"signed {t.isoformat()}")
        else:
            fresh |= who
    if len(fresh) >= req.threshold:
        return None
    subject = f"{req.kind} for {art.role} ({art.repo})"
    got = f"{len(fresh)} of {req.threshold}"
    detail = ("; " + "; ".join(dict.fromkeys(notes))) if notes else ""
    if len(fresh | stale) >= req.threshold:
        return Problem("expired", subject, f"statements older than {req.max_age}{detail}",
                       f"{req.threshold} fresh", got)
    return Problem("unmet-threshold", subject, f"not enough approvals{detail}",
                   f"{req.threshold} distinct eligible signer(s)", got)


def _binding_problems(stmts: list[CheckedStatement], arts: Mapping[str, ArtifactRef],
                      bundle: str) -> list[Problem]:
    """Name a swapped draft precisely: a binding for this target that names another draft."""
    target, draft = arts.get("target"), arts.get("draft")
    if target is None:
        return []
    out: list[Problem] = []
    bound_ok = False
    others: set[str] = set()
    for cs in stmts:
        st = cs.statement
        if st.predicate_type != PAIR_BINDING_V1 or target.root not in st.digests("sha256") \
                or st.predicate.get("bundle") != bundle:
            continue
        d = st.predicate.get("draft")
        root = d.get("rootDigest") if isinstance(d, dict) else None
        if (draft.root if draft else None) == root:
            bound_ok = True
        else:
            others.add(str(root))
    if not bound_ok and others:
        out.append(Problem("binding-mismatch", "pair-binding",
                           "the target is bound to a different draft",
                           ", ".join(sorted(others)), draft.root if draft else "no draft"))
    return out


def evaluate_attestations(
    envs: Sequence[Envelope], policy: TrustPolicy, bundle: str,
    arts: Mapping[str, ArtifactRef], now: datetime, revoked: Mapping[str, str] | None = None,
    scan_sha: str | None = None, spec_sha: str | None = None,
) -> tuple[list[Problem], dict[str, dict[str, list[str]]], frozenset[str]]:
    """Problems, trusted signers per statement kind and role (for the verified result), and
    the tuned schedules eligible keys bound (see :func:`_bound_schedules`)."""
    stmts, problems = _open_all(envs, policy)
    for req in policy.requirements:
        for art in arts.values():
            p = _evaluate(req, art, bundle, policy, stmts, now, revoked or {}, scan_sha,
                          spec_sha)
            if p is not None:
                problems.append(p)
    problems += _binding_problems(stmts, arts, bundle)
    signers: dict[str, dict[str, list[str]]] = {}
    for cs in stmts:
        kind = KIND_BY_PREDICATE.get(cs.statement.predicate_type)
        for art in arts.values():
            if kind and art.root in cs.statement.digests("sha256"):
                signers.setdefault(kind, {}).setdefault(art.role, [])
                signers[kind][art.role] = sorted(set(signers[kind][art.role]) | cs.signers)
    return problems, signers, _bound_schedules(stmts, policy, bundle, arts, revoked or {}, now)


def _bound_schedules(stmts: list[CheckedStatement], policy: TrustPolicy, bundle: str,
                     arts: Mapping[str, ArtifactRef], revoked: Mapping[str, str],
                     now: datetime) -> frozenset[str]:
    """Digests of the tuned schedules that render and bench may put in force.

    A tune statement binds its schedule only if it names every artifact's signed root (this
    very bundle version) and this bundle's schedule file, is not dated in the future, and a
    key signed it whose scope covers the bundle and all its repos and that is not revoked: a
    key trusted for another bundle cannot retune this one. Only the latest such statement per
    engine (log order) counts: a superseded schedule copied back into the mirror is bound by
    nothing.
    """
    repos = tuple(a.repo for a in arts.values())
    eligible = {k.fingerprint for k in policy.keys
                if k.may_sign_all(repos, bundle) and k.fingerprint not in revoked}
    latest: dict[str, str] = {}
    for cs in stmts:
        st = cs.statement
        if st.predicate_type != TUNE_SCHEDULE_V1 or not cs.signers & eligible or not arts:
            continue
        if not all(a.root in st.digests("sha256") for a in arts.values()):
            continue
        sched = st.predicate.get("schedule")
        if not isinstance(sched, dict) or sched.get("uri") != f"specbundle:bundle/{bundle}/" \
                f"{SCHEDULE_FILE}":
            continue  # tuned for another bundle (same artifacts, other name): never this one
        if st.time is not None and st.time - now > MAX_CLOCK_SKEW:
            continue
        digest = schedule_digest(sched)
        if digest is not None:
            latest[str(st.predicate.get("engine"))] = digest
    return frozenset(latest.values())
