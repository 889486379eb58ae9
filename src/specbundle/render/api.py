"""The render stage's entry points: build a serve command, lint a bundle, render manifests.

``build_serve_command`` is what the benchmark calls for both arms; ``render_bundle`` lints
(errors block), renders one engine x target and writes the files, plus ``command.json`` (both
arms) and ``lint.json``, into ``bundles/<name>/render/<engine>/<target>/`` by swapping in a
fully written folder. Nothing here touches the network.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from specbundle import __version__
from specbundle._fsutil import (
    disk_error,
    fd_path,
    mkdir_at,
    open_dir,
    refuse_link_at,
    rename_at,
    rmtree_at,
    tmp_name,
    write_at,
)
from specbundle.bundle import Bundle
from specbundle.errors import (
    CorruptMirror,
    EnvironmentProblem,
    MirrorError,
    RenderError,
    UsageError,
)
from specbundle.image_record import parse_image_record
from specbundle.mirror import Mirror
from specbundle.record import BundleRecord
from specbundle.render.interface import (
    EngineContext,
    RenderMeta,
    ServeCommand,
    ServeEngine,
)
from specbundle.render.lint import LintInput, LintReport, Rule, run_rules
from specbundle.render.llamacpp import LlamaCppEngine
from specbundle.render.paths import ensure_aliases, model_aliases, resolve_image
from specbundle.render.rules import ENGINE_RULES
from specbundle.render.rules_cmd import COMMAND_RULES
from specbundle.render.sglang import SGLangEngine
from specbundle.render.targets import TARGETS
from specbundle.render.vllm import VLLMEngine
from specbundle.schedule import apply_tuned
from specbundle.spec import BundleSpec, EngineName, parse_spec
from specbundle.strict import loads_json, read_bounded

__all__ = [
    "ENGINES",
    "RULES",
    "RenderResult",
    "build_serve_command",
    "lint_bundle",
    "lint_spec",
    "render_bundle",
]

ENGINES: dict[EngineName, ServeEngine] = {
    e.name: e for e in (VLLMEngine(), SGLangEngine(), LlamaCppEngine())
}
RULES: dict[str, Rule] = {**ENGINE_RULES, **COMMAND_RULES}


@dataclass(frozen=True)
class RenderResult:
    """What render wrote: the folder, its files, both arms' commands and the lint report."""

    bundle: str
    engine: EngineName
    target: str
    out_dir: Path
    files: tuple[Path, ...]
    command: ServeCommand
    baseline: ServeCommand
    lint: LintReport
    #: which reading of the bundle was rendered (signed version, or unsigned and said so)
    custody: dict[str, Any]
    #: what the caller should know (e.g. that nothing was logged)
    notes: tuple[str, ...] = ()
    #: what was rendered, by file name: what bench runs (never the file re-read later)
    contents: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON form for ``--json``."""
        return {"bundle": self.bundle, "engine": self.engine.value, "target": self.target,
                "out_dir": str(self.out_dir), "files": [str(f) for f in self.files],
                "command": self.command.to_json(), "baseline": self.baseline.to_json(),
                "lint": self.lint.to_json(), "custody": self.custody}


def _engine(engine: EngineName | str) -> tuple[EngineName, ServeEngine]:
    try:
        name = EngineName(engine)
    except ValueError:
        allowed = ", ".join(e.value for e in EngineName)
        raise UsageError(f"unknown engine {engine!r}; allowed: {allowed}") from None
    return name, ENGINES[name]


def _recorded_image(bundle: Bundle, engine: EngineName) -> str | None:
    """The pinned reference the images stage recorded, as the bundle value gives it.

    A verified bundle gives only the copy stored with its signed version, and only if its
    bytes still hash to the digest the manifest signs (a changed copy raises
    :class:`VerificationError`: the verdict no longer holds); the unsigned reading gives the
    bundle-level record. A record that is present but unusable fails closed rather than
    falling back to a tag.
    """
    raw = bundle.image_record_bytes(engine.value)
    if raw is None:
        return None
    try:
        return parse_image_record(raw, engine.value).pinned_ref
    except MirrorError as err:
        raise RenderError(f"bundle {bundle.name!r}: image record for {engine.value} is "
                          f"unusable: {err.message}") from None


def _image_for(bundle: Bundle, engine: EngineName, image: str | None,
               digest: str | None) -> str | None:
    """Explicit reference or digest first, then the images stage's record, else the spec's."""
    settings = getattr(bundle.spec.engines, engine.value)
    if settings is None:
        return None
    if image is None and digest is None:
        return _recorded_image(bundle, engine)
    return resolve_image(settings.image, image=image, digest=digest)


def _context(mirror: Mirror, record: BundleRecord, spec: BundleSpec, *,
             image: str | None = None, create: bool = True) -> EngineContext:
    """Engine inputs; ``create=False`` (lint) computes the alias paths without writing."""
    if create:
        target, draft = ensure_aliases(mirror, record)
    else:
        target, draft = model_aliases(mirror.root, record.name, has_draft=record.draft is not None)
    return EngineContext(record, spec, mirror.root, target, draft, image)


def build_serve_command(
    record: BundleRecord, engine: EngineName | str, *, mirror: Mirror,
    speculation: bool = True, image: str | None = None,
) -> ServeCommand:
    """The command for one engine; ``speculation=False`` is the benchmark's baseline arm.

    Creates (or repoints) the neutral model aliases inside the mirror, so the paths in the
    command exist when this returns.
    """
    _, eng = _engine(engine)
    spec = parse_spec(record.spec, file=f"bundle {record.name} (bundle.json spec)")
    ctx = _context(mirror, record, spec, image=image)
    return eng.build(ctx, speculation=speculation)


def _draft_config(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        value = loads_json(read_bounded(path / "config.json"), what="draft config.json")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _lint(ctx: EngineContext, engines: tuple[EngineName, ...], *,
          container_target: bool | None, allow_unpinned_image: bool,
          draft_config: dict[str, Any] | None,
          images: dict[EngineName, str | None] | None = None) -> LintReport:
    files: dict[str, frozenset[str]] = {
        a.role: frozenset(f.path for f in a.files)
        for a in (ctx.record.artifacts if ctx.record is not None else ())}
    commands: dict[EngineName, ServeCommand] = {}
    for e in engines:
        image = (images or {}).get(e)
        try:
            commands[e] = ENGINES[e].build(replace(ctx, image=image), speculation=True)
        except RenderError:
            continue  # an engine that cannot express the method; a rule reports why
    inp = LintInput(ctx.spec, commands, draft_config, container_target, allow_unpinned_image,
                    files)
    return run_rules(inp, RULES)


def lint_spec(
    spec: BundleSpec, *, mirror_root: Path, draft_config: dict[str, Any] | None = None,
    target: str | None = None, allow_unpinned_image: bool = False,
) -> LintReport:
    """Lint a spec before it is pulled, with the paths render would use under ``mirror_root``."""
    t, d = model_aliases(mirror_root.resolve(), spec.name, has_draft=spec.draft is not None)
    if draft_config is None and spec.draft is not None:
        draft_config = _draft_config(spec.draft.dir_path)
    ctx = EngineContext(None, spec, mirror_root.resolve(), t, d)
    uses = None if target is None else _target(target).uses_image
    return _lint(ctx, spec.engines.enabled(), container_target=uses,
                 allow_unpinned_image=allow_unpinned_image, draft_config=draft_config)


def lint_bundle(
    bundle: Bundle, *, engine: EngineName | str | None = None, target: str | None = None,
    allow_unpinned_image: bool = False, image: str | None = None,
    image_digest: str | None = None,
) -> LintReport:
    """Lint a pulled bundle for one engine (default: every engine its spec enables)."""
    spec = bundle.spec
    engines = (_engine(engine)[0],) if engine is not None else spec.engines.enabled()
    if (image or image_digest) and len(engines) != 1:
        raise UsageError("an image override needs exactly one engine")
    images = {e: _image_for(bundle, e, image, image_digest) for e in engines}
    ctx = _context(bundle.mirror, bundle.record, spec, create=False)
    draft = bundle.mirror.artifact_dir(bundle.record.draft) if bundle.record.draft else None
    uses = None if target is None else _target(target).uses_image
    return _lint(ctx, engines, container_target=uses, allow_unpinned_image=allow_unpinned_image,
                 draft_config=_draft_config(draft), images=images)


def _target(target: str) -> Any:
    if target not in TARGETS:
        raise UsageError(f"unknown target {target!r}; allowed: {', '.join(TARGETS)}")
    return TARGETS[target]


def render_bundle(
    bundle: Bundle, engine: EngineName | str, target: str, out_dir: Path | None = None, *,
    image: str | None = None, image_digest: str | None = None,
    allow_unpinned_image: bool = False,
) -> RenderResult:
    """Lint, then render one engine x target; lint errors raise :class:`RenderError`.

    What is rendered is what ``bundle`` gives: its record and spec, its image record and its
    tuned schedule (for a verified bundle, only the signed ones). The result says which
    reading it was (``custody``).
    """
    eng_name, eng = _engine(engine)
    tgt = _target(target)
    mirror, record, name = bundle.mirror, bundle.record, bundle.name
    if not bundle.signed:  # nothing re-hashed the bytes: at least every object must be there
        _check_objects(mirror, record)
    report = lint_bundle(bundle, engine=eng_name, target=target, image=image,
                         image_digest=image_digest, allow_unpinned_image=allow_unpinned_image)
    report.raise_for_errors()
    ctx = _context(mirror, record, bundle.spec,
                   image=_image_for(bundle, eng_name, image, image_digest))
    ctx = replace(ctx, spec=apply_tuned(ctx.spec, bundle.tuned_schedule(eng_name.value)))
    cmd, base = eng.build(ctx, speculation=True), eng.build(ctx, speculation=False)
    meta = RenderMeta(
        bundle=name, engine=eng_name, target_ref=f"{record.target.repo}@{record.target.commit}",
        draft_ref=f"{record.draft.repo}@{record.draft.commit}" if record.draft else None,
        tool_version=__version__,
    )
    files = tgt.render(cmd, base, meta)
    # under the mirror, every folder on the way must be real (never a planted link)
    dest = out_dir or mirror.output_dir(name, f"render/{eng_name.value}") / tgt.name
    elsewhere = not dest.resolve().is_relative_to(mirror.root)
    contents = {f.path: f.content for f in files}
    extra = {
        "command.json": json.dumps({"speculative": cmd.to_json(), "baseline": base.to_json()},
                                   indent=2, sort_keys=True) + "\n",
        "lint.json": json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n",
    }
    out = [(f.path, f.content, f.mode) for f in files] + [(k, v, 0o644) for k, v in extra.items()]
    if elsewhere:
        # Output that goes elsewhere writes nothing to the mirror, which a deployment node
        # often mounts read-only: no lock, no event (the output folder is the record).
        written = _write_folder(dest, out, mirror.root)
        return RenderResult(name, eng_name, tgt.name, dest, tuple(written), cmd, base, report,
                            bundle.custody(),
                            (f"output outside the mirror: nothing written to {mirror.root}, "
                             "no render event logged",), contents)
    with mirror.lock():  # one writer swaps a render folder at a time
        written = _write_folder(dest, out, mirror.root)
        mirror.append_event("render", name, {
            "engine": eng_name.value, "target": tgt.name, "out_dir": str(dest),
            "image": cmd.image, "files": [p.name for p in written],
            "lint": {"errors": len(report.errors), "warnings": len(report.warnings)},
            "custody": bundle.custody(),
        })
    return RenderResult(name, eng_name, tgt.name, dest, tuple(written), cmd, base, report,
                        bundle.custody(), contents=contents)


def _check_objects(mirror: Mirror, record: BundleRecord) -> None:
    """An unverified render refuses a bundle whose stored objects are missing or cut short."""
    missing = [f"{a.role}:{f.path}" for a in record.artifacts for f in a.files
               if not mirror.has_object(f.sha256, f.size)]
    if missing:
        raise CorruptMirror(f"bundle {record.name!r}: {len(missing)} file(s) missing from the "
                            f"mirror's objects (first: {missing[0]})",
                            hint="pull or import the bundle again; `specbundle verify` names "
                                 "each one")


def _write_folder(dest: Path, files: list[tuple[str, str, int]], mirror_root: Path
                  ) -> list[Path]:
    """Write files into a staging folder beside ``dest``, then swap it in whole.

    Under the mirror every folder from its root down is opened no-follow (``open_dir``) and
    the swap acts through that fd: a ``dest`` (or a folder above it) that is a link or not a
    folder is refused, never followed or replaced, so the swap cannot move or delete what a
    planted link points at. A ``--out`` elsewhere is the operator's: its parent is created.
    """
    dest = dest.absolute()
    if dest.is_relative_to(mirror_root):
        base, rel = mirror_root, PurePosixPath(dest.parent.relative_to(mirror_root).as_posix())
    else:
        base, rel = dest.parent, PurePosixPath()
        try:
            base.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise EnvironmentProblem(f"cannot write rendered manifests to {dest}: "
                                     f"{err.strerror}", hint="pick a writable --out folder") \
                from err
    with open_dir(base, rel) as dfd:
        exists = refuse_link_at(dfd, dest.name, dest.parent, folder=True)
        stage = mkdir_at(dfd, dest.name, dest.parent)
        try:
            for frel, content, mode in files:
                parts = PurePosixPath(frel)
                # below the checked folder's fd, not its path: a swap cannot redirect it
                with open_dir(fd_path(dfd, "."), PurePosixPath(stage, *parts.parts[:-1])) \
                        as sub:
                    write_at(sub, parts.name, content.encode("utf-8"), dest, mode)
            old = None
            if exists:
                old = tmp_name(dest.name, "old")
                rename_at(dfd, dest.name, dfd, old)
            rename_at(dfd, stage, dfd, dest.name)
            if old is not None:
                rmtree_at(dfd, old)
        except OSError as err:
            rmtree_at(dfd, stage)
            raise disk_error(err, dest, what="writing rendered manifests to") from err
        except BaseException:
            rmtree_at(dfd, stage)
            raise
    return [dest / frel for frel, _, _ in files]
