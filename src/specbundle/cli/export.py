"""``specbundle export BUNDLE --to DIR --key KEY``: a signed transfer set for the air gap."""

from __future__ import annotations

from pathlib import Path

import click

from specbundle.cli._keyopts import KEY_SOURCE, hash_progress, load_keys, passphrase_option
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, print_json
from specbundle.errors import UsageError
from specbundle.transfer import export_bundle, parse_size
from specbundle.verify.floors import export_state_path

__all__ = ["command"]


@click.command("export")
@click.argument("bundle")
@click.option("--to", "out_dir", required=True,
              type=click.Path(file_okay=False, path_type=Path), help="Transfer set folder.")
@mirror_option
@click.option("--key", "key_paths", required=True, multiple=True,
              type=KEY_SOURCE,
              help="Key that signs the transfer index (repeat for co-signers).")
@passphrase_option
@click.option("--chunk-size", default=None,
              help="Split into chunks of this size for removable media (e.g. 4G, 700M).")
@click.option("--index-version", type=click.IntRange(1), default=None,
              help="Index version (default: one above this mirror's last export).")
@click.option("--state", "state_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None,
              help="The exporter's floor file, outside the mirror (default: "
                   "$SPECBUNDLE_EXPORT_STATE, else ~/.local/state/specbundle/export-state.json):"
                   " a log or version rolled back below an earlier export is refused.")
@json_option
def command(bundle: str, out_dir: Path, mirror_dir: Path | None, key_paths: tuple[Path | str, ...],
            passphrase_file: Path | None, chunk_size: str | None, index_version: int | None,
            state_path: Path | None, as_json: bool) -> None:
    """Write BUNDLE's objects, signatures, attestations and manifests plus a signed index."""
    try:
        size = parse_size(chunk_size) if chunk_size else None
    except ValueError as err:
        raise UsageError(str(err)) from err
    mirror = open_mirror(mirror_dir)
    keys = load_keys(key_paths, passphrase_file)
    total = sum(a.total_size for a in mirror.load_bundle(bundle).artifacts)
    with hash_progress(not as_json, total, "exporting") as progress:
        res = export_bundle(mirror, bundle, out_dir, keys, chunk_size=size,
                            version=index_version, progress=progress,
                            state=(state_path or export_state_path()).absolute())
    info = {"bundle": res.bundle, "to": str(res.out_dir), "version": res.version,
            "parts": res.parts, "bytes": res.bytes, "chunks": res.chunks,
            "index_sha256": res.index_sha256}
    if as_json:
        print_json(info)
        return
    console.print(f"exported [bold]{res.bundle}[/] index v{res.version} to {res.out_dir}: "
                  f"{res.parts} parts, {res.bytes} bytes"
                  + (f", {res.chunks} chunks" if res.chunks else ""))
    console.print(f"index sha256 {res.index_sha256}")
