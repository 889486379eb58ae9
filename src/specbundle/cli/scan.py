"""``specbundle scan``: security and compatibility findings for a bundle or a directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from specbundle._fsutil import atomic_write_bytes
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import (
    console,
    err_console,
    esc,
    print_json,
    print_table,
    write_json_text,
)
from specbundle.errors import ScanBlocked, ScanError, UsageError
from specbundle.scan import (
    ScanOptions,
    ScanReport,
    Severity,
    all_rules,
    scan_bundle,
    scan_tree,
    to_sarif,
)
from specbundle.spec import SpecMethod, parse_spec

__all__ = ["command"]


def _render(report: ScanReport, fmt: str, fail_on: Severity) -> str | None:
    """Machine formats as text; None for the table (printed directly)."""
    if fmt == "json":
        return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"
    if fmt == "sarif":
        return json.dumps(to_sarif(report), indent=2, sort_keys=True) + "\n"
    rows = [[f.severity.value, f.check_id, f.role or "-", f.file or "-", f.message]
            for f in report.findings]  # print_table shows cells literally
    print_table(f"scan of {report.subject}", ["severity", "check", "role", "file", "message"],
                rows)
    for t in report.templates:
        console.print(f"template {t.role}/{t.file} [{t.name}] sha256:{t.sha256}", markup=False)
    for s in report.second_opinions:
        console.print(f"second opinion {s.tool}: {s.status}"
                      + (f" ({s.detail})" if s.detail else ""), markup=False)
    n = len(report.blocking(fail_on))
    verdict = "[bold red]BLOCKED[/]" if report.blocked_at(fail_on) else "[bold green]clean[/]"
    console.print(f"{verdict}: {n} finding(s) at or above {fail_on.value}; "
                  f"{len(report.files)} files; report sha256 {esc(report.sha256)}")
    return None


@click.command("scan")
@click.argument("bundle", required=False)
@mirror_option
@click.option("--path", "tree", type=click.Path(file_okay=False, path_type=Path),
              help="Scan a plain directory instead of a mirrored bundle.")
@click.option("--draft-path", type=click.Path(file_okay=False, path_type=Path),
              help="With --path: a draft directory to check against it.")
@click.option("--method", type=click.Choice([m.value for m in SpecMethod]),
              help="With --path: the speculative method to check compatibility for.")
@click.option("--allow-pickle", is_flag=True, help="With --path: pickles allowed by policy.")
@click.option("--allow-remote-code", is_flag=True,
              help="With --path: remote code allowed by policy (still recorded).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "sarif"]), default="table",
              show_default=True, help="Output format.")
@json_option
@click.option("--fail-on", type=click.Choice([s.value for s in Severity]), default="high",
              show_default=True, help="Block (exit 4) at this severity and above.")
@click.option("--no-second-opinions", is_flag=True,
              help="Do not run picklescan / modelaudit-picklescan even when installed.")
@click.option("--second-opinion-timeout", type=float, default=120.0, show_default=True,
              help="Seconds per external scanner run.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the json/sarif output to this file.")
@click.option("--list-rules", is_flag=True, help="List every check id and exit.")
def command(bundle: str | None, mirror_dir: Path | None, tree: Path | None,
            draft_path: Path | None, method: str | None, allow_pickle: bool,
            allow_remote_code: bool, fmt: str, as_json: bool, fail_on: str,
            no_second_opinions: bool, second_opinion_timeout: float,
            output: Path | None, list_rules: bool) -> None:
    """Scan BUNDLE in the mirror (or --path DIR): exit 0 clean, 4 blocked, 1 scanner crash."""
    if list_rules:
        rules = all_rules()
        if as_json or fmt == "json":
            print_json(rules)
        else:
            print_table("scan check ids", ["check", "what it finds"],
                        [[k, v] for k, v in sorted(rules.items())])
        return
    if (bundle is None) == (tree is None):
        raise UsageError("give either BUNDLE or --path DIR")
    if tree is None and (draft_path or method or allow_pickle or allow_remote_code):
        raise UsageError("--draft-path/--method/--allow-* apply to --path; a bundle's spec "
                         "decides them")
    fmt = "json" if as_json and fmt == "table" else fmt
    threshold = Severity(fail_on)
    with err_console.status("scanning") as status:
        opts = ScanOptions(
            fail_on=threshold, second_opinions=not no_second_opinions,
            second_opinion_timeout_s=second_opinion_timeout,
            progress=lambda msg: status.update(f"scanning: {msg}"),
        )
        if tree is not None:
            report = scan_tree(tree, draft=draft_path,
                               method=SpecMethod(method) if method else None,
                               allow_pickle=allow_pickle, allow_remote_code=allow_remote_code,
                               options=opts)
        else:
            m = open_mirror(mirror_dir)
            rec = m.load_bundle(str(bundle))
            spec = parse_spec(rec.spec, file=f"{bundle}/bundle.json")
            report = scan_bundle(m, rec, spec, options=opts)
    text = _render(report, fmt, threshold)
    if text is not None:
        write_json_text(text)
        if output is not None:
            atomic_write_bytes(output, text.encode())
    _exit(report, threshold)


def _exit(report: ScanReport, threshold: Severity) -> None:
    if report.crashed_checks:
        raise ScanError(f"scanner crashed: {', '.join(report.crashed_checks)} (not clean)")
    blocking = report.blocking(threshold)
    if report.blocked_at(threshold):
        ids: dict[str, Any] = {}
        for f in blocking:
            ids[f.check_id] = ids.get(f.check_id, 0) + 1
        summary = ", ".join(f"{k} x{v}" for k, v in ids.items())
        raise ScanBlocked(f"{len(blocking)} finding(s) at or above {threshold.value}: {summary}")
