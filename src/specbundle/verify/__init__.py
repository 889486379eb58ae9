"""Stage 5 (isolated side): verify a bundle against an offline trust policy. No network.

:func:`verify_bundle` is the one verifier (import, verify, render/bench ``--trust``, admit and
audit use it) and the only constructor of :class:`VerifiedBundle`, built from the signed
manifest alone, so code that takes one cannot be handed an unchecked or edited bundle. Order:
the current version's manifest under enough unrevoked keys scoped to the bundle name *and*
every repo (:mod:`.manifest_check`); each artifact's ``model.sig`` (its root must be the
manifest's); the snapshot re-hashed file by file; the scan report and image records against
their signed digests; then the attestation log against the policy's k-of-n, scope and
max-age rules, counting only this bundle's statements. Revocations come from the policy, the
mirror's log and the caller (a signed transfer index). Every failure is collected and
reported together; any failure raises :class:`BundleVerificationFailed` (exit 3).

Import stages objects through :func:`~specbundle.verify.hashed.write_hashed` and hands the
records over (``hashed=``), so those bytes are hashed once, by this package, as they are
written; every other file is re-read here. :func:`record_verification` is the separate,
explicit step that logs a verification in the mirror's event log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specbundle import ids
from specbundle.attest import (
    MalformedEnvelope,
    OmsManifest,
    OtherKey,
    WrongPredicateType,
    open_model_sig,
    parse_time,
    read_attestations,
)
from specbundle.attest.manifest import BundleManifest
from specbundle.attest.mirrored import subjects_for
from specbundle.attest.statement import Subject
from specbundle.bundle import Bundle
from specbundle.digest import sha256_bytes
from specbundle.errors import BundleNotFound, SpecbundleError, UsageError, VerificationError
from specbundle.image_record import ENGINE_NAME, image_record_path
from specbundle.mirror import Mirror, utc_now, versions
from specbundle.mirror.versions import SCAN_REPORT, model_sig_rel
from specbundle.record import ArtifactRecord
from specbundle.schedule import TunedSchedule, read_bound_schedule
from specbundle.spec import BundleSpec, parse_spec
from specbundle.verify import floors
from specbundle.verify.anchors import open_anchored
from specbundle.verify.attestations import ArtifactRef, evaluate_attestations
from specbundle.verify.diff import Problem, ProblemKind
from specbundle.verify.eligibility import StatementVerdict, eligible_keys
from specbundle.verify.events import record_verification
from specbundle.verify.hashed import HashedFile, hash_existing, write_hashed
from specbundle.verify.manifest_check import RESIGN_HINT, open_manifest
from specbundle.verify.model import ModelVerification, ModelVerificationFailed, verify_model
from specbundle.verify.policy import TrustedKey, TrustPolicy, load_policy, parse_policy
from specbundle.verify.revocations import log_state
from specbundle.verify.snapshot import SnapshotDigests, check_snapshot

__all__ = [
    "RESIGN_HINT",
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
    #: the verdict on each signed attestation line (empty when verification stopped before
    #: the log): what audit renders instead of deciding again
    statements: tuple[StatementVerdict, ...] = ()

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
class VerifiedBundle(Bundle):
    """A bundle version that passed :func:`verify_bundle`; cannot be built anywhere else.

    Everything here comes from the signed manifest, never from ``bundle.json``, and every
    accessor reads only bytes the manifest (or a statement verification counted) signs, as
    they are read: later stages (render, bench, tune, images, admit) take this value instead
    of re-reading anything by name.
    """

    manifest: BundleManifest
    report: VerificationReport
    policy: TrustPolicy
    _token: object = field(repr=False, compare=False)
    #: digests of the tuned schedules bound by the latest tune statement per engine that
    #: eligible keys signed
    tuned_schedules: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self._token is not _TOKEN:
            raise TypeError("VerifiedBundle is only created by specbundle.verify.verify_bundle")

    @property
    def signed(self) -> bool:
        """Always: the value exists only after a passing verification."""
        return True

    @property
    def roots(self) -> dict[str, str]:
        """Signed OMS root digest per role."""
        return self.report.roots

    @property
    def manifest_digest(self) -> str:
        """sha256 of the signed manifest payload: what admission decisions bind."""
        return self.manifest.digest

    @property
    def version(self) -> int:
        """The bundle version."""
        return self.manifest.version

    def custody(self) -> dict[str, Any]:
        """The verified version and the policy it passed."""
        return {"signed": True, "source": f"signed version {self.version} of {self.name!r}",
                "version": self.version, "manifest_sha256": self.manifest_digest,
                "policy_sha256": self.report.policy_digest}

    def subjects(self) -> list[Subject]:
        """The signed manifest, then each artifact's signed root and commit."""
        out = [Subject(f"specbundle:bundle/{self.name}/manifest",
                       {"sha256": self.manifest_digest})]
        for art in self.record.artifacts:
            out += list(subjects_for(art, self.roots[art.role]))
        return out

    def image_engines(self) -> tuple[str, ...]:
        """Engines whose image record digest the manifest signs."""
        return tuple(sorted(self.manifest.images))

    def image_record_bytes(self, engine: str) -> bytes | None:
        """The copy stored with this signed version, only if it still hashes as signed.

        Raises:
            VerificationError: missing, changed since verification, or a bad engine name.
        """
        want = self.manifest.images.get(engine)
        if want is None:
            return None
        if not ENGINE_NAME.fullmatch(engine):
            raise VerificationError(f"signed manifest names an invalid engine {engine[:40]!r}")
        return versions.read_signed_file(self.mirror, self.name, self.version,
                                         image_record_path(engine), want)

    def image_digests(self) -> frozenset[str]:
        """The signed record digests and the archives those signed records name."""
        archives = {r.archive_sha256 for r in self.image_records().values()}
        return frozenset(self.manifest.images.values()) | archives

    def tuned_schedule(self, engine: str) -> TunedSchedule | None:
        """The schedule file, only if its bytes are the ones verification found bound."""
        return read_bound_schedule(self.mirror, self.name, engine, self.tuned_schedules)

    def _unnamed_prompts(self, rel: str, path: Path) -> bytes:
        raise VerificationError(
            f"prompts file {rel!r} is not covered by the signed record (a bundle pulled before "
            "records named the prompts' digest)", hint="pull and sign the bundle again")


