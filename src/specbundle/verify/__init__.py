"""Stage 5 (isolated side): verify a bundle against an offline trust policy. No network.

:func:`verify_bundle` is the only constructor of :class:`VerifiedBundle`, so code that takes
one (bench, admit) cannot be handed an unchecked bundle. Order of checks: each artifact's
``model.sig`` under a key the policy scopes to that repo or bundle (roots come only from
there), the snapshot re-hashed file by file against the signed manifest, then the attestation
log against the policy's k-of-n, scope and max-age rules. Every failure is collected and
reported together; any failure raises :class:`BundleVerificationFailed` (exit 3).

Import stages objects through :func:`~specbundle.verify.hashed.write_hashed` and hands the
records over (``hashed=``), so those bytes are hashed once, by this package, as they are
written; every other file is re-read here. :func:`record_verification` is the separate,
explicit step that logs a verification in the mirror's event log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from specbundle.attest import (
    MalformedEnvelope,
    OmsManifest,
    OtherKey,
    WrongPredicateType,
    open_model_sig,
    read_attestations,
)
from specbundle.errors import VerificationError
from specbundle.mirror import Mirror, utc_now
from specbundle.record import ArtifactRecord, BundleRecord
from specbundle.sign import model_sig_rel
from specbundle.verify.attestations import ArtifactRef, evaluate_attestations
from specbundle.verify.diff import Problem, ProblemKind
from specbundle.verify.events import record_verification
from specbundle.verify.hashed import HashedFile, hash_existing, write_hashed
from specbundle.verify.model import ModelVerification, ModelVerificationFailed, verify_model
from specbundle.verify.policy import TrustedKey, TrustPolicy, load_policy, parse_policy
from specbundle.verify.snapshot import SnapshotDigests, check_snapshot

__all__ = [
    "BundleVerificationFailed",
    "HashedFile",
    "ModelVerification",
    "ModelVerificationFailed",
    "Problem",
    "TrustPolicy",
    "TrustedKey",
    "VerificationReport",
    "VerifiedBundle",
    "hash_existing",
    "load_policy",
    "parse_policy",
    "record_verification",
    "verify_bundle",
    "verify_model",
    "write_hashed",
]

_TOKEN = object()


@dataclass(frozen=True)
class VerificationReport:
    """Everything verification looked at and found, pass or fail."""

    bundle: str
    policy_digest: str
    verified_at: str
    roots: dict[str, str]
    model_signers: dict[str, str]
    statement_signers: dict[str, dict[str, list[str]]]
    files_checked: int
    bytes_checked: int
    problems: tuple[Problem, ...]
    bytes_hashed_on_write: int = 0

    @property
    def ok(self) -> bool:
        """No problems."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """JSON form (the CLI's --json output)."""
        return {"bundle": self.bundle, "ok": self.ok, "policy_sha256": self.policy_digest,
                "verified_at": self.verified_at, "roots": self.roots,
                "model_signers": self.model_signers, "statement_signers": self.statement_signers,
                "files_checked": self.files_checked, "bytes_checked": self.bytes_checked,
                "bytes_hashed_on_write": self.bytes_hashed_on_write,
                "problems": [p.to_json() for p in self.problems]}


@dataclass(frozen=True)
class VerifiedBundle:
    """A bundle that passed :func:`verify_bundle`; cannot be built anywhere else."""

    record: BundleRecord
    report: VerificationReport
    _token: object = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _TOKEN:
            raise TypeError("VerifiedBundle is only created by specbundle.verify.verify_bundle")

    @property
    def name(self) -> str:
        """The bundle name."""
        return self.record.name

    @property
    def roots(self) -> dict[str, str]:
        """Signed OMS root digest per role."""
        return self.report.roots


class BundleVerificationFailed(VerificationError):
    """Verification found problems; ``report`` lists every one."""

    def __init__(self, report: VerificationReport) -> None:
        super().__init__(f"bundle {report.bundle!r} failed verification "
                         f"({len(report.problems)} problem(s)):\n  "
                         + "\n  ".join(str(p) for p in report.problems))
        self.report = report


def _open_sig(mirror: Mirror, rec: BundleRecord, art: ArtifactRecord, policy: TrustPolicy
              ) -> tuple[OmsManifest | None, str | None, list[Problem]]:
    who = f"{art.role} model.sig"
    data = mirror.read_bundle_file(rec.name, model_sig_rel(art.role))
    if data is None:
        return None, None, [Problem("missing-signature", who, "no model.sig for this artifact")]
    errors: list[VerificationError] = []
    for k in policy.keys:
        if k.fingerprint not in policy.model_signers or not k.may_sign(art.repo, rec.name):
            continue
        try:
            return open_model_sig(data, k.public), k.fingerprint, []
        except VerificationError as err:
            errors.append(err)
    real = [e for e in errors if not isinstance(e, OtherKey)]
    if not real:
        why = ("signed by a key that is not in the policy (or not allowed for this repo)"
               if errors else f"no policy key may sign {art.repo} / bundle {rec.name}")
        return None, None, [Problem("unknown-signature", who, why)]
    kind: ProblemKind = "bad-signature"
    if any(isinstance(e, WrongPredicateType) for e in real):
        kind = "wrong-predicate-type"
    elif any(isinstance(e, MalformedEnvelope) for e in real):
        kind = "malformed"
    return None, None, [Problem(kind, who, "; ".join(dict.fromkeys(e.message for e in real)))]


def verify_bundle(
    mirror: Mirror, name: str, policy: TrustPolicy, *, workers: int | None = None,
    progress: Callable[[int], None] | None = None, now: datetime | None = None,
    hashed: Iterable[HashedFile] = (),
) -> VerifiedBundle:
    """Verify bundle ``name`` in ``mirror`` against ``policy``; never touches the network.

    ``hashed``: records of objects the caller wrote with :func:`write_hashed`; a snapshot file
    that is still exactly such a file is checked against that digest instead of being re-read.

    Raises:
        BundleVerificationFailed: any problem (the exception carries the full report).
        BundleNotFound: no such bundle in the mirror.
    """
    rec = mirror.load_bundle(name)
    problems: list[Problem] = []
    roots: dict[str, str] = {}
    model_signers: dict[str, str] = {}
    files = nbytes = on_write = 0
    digests = SnapshotDigests({h.file_id: h for h in hashed})
    for art in rec.artifacts:
        manifest, signer, sig_problems = _open_sig(mirror, rec, art, policy)
        problems += sig_problems
        if manifest is None or signer is None:
            continue
        roots[art.role], model_signers[art.role] = manifest.root_digest, signer
        snap_problems, n, n_proven = check_snapshot(mirror, art, manifest, workers=workers,
                                                    progress=progress, digests=digests)
        problems += snap_problems
        files, nbytes = files + len(manifest.resources), nbytes + n
        on_write += n_proven
    parse_problems: list[str] = []
    envs = read_attestations(mirror, name, problems=parse_problems)
    problems += [Problem("malformed", "attestations.jsonl", m) for m in parse_problems]
    refs: dict[str, ArtifactRef] = {a.role: ArtifactRef(a.role, a.repo, a.commit, roots[a.role])
            for a in rec.artifacts if a.role in roots}
    att_problems, signers = evaluate_attestations(envs, policy, name, refs,
                                                  now or datetime.now(UTC))
    problems += att_problems
    report = VerificationReport(name, policy.digest, utc_now(), roots, model_signers, signers,
                                files, nbytes, tuple(problems), on_write)
    if problems:
        raise BundleVerificationFailed(report)
    return VerifiedBundle(rec, report, _TOKEN)
