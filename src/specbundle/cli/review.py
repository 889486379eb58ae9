"""``specbundle review BUNDLE --html OUT``: the approver's and the operator's offline page."""

from __future__ import annotations

from pathlib import Path

import click

from specbundle._fsutil import atomic_write_bytes
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, esc, print_json
from specbundle.cli.oci import registry_options, store_opener
from specbundle.review.page import build_review, render_review_html
from specbundle.verify import load_policy

__all__ = ["command"]


@click.command("review")
@click.argument("bundle")
@click.option("--html", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the page (one self-contained file).")
@click.option("--version", "version", default="current", show_default=True,
              help="The version to review: N, current, working (before sign), a "
                   "transfer set folder (before import), or oci://REGISTRY/REPO:TAG (before "
                   "oci pull; verified under --trust first).")
@click.option("--against", "against", default=None,
              help="Compare with this version (default: the last approved one under --trust, "
                   "else the one before).")
@click.option("--trust", "trust", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Trust policy: evaluate approvals and verify signatures.")
@mirror_option
@registry_options
@json_option
def command(bundle: str, out: Path, version: str, against: str | None, trust: Path | None,
            mirror_dir: Path | None, plain_http: bool, ca_bundle: Path | None,
            auth_file: Path | None, as_json: bool) -> None:
    """Write one offline HTML page: the decision first, then the diff, findings with
    evidence, provenance and the approval table. Changes nothing in the mirror; exit 0
    whatever the page shows."""
    policy = load_policy(trust) if trust is not None else None
    rev = build_review(open_mirror(mirror_dir), bundle, version=version, against=against,
                       policy=policy, open_store=store_opener(plain_http, ca_bundle, auth_file))
    atomic_write_bytes(out, render_review_html(rev).encode())
    if as_json:
        print_json({"html": str(out), "bundle": bundle, "version": rev.side.version,
                    "against": rev.against.label if rev.against else None,
                    "decisions": [{"topic": d.topic, "text": d.text, "tone": d.tone}
                                  for d in rev.decisions]})
        return
    console.print(f"wrote [bold]{esc(out)}[/]")
    for d in rev.decisions:
        console.print(f"  {esc(d.topic)}: {esc(d.text)}")
