"""The one exception tree of specbundle.

Every failure the library raises is a :class:`SpecbundleError`. The CLI translates
them to exit codes in one table (``specbundle.cli._errors``), so "the check said no"
(3, 4, 5) stays distinct from "the tool broke" (1) and "the machine lacks something" (6)::

    SpecbundleError                    exit 1 unless a subclass says otherwise
      UsageError                       2  bad arguments the parser could not catch
      SpecError                        2  invalid bundle spec / trust policy / input file
      PullError                        6  the hub or a local source could not deliver
        SourceUnavailable              6  network / auth / missing repo or revision
        DigestMismatch (pull)          3  bytes differ from what the hub declared
      MirrorError                      1  the store could not do what was asked
        CorruptMirror                  3  a record, log or tree in the mirror is malformed
        MirrorBusy                     6  another writer holds the mirror lock too long
        BundleNotFound                 2  a named bundle that is not in the mirror
        NotAMirror                     2  --mirror names a folder that is not a mirror
      ScanError                        1  a check crashed (never reported as clean)
      ScanBlocked                      4  findings at or above the blocking threshold
      VerificationError                3  signature, digest, policy
      RenderError                      2  a manifest cannot be rendered / lint errors
      BenchError                       6  engine or endpoint unavailable, could not measure
      AdmissionRejected                5  the gate said no
      EnvironmentProblem               6  missing tool, bad key file, offline violation
        DiskError                      6  a full or failing disk (names path and space needed)
      BehaviourChanged                 7  diff --fail-on-behaviour-change: runtime or gate moved

Messages never contain credentials: :func:`redact` scrubs the HF token and URL
``user:password@`` parts from any text.
"""

from __future__ import annotations

import os
import re
from typing import ClassVar

__all__ = [
    "AdmissionRejected",
    "BehaviourChanged",
    "BenchError",
    "BundleNotFound",
    "CorruptMirror",
    "DigestMismatch",
    "DiskError",
    "EnvironmentProblem",
    "ExitCode",
    "MirrorBusy",
    "MirrorError",
    "NotAMirror",
    "PullError",
    "RenderError",
    "ScanBlocked",
    "ScanError",
    "SourceUnavailable",
    "SpecError",
    "SpecbundleError",
    "UsageError",
    "VerificationError",
    "redact",
]


class ExitCode:
    """Process exit codes; one table shared by every command."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    VERIFICATION_FAILED = 3
    SCAN_BLOCKED = 4
    ADMISSION_REJECTED = 5
    ENVIRONMENT = 6
    BEHAVIOUR_CHANGED = 7


_TOKEN_RE = re.compile(r"hf_[A-Za-z0-9]{8,}")
_URL_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")


def redact(text: str) -> str:
    """Remove Hugging Face tokens (the configured one and any ``hf_...`` shape) and the
    ``user:password@`` part of URLs (an endpoint given with credentials) from text."""
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token and len(token) >= 4:
        text = text.replace(token, "<redacted>")
    text = _URL_USERINFO_RE.sub(r"\1<redacted>@", text)
    return _TOKEN_RE.sub("hf_<redacted>", text)


class SpecbundleError(Exception):
    """Root of every error specbundle raises on purpose."""

    exit_code: ClassVar[int] = ExitCode.INTERNAL
    kind: ClassVar[str] = "error"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(redact(message))
        self.message = redact(message)
        self.hint = redact(hint) if hint else None

    def diagnostics(self) -> str:
        """Human text: what failed and, where known, what to do about it."""
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(SpecbundleError):
    """Arguments that parse but make no sense together."""

    exit_code = ExitCode.USAGE
    kind = "usage"


class SpecError(SpecbundleError):
    """An input file (bundle spec, trust policy, prompts) is invalid; names file and field."""

    exit_code = ExitCode.USAGE
    kind = "spec"

    def __init__(
        self, message: str, *, file: str | None = None, field: str | None = None,
        hint: str | None = None,
    ) -> None:
        where = ": ".join(p for p in (file, field) if p)
        super().__init__(f"{where}: {message}" if where else message, hint=hint)
        self.file = file
        self.field = field


class PullError(SpecbundleError):
    """The source could not deliver the requested files."""

    exit_code = ExitCode.ENVIRONMENT
    kind = "pull"


class SourceUnavailable(PullError):
    """Network, auth, a missing repository or revision."""


class DigestMismatch(PullError):
    """Downloaded bytes differ from the digest the hub declared; nothing is mirrored."""

    exit_code = ExitCode.VERIFICATION_FAILED
    kind = "digest"


class MirrorError(SpecbundleError):
    """The mirror is unreadable or inconsistent."""

    kind = "mirror"


class CorruptMirror(MirrorError):
    """Something read from the mirror is malformed: a corrupt or tampered store, not a bug."""

    exit_code = ExitCode.VERIFICATION_FAILED


class MirrorBusy(MirrorError):
    """Another writer held the mirror lock for longer than we wait."""

    exit_code = ExitCode.ENVIRONMENT


class BundleNotFound(MirrorError):
    """A bundle name that the mirror does not hold."""

    exit_code = ExitCode.USAGE


class NotAMirror(MirrorError):
    """The folder given as the mirror is not one (a wrong --mirror, not a corrupt store)."""

    exit_code = ExitCode.USAGE


class ScanError(SpecbundleError):
    """A scanner crashed or could not run: never read as clean."""

    kind = "scan"


class ScanBlocked(SpecbundleError):
    """The scan found problems at or above the blocking severity."""

    exit_code = ExitCode.SCAN_BLOCKED
    kind = "scan-blocked"


class VerificationError(SpecbundleError):
    """A signature, digest or policy check failed."""

    exit_code = ExitCode.VERIFICATION_FAILED
    kind = "verification"


class RenderError(SpecbundleError):
    """A manifest cannot be rendered, or lint found errors."""

    exit_code = ExitCode.USAGE
    kind = "render"


class BenchError(SpecbundleError):
    """The benchmark could not run or could not measure."""

    exit_code = ExitCode.ENVIRONMENT
    kind = "bench"


class AdmissionRejected(SpecbundleError):
    """The admission gate rejected the bundle; the message lists every reason."""

    exit_code = ExitCode.ADMISSION_REJECTED
    kind = "rejected"


class EnvironmentProblem(SpecbundleError):
    """Something the machine lacks: a tool, a readable key, a running engine."""

    exit_code = ExitCode.ENVIRONMENT
    kind = "environment"


class DiskError(EnvironmentProblem, OSError):
    """A write the disk refused (full, read-only, failing); still an ``OSError`` for callers.

    The message names the path and, for a full disk, the bytes needed and free.
    """


class BehaviourChanged(SpecbundleError):
    """A diff found a change to what runs or to the gate, and the caller asked to fail on it."""

    exit_code = ExitCode.BEHAVIOUR_CHANGED
    kind = "behaviour-changed"
