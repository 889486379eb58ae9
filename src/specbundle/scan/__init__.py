"""Stage 2, scan: may these artifacts enter the mirror, and does the draft fit the target?

Two facades: :func:`scan_bundle` scans the mirrored snapshot trees of a pulled bundle (and
what pull recorded as skipped), stores the report atomically at
``bundles/<name>/scan/report.json`` and appends a ``scan`` event; :func:`scan_tree` scans a
plain directory (optionally with a draft directory) and stores nothing. Both return a frozen
:class:`ScanReport`. Nothing is ever unpickled, executed, rendered or loaded as tensors.

The package reads by what it judges: :mod:`.names` (file names and types), :mod:`.pickles`
(pickles and zips), :mod:`.formats` (safetensors and GGUF), :mod:`.configs` (configs and
remote code), :mod:`.templates` (chat templates) and :mod:`.compat` (draft against target),
each behind the names its ``__init__`` lists. Beside them, what every check shares: findings,
the check interface, the file inventory, type detection (:mod:`.sniff`), strict JSON, the
runner with its explicit list of checks, and SARIF output.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from specbundle.errors import MirrorError, UsageError
from specbundle.mirror import Mirror
from specbundle.record import ArtifactRecord, BundleRecord
from specbundle.scan.findings import (
    Finding,
    ScannedFile,
    ScanReport,
    SecondOpinion,
    Severity,
    TemplateDigest,
    finding,
)
from specbundle.scan.interface import Check, CheckContext, ScanOptions
from specbundle.scan.inventory import ArtifactTree, walk_tree
from specbundle.scan.runner import CHECKS, all_rules, order_findings, run_checks
from specbundle.scan.sarif import to_sarif
from specbundle.scan.templates import template_changes
from specbundle.spec import ArtifactSpec, BundleSpec, SpecMethod

__all__ = [
    "CHECKS",
    "REPORT_PATH",
    "Check",
    "CheckContext",
    "Finding",
    "ScanOptions",
    "ScanReport",
    "ScannedFile",
    "SecondOpinion",
    "Severity",
    "TemplateDigest",
    "all_rules",
    "load_report",
    "scan_bundle",
    "scan_tree",
    "to_sarif",
]

REPORT_PATH = "scan/report.json"


def _record_tree(mirror: Mirror, art: ArtifactRecord, aspec: ArtifactSpec) -> ArtifactTree:
    """The snapshot tree of one artifact, cross-checked against the record."""
    snap = mirror.artifact_dir(art)
    problems: list[Finding] = []
    if snap.is_dir():
        tree = walk_tree(snap, art.role, allowed_roots=(mirror.root / "objects",))
    else:
        tree = ArtifactTree(art.role, snap, ())
        problems.append(finding("files.record-mismatch", Severity.CRITICAL,
                                "snapshot folder is missing from the mirror", None,
                                snapshot=str(snap)))
    recorded = {f.path: f for f in art.files}
    for f in art.files:
        tf = tree.file(f.path)
        if tf is None:
            if snap.is_dir():
                problems.append(finding("files.record-mismatch", Severity.CRITICAL,
                                        "recorded file is missing from the snapshot", f.path))
        elif tf.path.name != f.sha256 or tf.size != f.size:
            problems.append(finding("files.record-mismatch", Severity.CRITICAL,
                                    "snapshot file is not the recorded object", f.path,
                                    expected=f.sha256, found=tf.path.name))
        if f.lfs_sha256 and f.lfs_sha256 != f.sha256:
            problems.append(finding("files.record-mismatch", Severity.CRITICAL,
                                    "recorded digest differs from the hub's LFS sha256", f.path,
                                    sha256=f.sha256, lfs_sha256=f.lfs_sha256))
    problems.extend(finding("files.record-mismatch", Severity.HIGH,
                            "file in the snapshot but not in the record", tf.rel)
                    for tf in tree.files if tf.rel not in recorded)
    return replace(
        tree, problems=tree.problems + tuple(p.with_role(art.role) for p in problems),
        skipped=art.skipped, allow_pickle=aspec.allow_pickle,
        allow_remote_code=aspec.allow_remote_code, repo=art.repo, gguf_file=aspec.gguf_file,
    )


def scan_bundle(
    mirror: Mirror, record: BundleRecord, spec: BundleSpec, *,
    options: ScanOptions | None = None,
) -> ScanReport:
    """Scan a pulled bundle's target and draft; store the report and log a ``scan`` event.

    Args:
        mirror: the mirror holding the snapshots.
        record: the bundle record pull wrote.
        spec: the bundle spec (allow_pickle / allow_remote_code / gguf_file / method).
        options: thresholds, budgets and second-opinion settings.

    Returns:
        The frozen report; ``report.sha256`` is the digest of the stored bytes.

    Raises:
        UsageError: the spec does not describe this record.
    """
    opts = options or ScanOptions()
    if spec.name != record.name:
        raise UsageError(f"spec is for bundle {spec.name!r}, record is {record.name!r}")
    trees: list[ArtifactTree] = [_record_tree(mirror, record.target, spec.target)]
    if record.draft is not None:
        if spec.draft is None:
            raise UsageError("the record has a draft but the spec does not")
        trees.append(_record_tree(mirror, record.draft, spec.draft))
    report = run_checks(
        tuple(trees), subject=record.name, method=spec.speculative.method, options=opts,
        artifacts=tuple((a.role, f"{a.repo}@{a.commit}") for a in record.artifacts),
    )
    try:
        previous = load_report(mirror, record.name)
    except MirrorError:
        previous = None  # an unreadable old report is replaced; nothing to compare with
    if previous is not None:
        changed = template_changes(previous.templates, report.templates)
        if changed:
            report = replace(report, findings=order_findings([*report.findings, *changed]))
    with mirror.lock():
        mirror.write_bundle_file(record.name, REPORT_PATH, report.canonical_bytes())
        mirror.append_event("scan", record.name, {
            "report": REPORT_PATH, "report_sha256": report.sha256, "blocked": report.blocked,
            "fail_on": report.fail_on.value, "counts": report.counts(),
            "crashed_checks": list(report.crashed_checks),
        })
    return report


def scan_tree(
    path: Path, *, draft: Path | None = None, method: SpecMethod | None = None,
    allow_pickle: bool = False, allow_remote_code: bool = False,
    options: ScanOptions | None = None, checks: tuple[Check, ...] = CHECKS,
) -> ScanReport:
    """Scan a plain directory (and optionally a draft directory against it); stores nothing.

    ``checks`` are the plug-ins to run (default: every built-in one, :data:`CHECKS`); a
    library caller may add its own or, in tests, one that fails.

    Raises:
        UsageError: a path is not a directory.
    """
    for p in (path, draft):
        if p is not None and not p.is_dir():
            raise UsageError(f"{p} is not a directory")
    role = "target" if draft is not None or method is not None else "tree"
    roots = [(path, role)] + ([(draft, "draft")] if draft is not None else [])
    trees = [replace(walk_tree(p, r), allow_pickle=allow_pickle,
                     allow_remote_code=allow_remote_code) for p, r in roots]
    return run_checks(tuple(trees), subject=str(path.resolve()), method=method,
                      options=options or ScanOptions(), checks=checks)


def load_report(mirror: Mirror, name: str) -> ScanReport | None:
    """The stored scan report of a bundle, or None if it was never scanned."""
    data = mirror.read_bundle_file(name, REPORT_PATH)
    return None if data is None else ScanReport.from_bytes(data)
