"""Open a bundle's current signed manifest under the trust policy: the one root of trust.

The manifest counts only when its envelope verifies under enough policy keys that are not
revoked and whose scope covers the bundle name *and* every artifact repo the manifest names
(never what an index or a record claims). It must name the bundle asked for (a manifest
replayed from another bundle is refused) and the version ``current`` points at, and it must
chain to the previous version's manifest when that one is present.
"""

from __future__ import annotations

from collections.abc import Mapping

from specbundle.attest import Envelope, WrongPredicateType, check_statement
from specbundle.attest.manifest import BundleManifest, parse_manifest
from specbundle.digest import sha256_bytes
from specbundle.errors import VerificationError
from specbundle.mirror import Mirror, versions
from specbundle.strict import MalformedDocument, loads_json
from specbundle.verify.diff import Problem
from specbundle.verify.eligibility import eligible_signers
from specbundle.verify.policy import TrustPolicy

__all__ = ["RESIGN_HINT", "manifest_threshold", "open_manifest"]

RESIGN_HINT = ("this bundle was signed by an older specbundle (sign-v1: no signed bundle "
               "manifest, so its spec and thresholds are unsigned); re-sign it with "
               "`specbundle sign` on the connected side and export it again")


def manifest_threshold(policy: TrustPolicy) -> int:
    """Distinct eligible signers a manifest needs: the policy's highest k (it binds them all)."""
    return max((r.threshold for r in policy.requirements), default=1)


def _envelope(data: bytes) -> Envelope:
    try:
        return Envelope.from_json(loads_json(data, what="bundle manifest"))
    except MalformedDocument as err:
        raise VerificationError(str(err)) from None


def open_manifest(
    mirror: Mirror, name: str, policy: TrustPolicy, revoked: Mapping[str, str],
) -> tuple[BundleManifest | None, frozenset[str], list[Problem]]:
    """(manifest, eligible signers, problems); the manifest is None when it must not be used."""
    who = "manifest"
    try:
        cur = versions.read_current_manifest(mirror, name)
        if cur is None:
            return None, frozenset(), [Problem("unsigned-manifest", who, RESIGN_HINT)]
        version, data = cur
        cs = check_statement(_envelope(data), policy.public_keys)
        if not cs.signers:  # nothing of an unsigned payload is looked at
            return None, frozenset(), [Problem(
                "unknown-signature", who, "; ".join(cs.check.problems)
                or "signed by no key of the trust policy", "a trusted signature", None)]
        man = parse_manifest(cs.statement, cs.check.payload)
    except VerificationError as err:
        kind = "wrong-predicate-type" if isinstance(err, WrongPredicateType) else "malformed"
        return None, frozenset(), [Problem(kind, who, err.message)]  # type: ignore[arg-type]
    problems: list[Problem] = []
    if man.bundle != name:
        problems.append(Problem("wrong-bundle", who, "the manifest is another bundle's",
                                name, man.bundle))
    if man.version != version:
        problems.append(Problem("record-mismatch", who, "current names another version than "
                                "the manifest carries", str(version), str(man.version)))
    prev = versions.read_manifest(mirror, name, version - 1) if version > 1 else None
    if prev is not None and man.previous != sha256_bytes(_envelope(prev).payload):
        problems.append(Problem("chain-mismatch", who, f"version {version} does not chain to "
                                f"version {version - 1}", sha256_bytes(_envelope(prev).payload),
                                man.previous))
    verdict = eligible_signers(policy, cs.signers, bundle=name, repos=man.repos,
                               revoked=revoked)
    eligible = verdict.counted
    for fp in sorted(verdict.excluded):
        if fp in revoked:
            problems.append(Problem("revoked-key", who, f"signed by key {fp[:16]}…, "
                                    f"{revoked[fp]}"))
        else:
            problems.append(Problem("out-of-scope", who, f"key {fp[:16]}… may not sign bundle "
                                    f"{name!r} with repos {', '.join(man.repos)}"))
    need = manifest_threshold(policy)
    if len(eligible) < need:
        why = "; ".join(cs.check.problems) or "not signed by enough eligible policy keys"
        problems.append(Problem("unmet-threshold" if cs.signers else "unknown-signature", who,
                                why, f"{need} eligible signer(s)", str(len(eligible))))
    elif not problems:
        problems += _designated_problems(policy, man, eligible, revoked)
    return (None if problems else man), frozenset(eligible), problems


def _designated_problems(policy: TrustPolicy, man: BundleManifest, signers: frozenset[str],
                         revoked: Mapping[str, str]) -> list[Problem]:
    """Each requirement that names its approvers (``signers:``) must hold for the manifest as
    a whole: the spec (K, thresholds, engine arguments) changes only with their signatures,
    never with other in-scope keys alone."""
    out: list[Problem] = []
    for req in policy.requirements:
        if not req.designated:
            continue
        got = len(eligible_signers(policy, signers, bundle=man.bundle, repos=man.repos,
                                   revoked=revoked, designated=req.signers).counted)
        if got < req.threshold:
            out.append(Problem("unmet-threshold", "manifest", f"the {req.kind} approvers "
                               "named by the policy must sign the manifest (spec included)",
                               f"{req.threshold} of them", str(got)))
    return out
