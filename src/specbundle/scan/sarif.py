"""SARIF 2.1.0 rendering of a scan report, so CI systems show the findings inline."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from specbundle.scan.findings import Finding, ScanReport, Severity

__all__ = ["SARIF_SCHEMA", "to_sarif"]

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _uri(f: Finding, subject: str) -> str:
    parts = [p for p in (f.role, f.file) if p]
    return quote("/".join(parts) if parts else subject, safe="/:@")


def to_sarif(report: ScanReport) -> dict[str, Any]:
    """The report as one SARIF 2.1.0 log with one run."""
    rules = dict(report.rules)
    ids = sorted(rules)
    index = {rid: i for i, rid in enumerate(ids)}
    worst: dict[str, Severity] = {}
    for f in report.findings:
        if f.check_id not in worst or f.severity.rank > worst[f.check_id].rank:
            worst[f.check_id] = f.severity
    driver_rules = [
        {
            "id": rid,
            "name": rid.replace(".", "/"),
            "shortDescription": {"text": rules[rid]},
            "defaultConfiguration": {"level": worst.get(rid, Severity.HIGH).sarif_level},
        }
        for rid in ids
    ]
    results = []
    for f in report.findings:
        result: dict[str, Any] = {
            "ruleId": f.check_id,
            "level": f.severity.sarif_level,
            "message": {"text": f.message},
            "locations": [{"physicalLocation": {"artifactLocation": {
                "uri": _uri(f, report.subject)}}}],
            "properties": {"severity": f.severity.value, "role": f.role,
                           "evidence": dict(f.evidence)},
        }
        if f.check_id in index:
            result["ruleIndex"] = index[f.check_id]
        results.append(result)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "specbundle-scan",
                "version": report.tool_version or "0",
                "informationUri": "https://specbundle.dev/scan",
                "rules": driver_rules,
            }},
            "invocations": [{"executionSuccessful": not report.crashed_checks}],
            "results": results,
            "properties": {"subject": report.subject, "blocked": report.blocked,
                           "failOn": report.fail_on.value, "reportSha256": report.sha256},
        }],
    }
