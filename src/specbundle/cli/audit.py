"""``specbundle audit``: provenance of a draft, target or bundle; the event log; queries; exports.

``specbundle audit SUBJECT`` is shorthand for ``specbundle audit show SUBJECT``. Exit 3 when a
chain of custody (or the event log) is broken, also after writing an export.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.text import Text

from specbundle._fsutil import atomic_write_bytes
from specbundle.audit import AuditReport, BundleAudit, audit, verify_events, write_checkpoint
from specbundle.audit.bom import bundle_bom
from specbundle.audit.chain import read_events_lenient
from specbundle.audit.html import render_html
from specbundle.audit.queries import (
    admissions_older_than,
    admitted_by,
    bundles_using_digest,
    no_longer_verifying,
)
from specbundle.audit.revocation import RevocationCheck, revocation_lines
from specbundle.cli._keyopts import KEY_SOURCE, load_keys, passphrase_option
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, esc, print_json, print_table
from specbundle.errors import UsageError, VerificationError
from specbundle.mirror import Mirror
from specbundle.verify import TrustPolicy, floors, load_policy

__all__ = ["bom", "checkpoint", "command", "html", "log", "query", "show"]

F = TypeVar("F", bound=Callable[..., Any])

_STYLE = {"ok": "green", "absent": "dim"}


class _DefaultToShow(click.Group):
    """A group whose unknown first argument is the subject of ``show``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["show", *args]
        return super().parse_args(ctx, args)


def _trust_option(f: F) -> F:
    return click.option(
        "--trust", "trust", type=click.Path(dir_okay=False, path_type=Path), default=None,
        help="Current trust policy (trust.yaml); without it signatures count as unverified.",
    )(f)


def _policy(trust: Path | None) -> TrustPolicy | None:
    return load_policy(trust) if trust else None


def _need_policy(trust: Path | None) -> TrustPolicy:
    if trust is None:
        raise UsageError("this query verifies signatures: pass --trust trust.yaml")
    return load_policy(trust)


def _status(s: str) -> str:
    return f"[{_STYLE.get(s, 'bold red')}]{esc(s)}[/]"


def _status_cell(s: str) -> Text:
    return Text.from_markup(_status(s))


def _fail_if_broken(report: AuditReport) -> None:
    if report.broken:
        bad = [f"{b.name}: {link.name} {link.status}" for b in report.bundles
               for link in b.links if link.breaks_chain]
        if not report.log.ok:
            bad.insert(0, "event log does not verify")
        bad[:0] = [f"key {r.fingerprint[:16]}… {r.detail}" for r in report.revoked_signers]
        raise VerificationError("chain of custody broken: " + "; ".join(bad[:8])
                                + (f" (+{len(bad) - 8} more)" if len(bad) > 8 else ""))


def _show_revocations(check: RevocationCheck) -> None:
    lines = revocation_lines(check)
    for n, line in enumerate(lines):
        tag = "[bold red]revocation[/]" if n < len(check.revocations) else "[yellow]ignored[/]"
        console.print(f"  {tag} ", end="")
        console.print(line, markup=False, highlight=False)


