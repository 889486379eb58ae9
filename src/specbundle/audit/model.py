"""The audit report's values: every fact shown carries the link status of its check.

A :class:`Link` is one piece of evidence in the chain of custody: ``ok`` (verified now),
``failed`` (present but does not verify), ``missing`` (required but absent), ``absent``
(optional and not produced yet, e.g. no benchmark run) or ``unverified`` (present but no
trust policy to check it against). A bundle's chain is broken when any link failed, a
required link is missing, or a signature could not be verified: fail closed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from specbundle.audit.checkpoint import LogVerification
from specbundle.audit.revocation import Revocation

__all__ = [
    "ArtifactAudit",
    "AttestationAudit",
    "AuditReport",
    "BenchAudit",
    "BundleAudit",
    "FileAudit",
    "ImageAudit",
    "Link",
    "LinkStatus",
    "RenderAudit",
    "ScanAudit",
]

LinkStatus = Literal["ok", "failed", "missing", "absent", "unverified"]
_BREAKS: frozenset[str] = frozenset({"failed", "missing", "unverified"})


@dataclass(frozen=True)
class Link:
    """One checked piece of evidence."""

    name: str
    status: LinkStatus
    detail: str = ""

    @property
    def breaks_chain(self) -> bool:
        """Whether this link breaks the chain of custody."""
        return self.status in _BREAKS


@dataclass(frozen=True)
class FileAudit:
    """One mirrored file, its recorded digest and what the object hashes to now."""

    path: str
    size: int
    sha256: str
    hub_lfs_sha256: str | None
    status: LinkStatus
    actual_sha256: str | None = None


@dataclass(frozen=True)
class ArtifactAudit:
    """Target or draft: origin, pinned commit, files, license, OMS signature."""

    role: str
    repo: str
    source: str
    endpoint: str | None
    requested_revision: str
    commit: str
    commit_kind: str
    purl: str
    license: str | None
    license_source: str | None
    oms_root: str
    files: tuple[FileAudit, ...]
    skipped: tuple[tuple[str, str], ...]
    model_sig: Link
    model_sig_signers: tuple[str, ...] = ()


@dataclass(frozen=True)
class AttestationAudit:
    """One attestation line, verified against the trust policy."""

    line: int
    kind: str
    predicate_type: str
    time: str | None
    signers: tuple[str, ...]
    signer_names: tuple[str, ...]
    unknown_keyids: tuple[str, ...]
    link: Link
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScanAudit:
    """The stored scan report and whether a signed scan attestation names its digest."""

    present: bool
    sha256: str | None
    blocked: bool | None
    counts: dict[str, int]
    findings: tuple[dict[str, Any], ...]
    scanners: tuple[dict[str, Any], ...]
    tool_version: str
    scanned_at: str
    link: Link


@dataclass(frozen=True)
class BenchAudit:
    """One benchmark run's key figures at the deployment's P95 concurrency."""

    run_id: str
    engine: str
    created: str
    sha256: str
    concurrency: int | None
    throughput_ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    alpha: float | None
    c: float | None
    acceptance_length: float | None
    link: Link


@dataclass(frozen=True)
class RenderAudit:
    """One rendered manifest and whether it references the draft (and the pinned image)."""

    path: str
    sha256: str
    references_draft: bool
    references_target: bool
    pinned_image: bool | None


@dataclass(frozen=True)
class ImageAudit:
    """An engine image carried with the bundle."""

    engine: str
    reference: str
    image_id: str
    repo_digest: str | None
    archive_sha256: str
    link: Link


@dataclass(frozen=True)
class BundleAudit:
    """Everything the mirror knows about one bundle, each link checked."""

    name: str
    method: str
    created: str
    tool_version: str
    artifacts: tuple[ArtifactAudit, ...]
    scan: ScanAudit
    attestations: tuple[AttestationAudit, ...]
    pair_bindings: tuple[dict[str, Any], ...]
    bench_runs: tuple[BenchAudit, ...]
    admissions: tuple[dict[str, Any], ...]
    renders: tuple[RenderAudit, ...]
    images: tuple[ImageAudit, ...]
    events: tuple[dict[str, Any], ...]
    links: tuple[Link, ...]

    @property
    def broken(self) -> bool:
        """Any failed, missing or unverifiable link."""
        return any(link.breaks_chain for link in self.links)

    def decision(self) -> tuple[str, str]:
        """The bundle's standing in one word and one sentence of why, ahead of the evidence."""
        bad = [link for link in self.links if link.breaks_chain]
        if bad:
            return "BROKEN", (f"the chain of custody is broken at {bad[0].name}: "
                              f"{bad[0].detail}")
        if not self.admissions:
            return "UNADMITTED", "no admission decision has been signed for this bundle"
        last = self.admissions[-1]
        where = f"the latest signed admission (attestation {last.get('line')}, " \
            f"{last.get('time')})"
        if last.get("result") == "PASSED":
            return "ADMITTED", f"{where} passed every criterion, and every link verifies"
        reasons = last.get("reasons")
        why = reasons[0] if isinstance(reasons, list) and reasons else "no reason recorded"
        word = "INCONCLUSIVE" if last.get("outcome") == "inconclusive" else "REJECTED"
        return word, f"{where} did not admit it: {why}"

    def to_json(self) -> dict[str, Any]:
        """JSON form (dataclasses recursively)."""
        out = asdict(self)
        out["broken"] = self.broken
        return out


@dataclass(frozen=True)
class AuditReport:
    """The answer to one ``specbundle audit`` question."""

    subject: str
    mirror: str
    policy: str | None
    policy_digest: str | None
    generated: str
    bundles: tuple[BundleAudit, ...]
    log: LogVerification

    @property
    def broken(self) -> bool:
        """Exit 3: a bundle's chain or the event log does not verify."""
        return not self.log.ok or any(b.broken for b in self.bundles)

    @property
    def revoked_signers(self) -> tuple[Revocation, ...]:
        """Trusted revocations of keys that signed evidence shown in this report."""
        used = {fp for b in self.bundles for fp in (
            *(s for a in b.artifacts for s in a.model_sig_signers),
            *(s for t in b.attestations for s in t.signers))}
        return tuple(r for fp, r in sorted(self.log.revocations.revoked.items()) if fp in used)

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"subject": self.subject, "mirror": self.mirror, "policy": self.policy,
                "policy_digest": self.policy_digest, "generated": self.generated,
                "broken": self.broken, "log": self.log.to_json(),
                "bundles": [b.to_json() for b in self.bundles]}
