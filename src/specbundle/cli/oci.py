"""``specbundle oci push|pull|export|import``: bundles as signed ModelPack artifacts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.markup import escape

from specbundle import __version__
from specbundle._fsutil import atomic_write_bytes
from specbundle.cli._keyopts import hash_progress
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, print_json
from specbundle.errors import UsageError
from specbundle.mirror import Mirror
from specbundle.oci import (
    DEFAULT_CHUNK,
    Backend,
    LayoutBackend,
    OciPullResult,
    PushResult,
    RegistryBackend,
    RegistryOptions,
    find_credentials,
    parse_reference,
    pull_bundle,
    push_bundle,
)
from specbundle.oci.attach import BENCH_REPORT, attach_file
from specbundle.oci.contents import bundle_contents
from specbundle.oci.pack import model_digests, pack_bundle
from specbundle.oci.ref import valid_tag
from specbundle.render import RenderResult
from specbundle.render.interface import RenderMeta
from specbundle.render.paths import ensure_aliases
from specbundle.render.targets import KubernetesOciTarget, OciModelSource
from specbundle.review.sides import StoreOpener
from specbundle.strict import MalformedDocument, read_bounded
from specbundle.transfer import parse_size
from specbundle.verify import load_policy

__all__ = ["attach", "command", "export", "import_", "open_registry", "pull", "push",
           "registry_options", "render_from_registry", "store_opener"]

F = TypeVar("F", bound=Callable[..., Any])
_MAX_ATTACHED = 256 * 1024 * 1024  # held in memory for one upload


def registry_options(f: F) -> F:
    """--plain-http, --ca-bundle, --auth-file: how a registry is reached (oci, diff)."""
    for opt in reversed([
        click.option("--plain-http", is_flag=True,
                     help="Talk HTTP, not HTTPS (loopback/test registries only)."),
        click.option("--ca-bundle", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                     default=None, help="PEM file of CAs to trust for the registry's TLS."),
        click.option("--auth-file", type=click.Path(dir_okay=False, exists=True,
                                                    path_type=Path), default=None,
                     help="Docker config.json with credentials (default: the usual places)."),
    ]):
        f = opt(f)
    return f


def open_registry(text: str, plain_http: bool, ca_bundle: Path | None, auth_file: Path | None,
                  mirror_tmp: Path | None = None, chunk: int = DEFAULT_CHUNK,
                  mount_from: tuple[str, ...] = ()) -> tuple[RegistryBackend, str | None, str]:
    """The store ``text`` (REGISTRY/REPO[:TAG][@DIGEST]) names, its tag and the reference."""
    ref = parse_reference(text)
    opts = RegistryOptions(ca_bundle=ca_bundle, plain_http=plain_http,
                           credentials=find_credentials(ref.registry, auth_file),
                           chunk_size=chunk, state_dir=mirror_tmp, mount_from=mount_from)
    return RegistryBackend(ref, opts), ref.tag, ref.reference


def store_opener(plain_http: bool, ca_bundle: Path | None, auth_file: Path | None
                 ) -> StoreOpener:
    """How ``diff`` and ``review`` reach an ``oci://`` operand (closed when they are done)."""
    @contextmanager
    def open_store(text: str) -> Iterator[tuple[Backend, str]]:
        store, _, reference = open_registry(text, plain_http, ca_bundle, auth_file)
        try:
            yield store, reference
        finally:
            store.close()
    return open_store


def _print_push(res: PushResult, as_json: bool) -> None:
    if as_json:
        print_json(res.to_json())
        return
    console.print(f"pushed [bold]{escape(res.bundle)}[/] to {escape(res.target)}"
                  + (f":{escape(res.tag)}" if res.tag else ""))
    console.print(f"  index {res.index_digest}")
    console.print(f"  blobs: {res.blobs_uploaded} uploaded ({res.bytes_uploaded} B"
                  + (f", resumed at {res.bytes_resumed} B" if res.bytes_resumed else "")
                  + f"), {res.blobs_skipped} already there, {res.blobs_mounted} mounted; "
                  f"{res.referrers} signature referrers")