class BundleVerificationFailed(VerificationError):
    """Verification found problems; ``report`` lists every one."""

    def __init__(self, report: VerificationReport) -> None:
        super().__init__(f"bundle {report.bundle!r} failed verification "
                         f"({len(report.problems)} problem(s)):\n  "
                         + "\n  ".join(str(p) for p in report.problems))
        self.report = report


def _open_sig(mirror: Mirror, man: BundleManifest, art: ArtifactRecord, policy: TrustPolicy,
              revoked: Mapping[str, str]) -> tuple[OmsManifest | None, str | None, list[Problem]]:
    who = f"{art.role} model.sig"
    name = man.bundle
    data = versions.read_version_file(mirror, name, man.version, model_sig_rel(art.role))
    if data is None:
        return None, None, [Problem("missing-signature", who, "no model.sig for this artifact")]
    errors: list[VerificationError] = []
    # revoked keys are tried too, so that a revoked signer is named as such below
    may = eligible_keys(policy, bundle=name, repos=(art.repo,), revoked={}, model=True)
    for k in policy.keys:
        if k.fingerprint not in may:
            continue
        try:
            manifest = open_model_sig(data, k.public)
        except VerificationError as err:
            errors.append(err)
            continue
        if k.fingerprint in revoked:
            return None, None, [Problem("revoked-key", who, f"signed by key "
                                        f"{k.fingerprint[:16]}…, {revoked[k.fingerprint]}")]
        return manifest, k.fingerprint, []
    try:  # a certificate-signed model.sig: the chain must lead to an eligible anchor role
        anchored = open_anchored(policy.model_anchors, data, art.repo, name, parse_time(man.time))
    except VerificationError as err:
        anchored, errors = None, [*errors, err]
    if anchored is not None:
        manifest, _, cert = anchored
        fp = cert.public.fingerprint
        if fp in revoked:
            return None, None, [Problem("revoked-key", who, f"signed by {cert.name} with key "
                                        f"{fp[:16]}…, {revoked[fp]}")]
        return manifest, fp, []
    real = [e for e in errors if not isinstance(e, OtherKey)]
    if not real:
        why = ("signed by a key that is not in the policy (or not allowed for this repo)"
               if errors else f"no policy key may sign {art.repo} / bundle {name}")
        return None, None, [Problem("unknown-signature", who, why)]
    kind: ProblemKind = "bad-signature"
    if any(isinstance(e, WrongPredicateType) for e in real):
        kind = "wrong-predicate-type"
    elif any(isinstance(e, MalformedEnvelope) for e in real):
        kind = "malformed"
    return None, None, [Problem(kind, who, "; ".join(dict.fromkeys(e.message for e in real)))]


