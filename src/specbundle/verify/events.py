"""Log a verification in the mirror's hash-chained event log, so an auditor sees who checked what.

Kept apart from :func:`~specbundle.verify.verify_bundle`, which stays free of side effects
(admit, import and the demo verify without logging); the ``verify`` command calls this for
every verdict it reaches, pass or fail.
"""

from __future__ import annotations

import getpass
import socket
from typing import TYPE_CHECKING, Any

from specbundle.errors import MirrorError
from specbundle.mirror import Mirror

if TYPE_CHECKING:
    from specbundle.verify import VerificationReport

__all__ = ["VERIFY_EVENT", "record_verification"]

VERIFY_EVENT = "verify"


def _who() -> str:
    """The OS account running the check (``user@host``), as far as the system can tell."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def record_verification(mirror: Mirror, report: VerificationReport) -> dict[str, Any]:
    """Append a ``verify`` event for ``report`` under the mirror lock; returns the entry.

    Raises:
        MirrorError: the mirror is locked by another writer or its event log is not writable.
    """
    data = {"result": "verified" if report.ok else "failed",
            "policy_sha256": report.policy_digest, "problems": len(report.problems),
            "problem_kinds": sorted({p.kind for p in report.problems}),
            "roots": report.roots, "files_checked": report.files_checked,
            "bytes_checked": report.bytes_checked, "verified_at": report.verified_at,
            "by": _who()}
    try:
        with mirror.lock():
            return mirror.append_event(VERIFY_EVENT, report.bundle, data)
    except OSError as err:
        raise MirrorError(f"cannot record the verification in {mirror.events_path}: "
                          f"{err.strerror or err}") from err
