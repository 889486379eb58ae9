"""Scan results as values: severities, findings and the frozen report the later stages sign.

The report is what ``sign`` attests to, so it serialises to canonical JSON (and SARIF 2.1.0
for CI systems) and carries everything needed to judge it later without re-scanning: every
finding, every template digest, every second opinion that did or did not run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from specbundle._fsutil import canonical_json
from specbundle.digest import sha256_bytes
from specbundle.errors import MirrorError
from specbundle.strict import loads_json
from specbundle.text import safe_text

# a report lists every file: a 30 000-file tree is ~5 MB, so the strict parser's 16 MB default
# would refuse a legitimate one of ~100 000 files
_MAX_REPORT_BYTES = 256 * 1024 * 1024

__all__ = [
    "REPORT_SCHEMA",
    "CheckOutcome",
    "Finding",
    "ScanReport",
    "ScannedFile",
    "SecondOpinion",
    "Severity",
    "TemplateDigest",
    "finding",
]

REPORT_SCHEMA = "https://specbundle.dev/scan-report/v1"


class Severity(StrEnum):
    """How bad a finding is; ``--fail-on`` blocks at this level and above."""

    INFO = "info"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """Ordering position (info lowest)."""
        return _RANK[self]

    @property
    def sarif_level(self) -> str:
        """SARIF ``level`` for this severity."""
        if self.rank >= _RANK[Severity.HIGH]:
            return "error"
        return "warning" if self.rank >= _RANK[Severity.LOW] else "note"


_RANK = {s: i for i, s in enumerate(Severity)}

Evidence = tuple[tuple[str, str], ...]


# A report string longer than this is cut (a hostile file's names and values run to megabytes);
# the cut text stays under the limit, so re-reading a report changes nothing.
_MAX_TEXT = 16 * 1024


def _text(value: str) -> str:
    """``value`` escaped (see :mod:`.text`) and bounded to :data:`_MAX_TEXT` characters."""
    out = safe_text(value)
    if len(out) > _MAX_TEXT:
        more = f"...[{len(out) - (_MAX_TEXT - 32)} more characters]"
        out = out[:_MAX_TEXT - 32] + more
    return out


def _escape_fields(obj: object, *names: str) -> None:
    """Escape the named string fields of a frozen dataclass in place (see :mod:`.text`)."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, str):
            object.__setattr__(obj, name, _text(value))


@dataclass(frozen=True)
class Finding:
    """One problem (or one recorded fact) in one file, with the evidence that shows it."""

    check_id: str
    severity: Severity
    message: str
    file: str | None = None
    role: str | None = None
    evidence: Evidence = ()

    def __post_init__(self) -> None:
        # Every string may come from a hostile file: escape it once, here, for every writer.
        _escape_fields(self, "message", "file", "role")
        object.__setattr__(self, "evidence", tuple(
            (_text(str(k)), _text(str(v))) for k, v in self.evidence))

    def with_role(self, role: str) -> Finding:
        """The same finding attributed to an artifact role."""
        return Finding(self.check_id, self.severity, self.message, self.file, role, self.evidence)

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "check_id": self.check_id, "severity": self.severity.value, "message": self.message,
            "file": self.file, "role": self.role, "evidence": dict(self.evidence),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Finding:
        """Inverse of :meth:`to_json`."""
        return cls(
            check_id=str(d["check_id"]), severity=Severity(d["severity"]),
            message=str(d["message"]), file=d.get("file"), role=d.get("role"),
            evidence=tuple((str(k), str(v)) for k, v in sorted(d.get("evidence", {}).items())),
        )


def finding(
    check_id: str, severity: Severity, message: str, file: str | None = None, **evidence: object,
) -> Finding:
    """Build a finding; evidence values are stringified so the report is plain JSON."""
    ev = tuple(sorted((k, v if isinstance(v, str) else repr(v)) for k, v in evidence.items()))
    return Finding(check_id, severity, message, file, None, ev)


@dataclass(frozen=True)
class TemplateDigest:
    """A chat template seen in an artifact: where, under which name, and its sha256."""

    role: str
    file: str
    name: str
    sha256: str

    def __post_init__(self) -> None:
        _escape_fields(self, "file", "name")

    def to_json(self) -> dict[str, str]:
        """JSON form."""
        return {"role": self.role, "file": self.file, "name": self.name, "sha256": self.sha256}


@dataclass(frozen=True)
class SecondOpinion:
    """An external scanner run: ``status`` is clean, flagged, failed or not-run."""

    tool: str
    status: str
    detail: str = ""
    version: str | None = None
    files: int = 0

    def __post_init__(self) -> None:
        _escape_fields(self, "detail", "version")

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"tool": self.tool, "status": self.status, "detail": self.detail,
                "version": self.version, "files": self.files}


