"""Stage 8: audit draft provenance end to end, from the mirror alone, with networking off.

:func:`audit` answers "where did this draft come from and who let it in?" for a bundle name,
a repo id (``org/name[@commit]``), a commit or a file digest: source endpoint and commits,
every file digest (re-hashed), license, scan findings and scanner versions, each signature
and attestation verified against the *current* trust policy (key names, fingerprints,
policy digest), pair bindings, benchmark figures, admission decisions, rendered manifests
and engine images. Each fact carries a :class:`Link` status; a failed, missing or
unverifiable link breaks the chain (exit 3 in the CLI).

The event log is verified as a hash chain with signed checkpoints (:mod:`.chain`,
:mod:`.checkpoint`); signed key revocations in that log (:mod:`.revocation`) fail everything
the revoked key signed, even while the policy lists it; :mod:`.queries` answers the auditor's
cross-bundle questions; :mod:`.bom` exports a CycloneDX 1.6 ML-BOM and :mod:`.html` a
self-contained report.
"""

from specbundle.audit.chain import ChainIssue, ChainReport, verify_chain, verify_log
from specbundle.audit.checkpoint import (
    CHECKPOINTS_FILE,
    LOG_CHECKPOINT_V1,
    Checkpoint,
    LogVerification,
    read_checkpoints,
    verify_events,
    write_checkpoint,
)
from specbundle.audit.model import (
    ArtifactAudit,
    AttestationAudit,
    AuditReport,
    BenchAudit,
    BundleAudit,
    FileAudit,
    ImageAudit,
    Link,
    RenderAudit,
    ScanAudit,
)
from specbundle.audit.revocation import (
    Revocation,
    RevocationCheck,
    read_revocations,
    revoke_key,
)
from specbundle.audit.trail import audit, audit_bundle, resolve_subject

__all__ = [
    "CHECKPOINTS_FILE",
    "LOG_CHECKPOINT_V1",
    "ArtifactAudit",
    "AttestationAudit",
    "AuditReport",
    "BenchAudit",
    "BundleAudit",
    "ChainIssue",
    "ChainReport",
    "Checkpoint",
    "FileAudit",
    "ImageAudit",
    "Link",
    "LogVerification",
    "RenderAudit",
    "Revocation",
    "RevocationCheck",
    "ScanAudit",
    "audit",
    "audit_bundle",
    "read_checkpoints",
    "read_revocations",
    "resolve_subject",
    "revoke_key",
    "verify_chain",
    "verify_events",
    "verify_log",
    "write_checkpoint",
]