def _bound_files(mirror: Mirror, man: BundleManifest) -> list[Problem]:
    """Scan report and image records must be the very bytes the manifest names."""
    out: list[Problem] = []
    raw = versions.read_version_file(mirror, man.bundle, man.version, SCAN_REPORT)
    got = sha256_bytes(raw) if raw is not None else None
    if got != man.scan_report_sha256:
        out.append(Problem("changed-file", f"bundle:{SCAN_REPORT}",
                           "scan report differs from the one the manifest signs",
                           man.scan_report_sha256, got))
    have = {e: sha256_bytes(b) for e, b in
            versions.version_images(mirror, man.bundle, man.version).items()}
    out += [Problem("changed-file", f"bundle:images/{e}.json",
                    "image record differs from the signed one", man.images.get(e), have.get(e))
            for e in sorted(set(have) | set(man.images)) if have.get(e) != man.images.get(e)]
    return out


def verify_bundle(
    mirror: Mirror, name: str, policy: TrustPolicy, *, workers: int | None = None,
    progress: Callable[[int], None] | None = None, now: datetime | None = None,
    hashed: Iterable[HashedFile] = (), revoked: Mapping[str, str] | None = None,
    floors_of: Mirror | None = None,
) -> VerifiedBundle:
    """Verify bundle ``name`` in ``mirror`` against ``policy``; never touches the network.

    ``revoked``: extra revoked fingerprints -> reason (a signed transfer index's list); the
    policy's ``revoked:`` and the mirror log's signed revocations always apply.
    ``hashed``: records of objects the caller wrote with :func:`write_hashed`; a snapshot file
    that is still exactly such a file is checked against that digest instead of being re-read.
    ``floors_of``: verify a staged copy against the floors of this (destination) mirror;
    the caller raises them once it has committed (:func:`floors.raise_floors`). Otherwise the
    floors of ``mirror`` apply and are raised here when the bundle verifies.

    Raises:
        BundleVerificationFailed: any problem (the exception carries the full report).
        BundleNotFound: no such bundle in the mirror.
    """
    try:
        ids.check_bundle_name(name)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if not mirror.bundle_dir(name).is_dir():
        known = ", ".join(mirror.bundle_names()) or "none"
        raise BundleNotFound(f"no bundle named {name!r} in mirror {mirror.root}",
                             hint=f"bundles here: {known}")
    log = log_state(mirror, policy, revoked)
    all_revoked = log.revoked
    man, _, problems = open_manifest(mirror, name, policy, all_revoked)
    if man is None:
        raise _failed(name, policy, problems)
    if rolled := floors.bundle_problem(policy, floors_of or mirror, name, man.version,
                                       man.digest):
        raise _failed(name, policy, [*problems, rolled])
    rec = man.record
    problems += _bound_files(mirror, man)
    spec: BundleSpec | None = None
    try:
        spec = parse_spec(rec.spec, file=f"bundle {name} (signed manifest)")
    except SpecbundleError as err:
        problems.append(Problem("malformed", "manifest spec", err.message))
    roots: dict[str, str] = {}
    model_signers: dict[str, str] = {}
    files = nbytes = on_write = 0
    digests = SnapshotDigests({h.file_id: h for h in hashed})
    for art in rec.artifacts:
        manifest, signer, sig_problems = _open_sig(mirror, man, art, policy, all_revoked)
        problems += sig_problems
        if manifest is None or signer is None:
            continue
        if manifest.root_digest != man.roots[art.role]:
            problems.append(Problem("record-mismatch", f"{art.role} model.sig",
                                    "model.sig signs other files than the manifest",
                                    man.roots[art.role], manifest.root_digest))
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
    att_problems, signers, schedules, verdicts = evaluate_attestations(
        envs, policy, name, refs, now or datetime.now(UTC), all_revoked,
        man.scan_report_sha256, man.spec_sha256)
    problems += att_problems
    report = VerificationReport(name, policy.digest, utc_now(), roots, model_signers, signers,
                                files, nbytes, tuple(problems), on_write, verdicts)
    if problems or spec is None:
        raise BundleVerificationFailed(report)
    # the trees check_snapshot hashed, never the snapshots/<commit> view (a link the mirror's
    # writer may have re-pointed, which verify does not read)
    paths: dict[str, Path] = {a.role: mirror.artifact_dir(a) for a in rec.artifacts}
    if floors_of is None:
        floors.raise_floors(policy, mirror, bundle=(name, man.version, man.digest),
                            revoked=revoked)
    return VerifiedBundle(mirror, rec, spec, paths, man, report, policy, _TOKEN, schedules)


def _failed(name: str, policy: TrustPolicy, problems: list[Problem]
            ) -> BundleVerificationFailed:
    return BundleVerificationFailed(VerificationReport(
        name, policy.digest, utc_now(), {}, {}, {}, 0, 0, tuple(problems)))
