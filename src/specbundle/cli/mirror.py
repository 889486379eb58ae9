"""``specbundle mirror ls|show|gc``: look into and tidy the mirror."""

from __future__ import annotations

from pathlib import Path

import click

from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, esc, print_json, print_table
from specbundle.errors import CorruptMirror, MirrorError

__all__ = ["command", "gc", "ls", "show"]


@click.group("mirror")
def command() -> None:
    """Inspect and garbage-collect the mirror."""


@command.command("ls")
@mirror_option
@json_option
def ls(mirror_dir: Path | None, as_json: bool) -> None:
    """List bundles in the mirror."""
    m = open_mirror(mirror_dir)
    records, broken = [], {}
    for n in m.bundle_names():  # one corrupt record must not hide the others
        try:
            records.append(m.load_bundle(n))
        except MirrorError as err:
            broken[n] = err.message
    rows = [
        {
            "name": r.name,
            "method": r.spec.get("speculative", {}).get("method"),
            "target": f"{r.target.repo}@{r.target.commit[:12]}",
            "draft": f"{r.draft.repo}@{r.draft.commit[:12]}" if r.draft else None,
            "bytes": sum(a.total_size for a in r.artifacts),
            "created": r.created,
        }
        for r in records
    ]
    if as_json:
        print_json({"mirror": str(m.root), "bundles": rows, "unreadable": broken})
    else:
        print_table(
            f"bundles in {m.root}", ["name", "method", "target", "draft", "bytes", "created"],
            [[r["name"], r["method"], r["target"], r["draft"], r["bytes"], r["created"]]
             for r in rows],
        )
    if broken:
        raise CorruptMirror(f"{len(broken)} bundle record(s) unreadable: "
                          + "; ".join(broken.values()))


@command.command("show")
@click.argument("bundle")
@mirror_option
@json_option
def show(bundle: str, mirror_dir: Path | None, as_json: bool) -> None:
    """Show one bundle: commits, files, digests, skipped files."""
    m = open_mirror(mirror_dir)
    rec = m.load_bundle(bundle)
    if as_json:
        print_json(rec.to_json())
        return
    # every value below comes from the record, i.e. from a hub listing: shown literally
    console.print(f"[bold]{esc(rec.name)}[/]  created {esc(rec.created)}  "
                  f"(specbundle {esc(rec.tool_version)})")
    for art in rec.artifacts:
        console.print(
            f"\n[bold]{esc(art.role)}[/] {esc(art.repo)}  {esc(art.requested_revision)} -> "
            f"{esc(art.commit)} ({esc(art.commit_kind)})  source={esc(art.source)} "
            f"endpoint={esc(art.endpoint or '-')}"
        )
        console.print(f"  path: {esc(m.artifact_dir(art))}")
        print_table(None, ["file", "size", "sha256", "hub lfs sha256"],
                    [[f.path, f.size, f.sha256, f.lfs_sha256 or "-"] for f in art.files])
        for s in art.skipped:
            console.print(f"  skipped {esc(s.path)}: {esc(s.reason)}")


@command.command("gc")
@mirror_option
@click.option("--dry-run", is_flag=True, help="Only report what would be removed.")
@json_option
def gc(mirror_dir: Path | None, dry_run: bool, as_json: bool) -> None:
    """Remove objects and snapshots that no bundle references."""
    res = open_mirror(mirror_dir).gc(dry_run=dry_run)
    if as_json:
        print_json({"removed_objects": list(res.removed_objects),
                    "removed_snapshots": list(res.removed_snapshots),
                    "freed_bytes": res.freed_bytes, "kept_objects": res.kept_objects,
                    "removed_tmp": list(res.removed_tmp), "live_writers": res.live_writers,
                    "dry_run": res.dry_run})
        return
    verb = "would remove" if dry_run else "removed"
    console.print(f"{verb} {len(res.removed_objects)} objects ({res.freed_bytes} bytes) and "
                  f"{len(res.removed_snapshots)} trees and {len(res.removed_tmp)} temp entries; "
                  f"kept {res.kept_objects} objects"
                  + (f" ({res.live_writers} writer(s) running: their objects kept)"
                     if res.live_writers else ""))
