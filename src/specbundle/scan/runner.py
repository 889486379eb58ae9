"""Runs the explicit list of checks over artifact trees and assembles the frozen report.

A check that raises is a crashed scanner: its exception becomes a critical finding and the
report lists it in ``crashed_checks``, so the result is never read as clean.
"""

from __future__ import annotations

from specbundle import __version__
from specbundle.mirror import utc_now
from specbundle.scan.compat import CompatCheck
from specbundle.scan.configs import ConfigCheck, RemoteCodeCheck
from specbundle.scan.findings import (
    CheckOutcome,
    Finding,
    ScannedFile,
    ScanReport,
    SecondOpinion,
    Severity,
    TemplateDigest,
    finding,
)
from specbundle.scan.formats import GGUFCheck, SafetensorsCheck
from specbundle.scan.interface import Check, CheckContext, ScanOptions
from specbundle.scan.inventory import ArtifactTree
from specbundle.scan.names import FilesCheck
from specbundle.scan.pickles.check import PickleCheck
from specbundle.scan.pickles.second_opinion import SecondOpinionCheck
from specbundle.scan.templates import TemplateCheck
from specbundle.spec import SpecMethod

__all__ = ["CHECKS", "CORE_RULES", "all_rules", "order_findings", "run_checks"]

CHECKS: tuple[Check, ...] = (
    FilesCheck(),
    ConfigCheck(),
    SafetensorsCheck(),
    GGUFCheck(),
    PickleCheck(),
    RemoteCodeCheck(),
    TemplateCheck(),
    SecondOpinionCheck(),
    CompatCheck(),
)
CORE_RULES = {"scan.check-crashed": "A built-in check crashed (the scan is not clean)"}


def all_rules() -> dict[str, str]:
    """Every check id the scan can report, with its one-line description."""
    rules = dict(CORE_RULES)
    for c in CHECKS:
        rules.update(c.rules)
    return rules


def _order(f: Finding) -> tuple[int, str, str, str]:
    return (-f.severity.rank, f.role or "", f.file or "", f.check_id)


def order_findings(findings: tuple[Finding, ...] | list[Finding]) -> tuple[Finding, ...]:
    """Worst first, then by role, file and check id (the report's stable order)."""
    return tuple(sorted(findings, key=_order))


def run_checks(
    trees: tuple[ArtifactTree, ...], *, subject: str, method: SpecMethod | None,
    options: ScanOptions, artifacts: tuple[tuple[str, str], ...] = (),
    checks: tuple[Check, ...] = CHECKS,
) -> ScanReport:
    """Run ``checks`` (default: all of :data:`CHECKS`) and build the report."""
    ctx = CheckContext(trees=trees, method=method, options=options)
    findings: list[Finding] = []
    templates: list[TemplateDigest] = []
    opinions: list[SecondOpinion] = []
    crashed: list[str] = []
    for check in checks:
        if options.progress:
            options.progress(check.family)
        try:
            out = check.run(ctx)
        except Exception as err:  # noqa: BLE001 - a crashed check must fail closed, not abort
            crashed.append(check.family)
            out = CheckOutcome.of([finding(
                "scan.check-crashed", Severity.CRITICAL,
                f"{check.family} check crashed: {type(err).__name__}: {err}", check=check.family,
            )])
        findings.extend(out.findings)
        templates.extend(out.templates)
        opinions.extend(out.second_opinions)
    files = tuple(ScannedFile(t.role, f.rel, ctx.kind(f.path).value, f.size)
                  for t in trees for f in t.files)
    return ScanReport(
        subject=subject, fail_on=options.fail_on,
        findings=order_findings(findings), files=files,
        templates=tuple(templates), second_opinions=tuple(opinions),
        crashed_checks=tuple(crashed), rules=tuple(sorted(all_rules().items())),
        scanned_at=utc_now(), tool_version=__version__, artifacts=artifacts,
    )