def _print_pull(res: OciPullResult, mirror_root: Path, as_json: bool) -> None:
    if as_json:
        print_json(res.to_json())
        return
    what = "already in" if res.staged.status == "unchanged" else "verified and pulled into"
    console.print(f"[bold]{escape(res.bundle)}[/] {what} {escape(str(mirror_root))} "
                  f"from {escape(res.source)}")
    console.print(f"  index {res.index_digest}; {res.staged.objects_fetched} objects, "
                  f"{res.staged.bytes_fetched} B fetched")
    if res.moved_from:
        console.print(f"  [yellow]tag moved[/]: it named {res.moved_from} at the last pull")
    for why in res.staged.ignored:
        console.print(f"  [yellow]ignored[/] {escape(why)}")


@click.group("oci")
def command() -> None:
    """Bundles as signed CNCF ModelPack artifacts in OCI registries and image layouts."""


@command.command("push")
@click.argument("bundle")
@click.argument("target")
@mirror_option
@registry_options
@click.option("--chunk-size", default="64M", show_default=True, help="Upload chunk size.")
@click.option("--jobs", type=click.IntRange(1, 32), default=4, show_default=True,
              help="Parallel blob uploads.")
@click.option("--mount-from", multiple=True,
              help="Repository in the same registry to mount shared blobs from (repeat).")
@json_option
def push(bundle: str, target: str, mirror_dir: Path | None, plain_http: bool,
         ca_bundle: Path | None, auth_file: Path | None, chunk_size: str, jobs: int,
         mount_from: tuple[str, ...], as_json: bool) -> None:
    """Push signed BUNDLE to TARGET (REGISTRY/REPO:TAG); present blobs are not re-sent."""
    try:
        chunk = parse_size(chunk_size)
    except ValueError as err:
        raise UsageError(str(err)) from err
    if parse_reference(target).digest:
        raise UsageError(f"push takes REGISTRY/REPO[:TAG], not a digest ({target!r}): the "
                         "index digest is computed from the bundle, and printed")
    for repo in mount_from:
        parse_reference(f"{parse_reference(target).registry}/{repo}")
    mirror = open_mirror(mirror_dir)
    store, tag, _ = open_registry(target, plain_http, ca_bundle, auth_file,
                                  mirror.tmp_dir / "oci-uploads", chunk, mount_from)
    total = sum(a.total_size for a in mirror.load_bundle(bundle).artifacts)
    try:
        with hash_progress(not as_json, total, "pushing") as progress:
            res = push_bundle(mirror, bundle, store, tag, workers=jobs, progress=progress)
    finally:
        store.close()
    _print_push(res, as_json)


