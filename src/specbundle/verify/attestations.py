"""Count signed, fresh, in-scope statements per artifact against the policy's k-of-n rules.

The attestation log is not authenticated as a whole, so nothing in it counts unless its
envelope verifies under a policy key that is scoped to the artifact's repo or the bundle, the
statement names the artifact's signed root digest *and* its commit, it is younger than the
requirement's max age, and (for results) it says the check passed. Anything malformed, badly
signed, or of a predicate type the policy does not know is a failure, not noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from specbundle.attest import (
    KIND_BY_PREDICATE,
    CheckedStatement,
    Envelope,
    WrongPredicateType,
    check_statement,
)
from specbundle.attest.models import PairBindingV1, TuneScheduleV1
from specbundle.errors import VerificationError
from specbundle.schedule import SCHEDULE_FILE
from specbundle.verify.diff import Problem, ProblemKind
from specbundle.verify.eligibility import (
    ArtifactRef,
    StatementVerdict,
    eligible_signers,
    is_stale,
    statement_exclusion,
    statement_verdicts,
)
from specbundle.verify.policy import MAX_CLOCK_SKEW, Requirement, TrustPolicy

__all__ = ["ArtifactRef", "evaluate_attestations"]


def _open_all(envs: Sequence[Envelope], policy: TrustPolicy) -> tuple[
        list[tuple[int, CheckedStatement]], list[Problem]]:
    checked: list[tuple[int, CheckedStatement]] = []
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
            checked.append((i, cs))
    return checked, problems


def _evaluate(req: Requirement, art: ArtifactRef, bundle: str, policy: TrustPolicy,
              stmts: list[CheckedStatement], now: datetime, revoked: Mapping[str, str],
              scan_sha: str | None, spec_sha: str | None = None) -> Problem | None:
    fresh: set[str] = set()
    stale: set[str] = set()
    notes: list[str] = []
    for cs in stmts:
        st = cs.statement
        if st.predicate_type != req.predicate_type or art.root not in st.digests("sha256"):
            continue
        ex = statement_exclusion(st, art, bundle=bundle, now=now, scan_sha=scan_sha,
                                 spec_sha=spec_sha)
        if ex is not None and ex.kind == "other-commit":
            notes.append(ex.message)
            continue
        if gone := sorted(cs.signers & revoked.keys()):
            notes += [f"key {fp[:16]}… {revoked[fp]}" for fp in gone]
        if ex is not None and ex.kind != "future":
            notes.append(ex.message)
            continue
        verdict = eligible_signers(policy, cs.signers, bundle=bundle, repos=(art.repo,),
                                   revoked=revoked, designated=req.signers)
        who = verdict.counted
        if verdict.excluded:
            notes.append(f"signer(s) {sorted(x[:16] for x in verdict.excluded)} not eligible")
        if ex is not None:
            notes.append(ex.message)
            continue
        if is_stale(st, req.max_age, now):
            stale |= who
            notes.append("no signed time" if st.time is None
                         else f"signed {st.time.isoformat()}")
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
        if not isinstance(st.typed, PairBindingV1) or target.root not in st.digests("sha256") \
                or st.typed.bundle != bundle:
            continue
        root = st.typed.draft.root_digest if st.typed.draft else None
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
) -> tuple[list[Problem], dict[str, dict[str, list[str]]], frozenset[str],
           tuple[StatementVerdict, ...]]:
    """Problems, trusted signers per statement kind and role (for the verified result), the
    tuned schedules eligible keys bound (see :func:`_bound_schedules`) and the verdict on
    each signed line (what audit renders)."""
    numbered, problems = _open_all(envs, policy)
    stmts = [cs for _, cs in numbered]
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
    verdicts = statement_verdicts(numbered, policy, bundle, arts, now, revoked or {}, scan_sha,
                                  spec_sha)
    return (problems, signers, _bound_schedules(stmts, policy, bundle, arts, revoked or {}, now),
            verdicts)


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
    latest: dict[str, str] = {}
    for cs in stmts:
        st = cs.statement
        tune = st.typed
        if not isinstance(tune, TuneScheduleV1) or not arts or not eligible_signers(
                policy, cs.signers, bundle=bundle, repos=repos, revoked=revoked).counted:
            continue
        if not all(a.root in st.digests("sha256") for a in arts.values()):
            continue
        if tune.schedule.uri != f"specbundle:bundle/{bundle}/{SCHEDULE_FILE}":
            continue  # tuned for another bundle (same artifacts, other name): never this one
        if st.time is not None and st.time - now > MAX_CLOCK_SKEW:
            continue
        if tune.schedule.sha256 is not None:
            latest[tune.engine] = tune.schedule.sha256
    return frozenset(latest.values())
