"""Assembly shared by the three engines: offline environment, read-only mirror mount."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from specbundle.errors import RenderError
from specbundle.render.interface import OFFLINE_ENV, EngineContext, Mount, ServeCommand
from specbundle.spec import EngineName

__all__ = ["assemble", "python_probe", "settings_of"]

T = TypeVar("T")


def settings_of(ctx: EngineContext, engine: EngineName, kind: type[T]) -> T:
    """The spec's settings block for an engine; an engine absent from the spec is not rendered."""
    settings = getattr(ctx.spec.engines, engine.value)
    if not isinstance(settings, kind):
        enabled = ", ".join(e.value for e in ctx.spec.engines.enabled())
        raise RenderError(
            f"bundle {ctx.name!r} has no engines.{engine.value} settings (enabled: {enabled})",
            hint=f"add an engines.{engine.value} block to bundle.yaml and pull again",
        )
    return settings


def assemble(
    ctx: EngineContext, *, engine: EngineName, speculation: bool, program: Sequence[str],
    container_program: Sequence[str], binary_env: str, args: Sequence[str], port: int,
    image: str, health_path: str, container_healthcheck: Sequence[str],
    extra_env: Sequence[tuple[str, str]] = (),
) -> ServeCommand:
    """A :class:`ServeCommand` with the offline switches and the mirror mounted read-only."""
    return ServeCommand(
        engine=engine, bundle=ctx.name, speculation=speculation,
        program=tuple(program), container_program=tuple(container_program),
        binary_env=binary_env, args=tuple(args), host="0.0.0.0", port=port,  # noqa: S104
        env=(*OFFLINE_ENV, *extra_env),
        mounts=(Mount(ctx.mirror_root, ctx.mirror_root, read_only=True),),
        health_path=health_path, metrics_path="/metrics", image=ctx.image or image,
        served_model_name=ctx.name, target_path=ctx.target_dir, draft_path=ctx.draft_dir,
        gpus=ctx.spec.deployment.gpus, container_healthcheck=tuple(container_healthcheck),
    )


def python_probe(port: int, path: str) -> tuple[str, ...]:
    """A container health check that needs only Python (present in vLLM and SGLang images)."""
    code = (
        "import urllib.request;"
        f"raise SystemExit(0 if urllib.request.urlopen('http://127.0.0.1:{port}{path}',"
        "timeout=5).status==200 else 1)"
    )
    return ("python3", "-c", code)
