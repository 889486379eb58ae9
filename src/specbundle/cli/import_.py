"""``specbundle import DIR --trust trust.yaml``: verify a transfer set, then add it (offline)."""

from __future__ import annotations

from pathlib import Path

import click

from specbundle.cli._keyopts import hash_progress
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, print_json
from specbundle.transfer import import_bundle
from specbundle.verify import load_policy

__all__ = ["command"]


@click.command("import")
@click.argument("src", type=click.Path(file_okay=False, exists=True, path_type=Path))
@mirror_option
@click.option("--trust", "trust", required=True,
              type=click.Path(dir_okay=False, path_type=Path), help="Trust policy (trust.yaml).")
@json_option
def command(src: Path, mirror_dir: Path | None, trust: Path, as_json: bool) -> None:
    """Verify the transfer set in SRC completely, then make it visible in the mirror."""
    policy = load_policy(trust)
    mirror = open_mirror(mirror_dir, create=True)
    with hash_progress(not as_json, None, "importing") as progress:
        res = import_bundle(src, mirror, policy, progress=progress)
    info = {"bundle": res.bundle, "version": res.version, "status": res.status,
            "index_sha256": res.index_sha256,
            "verification": res.verification.to_json() if res.verification else None}
    if as_json:
        print_json(info)
        return
    what = "already imported" if res.status == "unchanged" else "verified and imported"
    console.print(f"[bold]{res.bundle}[/] index v{res.version} {what} into {mirror.root}")
