"""``specbundle images pull|save|load|ls``: carry the engine container images with a bundle."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, print_json, print_table
from specbundle.cli.verify import open_bundle
from specbundle.errors import VerificationError
from specbundle.images import (
    ImageRecord,
    load_images,
    read_image_records,
    remove_stale_containers,
    save_images,
)

__all__ = ["command", "load", "ls", "prune", "pull", "save"]

_ENGINE = click.option("--engine", "engines", multiple=True,
                       type=click.Choice(["vllm", "sglang", "llamacpp"]),
                       help="Only these engines (default: every engine the spec names).")


def _print(records: tuple[ImageRecord, ...] | list[ImageRecord], as_json: bool) -> None:
    if as_json:
        print_json({"images": [r.to_json() for r in records]})
        return
    print_table(None, ["engine", "reference", "image id", "registry digest", "archive sha256",
                       "bytes"],
                [[r.engine, r.reference, r.image_id, r.repo_digest or "-", r.archive_sha256,
                  r.archive_size] for r in records])


def _save(bundle: str, mirror_dir: Path | None, engines: tuple[str, ...], pull: bool,
          as_json: bool) -> None:
    mirror = open_mirror(mirror_dir)
    status = (console.status(f"saving engine images of {bundle}", spinner="dots")
              if not as_json else contextlib.nullcontext())
    with status:
        records = save_images(mirror, bundle, engines=engines or None, pull=pull)
    _print(records, as_json)


@click.group("images")
def command() -> None:
    """Save engine images into the mirror (connected) and load them (isolated)."""


@command.command("pull")
@click.argument("bundle")
@mirror_option
@_ENGINE
@json_option
def pull(bundle: str, mirror_dir: Path | None, engines: tuple[str, ...], as_json: bool) -> None:
    """docker pull each engine image by tag, then save it (connected side)."""
    _save(bundle, mirror_dir, engines, True, as_json)


@command.command("save")
@click.argument("bundle")
@mirror_option
@_ENGINE
@json_option
def save(bundle: str, mirror_dir: Path | None, engines: tuple[str, ...], as_json: bool) -> None:
    """Save engine images already in the local Docker engine into the mirror."""
    _save(bundle, mirror_dir, engines, False, as_json)


@command.command("load")
@click.argument("bundle")
@mirror_option
@_ENGINE
@click.option("--trust", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Verify the bundle against this policy; only the image records its signed "
                   "version names (and the archives they name) are loaded.")
@click.option("--allow-unsigned", "--unsigned", "allow_unsigned", is_flag=True,
              help="Without --trust, accept the mirror's own bundle record (integrity, not "
                   "authorship): only for images you saved yourself on this side.")
@json_option
def load(bundle: str, mirror_dir: Path | None, engines: tuple[str, ...], trust: Path | None,
         allow_unsigned: bool, as_json: bool) -> None:
    """Check each archive against the signed record, then docker load it (isolated side)."""
    mirror = open_mirror(mirror_dir)
    if trust is None and not allow_unsigned:
        raise VerificationError(
            f"refusing to load the images of {bundle!r} without a trust policy: the "
            "mirror's own record proves integrity, not authorship",
            hint="pass --trust trust.yaml (isolated side), or --allow-unsigned for a "
                 "connected-side round trip of images you saved yourself")
    value = open_bundle(mirror, bundle, trust, allow_unsigned)
    loaded = load_images(value, engines=engines or None)
    if as_json:
        print_json({"loaded": [li.__dict__ for li in loaded], "custody": value.custody()})
        return
    for li in loaded:
        state = "already present" if li.was_present else "loaded"
        console.print(f"{li.engine}: {li.reference} {li.image_id} {state} "
                      f"(archive sha256 {li.archive_sha256[:16]}… verified)")
    if not value.signed:
        console.print("[yellow]note[/]: no --trust given: digests were checked against the "
                      "mirror's own bundle record, which proves integrity, not authorship")


@command.command("ls")
@click.argument("bundle")
@mirror_option
@json_option
def ls(bundle: str, mirror_dir: Path | None, as_json: bool) -> None:
    """List the engine images a bundle carries."""
    mirror = open_mirror(mirror_dir)
    mirror.load_bundle(bundle)  # a name that is not in the mirror is an error, not "no images"
    records = sorted(read_image_records(mirror, bundle).values(), key=lambda r: r.engine)
    if not records and not as_json:
        console.print(f"bundle {bundle} carries no engine images; save them with "
                      "`specbundle images save` (connected side)", markup=False)
        return
    _print(records, as_json)


@command.command("prune-containers")
@json_option
def prune(as_json: bool) -> None:
    """Remove engine containers left behind by a killed benchmark."""
    removed = remove_stale_containers()
    if as_json:
        print_json({"removed": list(removed)})
    else:
        console.print(f"removed {len(removed)} stale container(s)")