def _show_bundle(b: BundleAudit) -> None:
    # names, paths, licenses and repos come from records and model cards: shown literally
    word, why = b.decision()  # the decision first: one word, one sentence of why
    console.print(f"\n[bold {'green' if word == 'ADMITTED' else 'red'}]{esc(word)}[/] "
                  f"{esc(b.name)}: {esc(why)}")
    console.print(f"[bold]{esc(b.name)}[/] ({esc(b.method)}), created {esc(b.created)} by "
                  f"specbundle {esc(b.tool_version)}: chain "
                  f"{_status('failed' if b.broken else 'ok')}")
    for a in b.artifacts:
        bad = [f for f in a.files if f.status != "ok"]
        console.print(
            f"  [bold]{esc(a.role)}[/] {esc(a.repo)}  requested {esc(a.requested_revision)} -> "
            f"{esc(a.commit)} ({esc(a.commit_kind)})\n    source {esc(a.source)}  endpoint "
            f"{esc(a.endpoint or '-')}  license {esc(a.license or 'unknown')}  purl "
            f"{esc(a.purl)}\n    OMS root {esc(a.oms_root)}  "
            f"files {len(a.files) - len(bad)}/{len(a.files)} verified")
        for f in bad:
            console.print(f"    {_status(f.status)} {esc(f.path)}: recorded {esc(f.sha256)}, "
                          f"object {esc(f.actual_sha256 or '-')}")
    print_table(None, ["evidence", "status", "detail"],
                [[x.name, _status_cell(x.status), x.detail] for x in b.links])
    if b.attestations:
        print_table(None, ["#", "kind", "time", "signed by", "fingerprints"],
                    [[t.line, t.kind, t.time, ", ".join(t.signer_names),
                      " ".join(fp[:16] for fp in t.signers)] for t in b.attestations])
    for pb in b.pair_bindings:
        tgt, drf = pb.get("target") or {}, pb.get("draft") or {}
        tok = (pb.get("tokenizer") or {}).get("draftMatchesTarget")
        console.print(f"  pair binding #{esc(pb['line'])} ({_status(str(pb['status']))}): "
                      f"draft {esc(drf.get('repo'))}@{esc(str(drf.get('commit'))[:12])} -> "
                      f"target {esc(tgt.get('repo'))}@{esc(str(tgt.get('commit'))[:12])}, "
                      f"method {esc(pb.get('method'))}, tokenizer matches: {esc(tok)}")
    if b.scan.present:
        print_table(None, ["scanner", "version", "status"],
                    [[s["tool"], s.get("version") or "-", s["status"]] for s in b.scan.scanners])
    if b.bench_runs:
        print_table(None, ["run", "engine", "concurrency", "ratio", "alpha", "c", "status"],
                    [[r.run_id, r.engine, r.concurrency, r.throughput_ratio, r.alpha, r.c,
                      _status_cell(r.link.status)] for r in b.bench_runs])
    for d in b.admissions:
        console.print(f"  admission #{esc(d['line'])}: {esc(d['result'])} at {esc(d['time'])} "
                      f"by {esc(', '.join(d['signer_names']))} ({_status(str(d['status']))})")
    for r in b.renders:
        if r.references_draft:
            console.print(f"  rendered manifest render/{esc(r.path)} references the draft")
    for i in b.images:
        console.print(f"  {esc(i.engine)} image {esc(i.reference)} {esc(i.image_id)} "
                      f"({_status(i.link.status)})")


@click.group("audit", cls=_DefaultToShow, invoke_without_command=False)
def command() -> None:
    """Audit provenance: `audit SUBJECT`, `audit log --verify`, queries, BOM and HTML exports."""


@command.command("show")
@click.argument("subject")
@mirror_option
@_trust_option
@click.option("--no-rehash", is_flag=True, help="Check object sizes only (faster, weaker).")
@json_option
def show(subject: str, mirror_dir: Path | None, trust: Path | None, no_rehash: bool,
         as_json: bool) -> None:
    """Everything about a bundle, a repo (org/name[@commit]), a commit or a file digest."""
    report = audit(open_mirror(mirror_dir), subject, policy=_policy(trust), rehash=not no_rehash)
    if as_json:
        print_json(report.to_json())
    else:
        log = report.log
        console.print(f"event log: {_status('ok' if log.ok else 'failed')} "
                      f"({log.chain.entries} entries, {len(log.checkpoints)} checkpoints)")
        for i in log.chain.issues:
            console.print(f"  {_status('failed')} {esc(i.message)}")
        for p in log.problems:
            console.print(f"  {_status('failed')} {esc(p)}")
        _show_revocations(log.revocations)
        for b in report.bundles:
            _show_bundle(b)
    _fail_if_broken(report)


@command.command("log")
@mirror_option
@_trust_option
@click.option("--verify", "verify", is_flag=True, help="Check the hash chain and checkpoints.")
@json_option
def log(mirror_dir: Path | None, trust: Path | None, verify: bool, as_json: bool) -> None:
    """Show the event log; with --verify, name every deleted, reordered or edited entry."""
    mirror = open_mirror(mirror_dir)
    policy = _policy(trust)
    res = verify_events(mirror, policy.public_keys if policy else (),
                        floors.log_floor(policy, mirror) if policy else None, policy)
    if verify and policy is not None and res.ok and res.chain.head_seq is not None \
            and res.chain.head_digest is not None:
        floors.raise_floors(policy, mirror, head=(res.chain.head_seq, res.chain.head_digest))
    if not verify:
        events = read_events_lenient(mirror.events_path)
        if as_json:
            print_json({"events": events})
        else:
            print_table(f"events in {mirror.root}", ["seq", "time", "type", "bundle"],
                        [[e.get("seq"), e.get("time"), e.get("type"), e.get("bundle")]
                         for e in events])
        return
    if as_json:
        print_json(res.to_json())
    else:
        c = res.chain
        console.print(f"event log {mirror.events_path}: {c.entries} entries, head seq "
                      f"{c.head_seq}, {sum(1 for x in res.checkpoints if x.trusted)} trusted "
                      f"checkpoint(s): {_status('ok' if res.ok else 'failed')}")
        rows = ([[i.kind, i.seq, i.line, i.message] for i in c.issues]
                + [["checkpoint", None, None, p] for p in res.problems])
        if rows:
            print_table(None, ["kind", "seq", "line", "what"], rows)
        _show_revocations(res.revocations)
    if not res.ok:
        first = (res.chain.issues[0].message if res.chain.issues else res.problems[0])
        raise VerificationError(f"event log does not verify: {first}")