@command.command("pull")
@click.argument("source")
@mirror_option
@click.option("--trust", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Trust policy (trust.yaml).")
@registry_options
@click.option("--render-aliases", is_flag=True,
              help="Also link bundles/<name>/render/models/{target,draft} (the paths rendered "
              "manifests read), as the Kubernetes init-container does.")
@json_option
def pull(source: str, mirror_dir: Path | None, trust: Path, plain_http: bool,
         ca_bundle: Path | None, auth_file: Path | None, render_aliases: bool,
         as_json: bool) -> None:
    """Pull SOURCE (REGISTRY/REPO:TAG or REPO@sha256:...), verify it, then add it."""
    policy = load_policy(trust)
    mirror = open_mirror(mirror_dir, create=True)
    store, _, reference = open_registry(source, plain_http, ca_bundle, auth_file)
    try:
        with hash_progress(not as_json, None, "pulling") as progress:
            res = pull_bundle(store, reference, mirror, policy, progress=progress)
    finally:
        store.close()
    if render_aliases:
        ensure_aliases(mirror, res.staged.verified.record)
    _print_pull(res, mirror.root, as_json)


@command.command("export")
@click.argument("bundle")
@click.option("--to", "out_dir", required=True,
              type=click.Path(file_okay=False, path_type=Path), help="OCI image layout folder.")
@click.option("--tag", default=None, help="Tag in the layout (default: the bundle name).")
@mirror_option
@json_option
def export(bundle: str, out_dir: Path, tag: str | None, mirror_dir: Path | None,
           as_json: bool) -> None:
    """Write BUNDLE as an OCI image layout (for skopeo/oras copy across the gap)."""
    tag = tag or bundle
    if not valid_tag(tag):
        raise UsageError(f"{tag!r} is not a valid tag", hint="--tag [A-Za-z0-9_][A-Za-z0-9._-]*")
    mirror = open_mirror(mirror_dir)
    total = sum(a.total_size for a in mirror.load_bundle(bundle).artifacts)
    with hash_progress(not as_json, total, "exporting") as progress:
        res = push_bundle(mirror, bundle, LayoutBackend(out_dir), tag, workers=2,
                          progress=progress)
    _print_push(res, as_json)


@command.command("import")
@click.argument("src", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--tag", default=None, help="Tag (or sha256: digest) to import "
              "(default: the layout's only tag).")
@mirror_option
@click.option("--trust", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Trust policy (trust.yaml).")
@json_option
def import_(src: Path, tag: str | None, mirror_dir: Path | None, trust: Path,
            as_json: bool) -> None:
    """Verify the bundle in the OCI image layout SRC completely, then add it (offline)."""
    policy = load_policy(trust)
    store = LayoutBackend(src)
    reference = tag or store.only_tag()
    mirror = open_mirror(mirror_dir, create=True)
    with hash_progress(not as_json, None, "importing") as progress:
        res = pull_bundle(store, reference, mirror, policy, progress=progress)
    _print_pull(res, mirror.root, as_json)


@command.command("attach")
@click.argument("subject")
@click.argument("file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("--artifact-type", default=BENCH_REPORT, show_default=True,
              help="Media type of the attached file.")
@registry_options
@json_option
def attach(subject: str, file: Path, artifact_type: str, plain_http: bool,
           ca_bundle: Path | None, auth_file: Path | None, as_json: bool) -> None:
    """Attach FILE to SUBJECT (REGISTRY/REPO@sha256:... of a bundle index) as a referrer."""
    store, _, reference = open_registry(subject, plain_http, ca_bundle, auth_file)
    try:
        try:
            data = read_bounded(file, max_bytes=_MAX_ATTACHED, what=str(file))  # never a FIFO
        except MalformedDocument as err:
            raise UsageError(str(err)) from None
        digest = attach_file(store, reference, data, artifact_type, file.name)
    finally:
        store.close()
    if as_json:
        print_json({"subject": subject, "referrer": digest, "artifact_type": artifact_type})
        return
    console.print(f"attached {escape(file.name)} to {escape(subject)} as {digest}")


def render_from_registry(mirror: Mirror, res: RenderResult, repo: str, *,
                         tool_image: str | None, init_container: bool,
                         plain_http: bool) -> list[Path]:
    """Re-render ``res`` (a kubernetes render) with models from ``repo`` pinned by digest.

    The digests are computed offline from the mirror (the same bytes push sends), so the
    isolated side renders without talking to the registry.
    """
    ref = parse_reference(f"{repo}:x")
    base = f"{ref.registry}/{ref.repository}"
    contents = bundle_contents(mirror, res.bundle)  # the signed version, as push sends it
    record = contents.record
    models = tuple((role, f"{base}@{d}") for role, d in model_digests(record).items())
    index = pack_bundle(contents).index.descriptor.digest
    meta = RenderMeta(bundle=res.bundle, engine=res.engine,
                      target_ref=f"{record.target.repo}@{record.target.commit}",
                      draft_ref=f"{record.draft.repo}@{record.draft.commit}"
                      if record.draft else None, tool_version=__version__)
    target = KubernetesOciTarget(OciModelSource(models, f"{base}@{index}", tool_image,
                                                init_container, plain_http))
    out = []
    for f in target.render(res.command, res.baseline, meta):
        atomic_write_bytes(res.out_dir / f.path, f.content.encode(), f.mode)
        out.append(res.out_dir / f.path)
    return out
