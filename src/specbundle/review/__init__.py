"""The approver's and the operator's view: what a version changes, and who still must sign.

Reads verified or unsigned bundle versions after verify in the pipeline and changes nothing:
:func:`diff_bundle` compares two versions field by field (:mod:`.diff`), :func:`approval_status`
lists each trust-policy requirement with who signed and who still must (:mod:`.approval`), and
:mod:`.html` puts both on one offline page.
"""

from __future__ import annotations

from contextlib import ExitStack

from specbundle.errors import UsageError
from specbundle.mirror import Mirror, versions
from specbundle.review.approval import ApprovalStatus, Requirement, approval_status
from specbundle.review.diff import DIFF_SCHEMA_ID, Change, DiffReport, diff_schema, diff_sides
from specbundle.review.sides import (
    OCI_PREFIX,
    OciAccess,
    Side,
    SignatureClaim,
    StoreOpener,
    load_side,
)
from specbundle.verify.policy import TrustPolicy

__all__ = ["DIFF_SCHEMA_ID", "ApprovalStatus", "Change", "DiffReport", "Requirement", "Side",
           "SignatureClaim", "approval_status", "default_refs", "diff_bundle", "diff_schema",
           "diff_sides", "load_side"]


def default_refs(mirror: Mirror, bundle: str, old: str | None, new: str | None
                 ) -> tuple[str, str]:
    """Fill in omitted operands: the current version against the one before it; a given
    version against the one before it; anything else against the current version."""
    if new is None:
        new = "current"
    if old is not None:
        return old, new
    if new in ("working",) or "/" in new or "@" in new:
        return "current", new
    cur = versions.current_version(mirror, bundle)
    number = cur if new == "current" else int(new.removeprefix("v")) \
        if new.removeprefix("v").isdigit() else None
    if number is None:
        return "current", new
    if number <= 1:
        raise UsageError(f"bundle {bundle!r} version {number} is its first: nothing before it",
                         hint="name what to compare: `specbundle diff BUNDLE FROM TO` "
                              "(FROM/TO: N, current, working, OTHER@N, or a transfer set folder)")
    return str(number - 1), new


def diff_bundle(mirror: Mirror, bundle: str, old: str | None = None, new: str | None = None,
                *, policy: TrustPolicy | None = None,
                open_store: StoreOpener | None = None) -> DiffReport:
    """Diff two versions of ``bundle`` (or a version against a transfer set, a registry's
    version, or another bundle). ``open_store`` reaches ``oci://`` operands; their verified
    copies are removed before this returns."""
    external = old is not None and new is not None and all(
        r.startswith(OCI_PREFIX) or "/" in r for r in (old, new))
    if not external and versions.current_version(mirror, bundle) is None:
        mirror.load_bundle(bundle)  # BundleNotFound for an unknown name
    a, b = default_refs(mirror, bundle, old, new)
    with ExitStack() as stack:
        oci = OciAccess(open_store, stack) if open_store is not None else None
        return diff_sides(load_side(mirror, bundle, a, policy, oci=oci),
                          load_side(mirror, bundle, b, policy, oci=oci))