@command.command("checkpoint")
@mirror_option
@click.option("--key", "keys", multiple=True, required=True,
              type=KEY_SOURCE, help="Signing key (PEM).")
@passphrase_option
@json_option
def checkpoint(mirror_dir: Path | None, keys: tuple[Path | str, ...], passphrase_file: Path | None,
               as_json: bool) -> None:
    """Sign the current head of the event log (refused if the chain is already broken)."""
    cp = write_checkpoint(open_mirror(mirror_dir), load_keys(keys, passphrase_file))
    if as_json:
        print_json(cp.to_json())
    else:
        console.print(f"checkpoint #{cp.line}: seq {cp.seq} digest {cp.digest} signed by "
                      + ", ".join(fp[:16] for fp in sorted(cp.signers)))


@command.command("query")
@click.argument("question", type=click.Choice(
    ["uses-digest", "admitted-by", "older-than", "unverifiable"]))
@click.argument("value", required=False)
@mirror_option
@_trust_option
@json_option
def query(question: str, value: str | None, mirror_dir: Path | None, trust: Path | None,
          as_json: bool) -> None:
    """uses-digest SHA | admitted-by KEY | older-than DAYS | unverifiable (needs --trust)."""
    mirror = open_mirror(mirror_dir)
    if question != "unverifiable" and not value:
        raise UsageError(f"`audit query {question}` needs a value")
    rows: list[dict[str, Any]]
    if question == "uses-digest":
        rows = [u.to_json() for u in bundles_using_digest(mirror, str(value))]
    elif question == "admitted-by":
        rows = [a.to_json() for a in admitted_by(mirror, _need_policy(trust), str(value))]
    elif question == "older-than":
        try:
            days = float(str(value))
        except ValueError:
            raise UsageError(f"older-than takes a number of days, not {value!r}") from None
        rows = [a.to_json() for a in admissions_older_than(mirror, _need_policy(trust), days)]
    else:
        rows = [u.to_json() for u in no_longer_verifying(mirror, _need_policy(trust))]
    if as_json:
        print_json({"question": question, "value": value, "results": rows})
        return
    if not rows:
        console.print("no match")
        return
    cols = list(rows[0])
    print_table(f"{question} {value or ''}".strip(), cols,
                [[json.dumps(r[c]) if isinstance(r[c], list | dict) else r[c] for c in cols]
                 for r in rows])


def _export_reports(mirror: Mirror, bundle: str, trust: Path | None) -> AuditReport:
    if bundle not in mirror.bundle_names():
        mirror.load_bundle(bundle)  # raises BundleNotFound with the list of bundles
    return audit(mirror, bundle, policy=_policy(trust))


@command.command("bom")
@click.argument("bundle")
@mirror_option
@_trust_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the BOM here (default: stdout).")
def bom(bundle: str, mirror_dir: Path | None, trust: Path | None, out: Path | None) -> None:
    """CycloneDX 1.6 ML-BOM of BUNDLE, validated against the official schema."""
    report = _export_reports(open_mirror(mirror_dir), bundle, trust)
    doc = bundle_bom(report.bundles[0], timestamp=report.generated)
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    if out is None:
        click.echo(text, nl=False)
    else:
        atomic_write_bytes(out, text.encode())
        console.print(f"wrote {out} (CycloneDX 1.6, valid)")
    _fail_if_broken(report)


@command.command("html")
@click.argument("bundle")
@mirror_option
@_trust_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The HTML file to write.")
def html(bundle: str, mirror_dir: Path | None, trust: Path | None, out: Path) -> None:
    """A self-contained HTML provenance report of BUNDLE."""
    report = _export_reports(open_mirror(mirror_dir), bundle, trust)
    atomic_write_bytes(out, render_html(report, report.bundles[0]).encode())
    console.print(f"wrote {out}")
    _fail_if_broken(report)