@dataclass(frozen=True)
class ScannedFile:
    """A file the scan looked at and the kind its bytes were identified as."""

    role: str
    path: str
    kind: str
    size: int

    def __post_init__(self) -> None:
        _escape_fields(self, "path")

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"role": self.role, "path": self.path, "kind": self.kind, "size": self.size}


@dataclass(frozen=True)
class CheckOutcome:
    """What one check returns: findings plus the facts it recorded."""

    findings: tuple[Finding, ...] = ()
    templates: tuple[TemplateDigest, ...] = ()
    second_opinions: tuple[SecondOpinion, ...] = ()

    @staticmethod
    def of(findings: Iterable[Finding]) -> CheckOutcome:
        """An outcome with findings only."""
        return CheckOutcome(findings=tuple(findings))


@dataclass(frozen=True)
class ScanReport:
    """The whole scan: frozen, JSON-serialisable, and the subject of the scan attestation."""

    subject: str
    fail_on: Severity
    findings: tuple[Finding, ...]
    files: tuple[ScannedFile, ...] = ()
    templates: tuple[TemplateDigest, ...] = ()
    second_opinions: tuple[SecondOpinion, ...] = ()
    crashed_checks: tuple[str, ...] = ()
    rules: tuple[tuple[str, str], ...] = ()
    scanned_at: str = ""
    tool_version: str = ""
    artifacts: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        _escape_fields(self, "subject")
        object.__setattr__(self, "artifacts", tuple(
            (_text(str(k)), _text(str(v))) for k, v in self.artifacts))

    def blocked_at(self, threshold: Severity) -> bool:
        """Whether any finding reaches ``threshold``, or a check crashed."""
        return bool(self.crashed_checks) or any(
            f.severity.rank >= threshold.rank for f in self.findings
        )

    @property
    def blocked(self) -> bool:
        """Blocked at the report's own ``fail_on`` threshold."""
        return self.blocked_at(self.fail_on)

    def blocking(self, threshold: Severity | None = None) -> tuple[Finding, ...]:
        """The findings that block at ``threshold`` (default: the report's own)."""
        t = threshold or self.fail_on
        return tuple(f for f in self.findings if f.severity.rank >= t.rank)

    def counts(self) -> dict[str, int]:
        """Number of findings per severity."""
        return {s.value: sum(1 for f in self.findings if f.severity is s) for s in Severity}

    def to_json(self) -> dict[str, Any]:
        """JSON form, as stored in ``bundles/<name>/scan/report.json``."""
        return {
            "schema": REPORT_SCHEMA, "subject": self.subject, "fail_on": self.fail_on.value,
            "blocked": self.blocked, "counts": self.counts(),
            "scanned_at": self.scanned_at, "tool_version": self.tool_version,
            "artifacts": dict(self.artifacts),
            "findings": [f.to_json() for f in self.findings],
            "files": [f.to_json() for f in self.files],
            "templates": [t.to_json() for t in self.templates],
            "second_opinions": [s.to_json() for s in self.second_opinions],
            "crashed_checks": list(self.crashed_checks),
            "rules": dict(self.rules),
        }

    def canonical_bytes(self) -> bytes:
        """The exact bytes stored and later attested."""
        return canonical_json(self.to_json())

    @property
    def sha256(self) -> str:
        """Digest of :meth:`canonical_bytes` (the scan attestation's subject digest)."""
        return sha256_bytes(self.canonical_bytes())

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ScanReport:
        """Inverse of :meth:`to_json`; refuses an unknown schema."""
        if d.get("schema") != REPORT_SCHEMA:
            raise MirrorError(f"unknown scan report schema {d.get('schema')!r}")
        return cls(
            subject=str(d["subject"]), fail_on=Severity(d["fail_on"]),
            findings=tuple(Finding.from_json(f) for f in d["findings"]),
            files=tuple(ScannedFile(**f) for f in d.get("files", ())),
            templates=tuple(TemplateDigest(**t) for t in d.get("templates", ())),
            second_opinions=tuple(SecondOpinion(**s) for s in d.get("second_opinions", ())),
            crashed_checks=tuple(d.get("crashed_checks", ())),
            rules=tuple(sorted(d.get("rules", {}).items())),
            scanned_at=str(d.get("scanned_at", "")), tool_version=str(d.get("tool_version", "")),
            artifacts=tuple(sorted(d.get("artifacts", {}).items())),
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> ScanReport:
        """Parse stored report bytes."""
        try:
            return cls.from_json(loads_json(data, max_bytes=_MAX_REPORT_BYTES,
                                            what="scan report"))
        except (ValueError, KeyError, TypeError) as err:
            raise MirrorError(f"scan report is unreadable: {err}") from err
