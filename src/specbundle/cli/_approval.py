"""The approval table: each trust-policy requirement, who signed and who still must.

Shown by ``verify`` when it fails (so exit 3 says what is missing) and by ``review``.
"""

from __future__ import annotations

from rich.text import Text

from specbundle.cli._output import console, esc, print_table
from specbundle.errors import SpecbundleError
from specbundle.mirror import Mirror
from specbundle.review import ApprovalStatus, approval_status
from specbundle.verify import TrustPolicy

__all__ = ["approval_or_none", "print_approval"]


def approval_or_none(mirror: Mirror, bundle: str, policy: TrustPolicy) -> ApprovalStatus | None:
    """The status, or None where the mirror cannot even say (verify already reported why)."""
    try:
        return approval_status(mirror, bundle, policy)
    except (SpecbundleError, OSError):
        return None


def print_approval(status: ApprovalStatus) -> None:
    """One row per requirement; unmet ones in red, naming the keys that still must sign."""
    if status.problem is not None:
        console.print(f"approvals: {esc(status.problem)}")
        return
    rows = []
    for r in status.requirements:
        need = Text("ok", style="green") if r.satisfied else Text(
            f"{r.still_needed} more of: {', '.join(r.missing) or 'no eligible key left'}",
            style="bold red")
        rows.append([r.kind, r.subject, r.covers, f"{len(r.signed)}/{r.threshold}",
                     ", ".join(r.signed) or "-", need, "; ".join(r.not_counted) or "-"])
    print_table(f"approvals of {status.bundle} v{status.version} under policy "
                f"{status.policy_sha256[:16]}…",
                ["requirement", "subject", "covers", "signed", "by", "still needed",
                 "not counted"], rows)
