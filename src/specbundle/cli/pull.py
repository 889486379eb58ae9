"""``specbundle pull bundle.yaml``: fetch target and draft into the mirror, pinned to commits."""

from __future__ import annotations

from pathlib import Path

import click

from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, err_console, esc, print_json, print_table
from specbundle.cli._progress import byte_progress
from specbundle.pull import PullResult, pull_bundle
from specbundle.spec import load_spec
from specbundle.verify import load_policy
from specbundle.verify.publishers import PublisherPolicy

__all__ = ["command", "show_result"]


def show_result(res: PullResult, mirror_root: Path) -> None:
    """Human summary of a pull."""
    rec = res.record
    state = "unchanged" if res.unchanged else "committed"
    console.print(f"bundle [bold]{esc(rec.name)}[/] {state} in {esc(mirror_root)}")
    rows = []
    for art, cnt in zip(rec.artifacts, res.artifacts, strict=True):
        rows.append([art.role, art.repo, art.requested_revision, art.commit, len(art.files),
                     art.total_size, len(cnt.downloaded) + len(cnt.resumed), len(cnt.reused),
                     len(art.skipped)])
    print_table(None, ["role", "repo", "revision", "commit", "files", "bytes", "fetched",
                       "reused", "skipped"], rows)
    for art in rec.artifacts:
        if art.publisher:
            console.print(f"{art.role}: publisher signature of {esc(art.publisher.identity)} "
                          f"({art.publisher.method}, {esc(art.publisher.issuer)}) verified")


@click.command("pull")
@click.argument("spec_file", type=click.Path(dir_okay=False, path_type=Path))
@mirror_option
@click.option("--endpoint", default=None,
              help="Hub endpoint (default: $HF_ENDPOINT, else the Hub).")
@click.option("--workers", default=8, show_default=True, type=click.IntRange(1, 64),
              help="Parallel file downloads.")
@click.option("--trust", "trust", default=None,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Trust policy whose publishers: section names repos that must carry their "
                   "publisher's signature (checked before anything enters the mirror).")
@json_option
def command(spec_file: Path, mirror_dir: Path | None, endpoint: str | None, workers: int,
            trust: Path | None, as_json: bool) -> None:
    """Pull the target and draft named in SPEC_FILE into the mirror."""
    spec = load_spec(spec_file)
    publishers = PublisherPolicy(load_policy(trust).publishers) if trust else None
    mirror = open_mirror(mirror_dir, create=True)
    with byte_progress(not as_json) as bar:
        res = pull_bundle(spec, mirror, endpoint=endpoint, workers=workers, progress=bar,
                          spec_dir=spec_file.parent, publishers=publishers)
    for note in res.notes:  # the bundle is committed: a warning, not an error exit
        err_console.print(f"warning: {note}", markup=False, highlight=False)
    if as_json:
        print_json({
            "bundle": res.record.to_json(), "unchanged": res.unchanged,
            "notes": list(res.notes),
            "transfer": [{"role": a.role, "downloaded": list(a.downloaded),
                          "resumed": list(a.resumed), "reused": list(a.reused)}
                         for a in res.artifacts],
        })
        return
    show_result(res, mirror.root)
