"""The two plug-in points of render: serving engines and deployment targets.

An engine (vLLM, SGLang, llama.cpp) turns a bundle into a :class:`ServeCommand`: argv, env,
mounts, endpoints and image, with no knowledge of how it will be deployed. A target (shell,
compose, kubernetes, systemd) turns any command into files, with no knowledge of the engine.
Three engines and four targets are seven pieces, not twelve.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specbundle.record import BundleRecord
from specbundle.spec import BundleSpec, EngineName

__all__ = [
    "OFFLINE_ENV",
    "DeployTarget",
    "EngineContext",
    "Mount",
    "RenderMeta",
    "RenderedFile",
    "ServeCommand",
    "ServeEngine",
]

#: Switches every manifest sets so nothing reaches for a hub or phones home.
OFFLINE_ENV: tuple[tuple[str, str], ...] = (
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("HF_DATASETS_OFFLINE", "1"),
    ("HF_HUB_DISABLE_TELEMETRY", "1"),
    ("VLLM_NO_USAGE_STATS", "1"),
    ("VLLM_DO_NOT_TRACK", "1"),
    ("DO_NOT_TRACK", "1"),
)


@dataclass(frozen=True)
class Mount:
    """A host directory the engine needs; the mirror is always mounted read-only."""

    source: Path
    target: Path
    read_only: bool = True


@dataclass(frozen=True)
class ServeCommand:
    """Everything needed to start one engine for one bundle, independent of the target.

    ``program`` is the executable and its fixed leading words (``vllm serve``); ``args`` is
    everything else except the listen address, which targets set themselves (a container
    binds 0.0.0.0, a shell script honours ``SPECBUNDLE_HOST``/``SPECBUNDLE_PORT``).
    """

    engine: EngineName
    bundle: str
    speculation: bool
    program: tuple[str, ...]
    container_program: tuple[str, ...]
    binary_env: str
    args: tuple[str, ...]
    host: str
    port: int
    env: tuple[tuple[str, str], ...]
    mounts: tuple[Mount, ...]
    health_path: str
    metrics_path: str
    image: str
    served_model_name: str
    target_path: Path
    draft_path: Path | None
    gpus: int
    container_healthcheck: tuple[str, ...]
    host_flag: str = "--host"
    port_flag: str = "--port"

    @property
    def listen_args(self) -> tuple[str, ...]:
        """The host/port flags with this command's values."""
        return (self.host_flag, self.host, self.port_flag, str(self.port))

    @property
    def argv(self) -> tuple[str, ...]:
        """The full command line as it runs on a host."""
        return (*self.program, *self.args, *self.listen_args)

    @property
    def env_dict(self) -> dict[str, str]:
        """Environment as a mapping (order kept)."""
        return dict(self.env)

    def to_json(self) -> dict[str, Any]:
        """JSON form, stored next to every rendered manifest and used by the benchmark."""
        return {
            "engine": self.engine.value, "bundle": self.bundle, "speculation": self.speculation,
            "argv": list(self.argv), "program": list(self.program),
            "container_program": list(self.container_program), "binary_env": self.binary_env,
            "args": list(self.args), "host": self.host, "port": self.port,
            "env": self.env_dict,
            "mounts": [{"source": str(m.source), "target": str(m.target),
                        "read_only": m.read_only} for m in self.mounts],
            "health_path": self.health_path, "metrics_path": self.metrics_path,
            "image": self.image, "served_model_name": self.served_model_name,
            "target_path": str(self.target_path),
            "draft_path": str(self.draft_path) if self.draft_path else None,
            "gpus": self.gpus,
        }


@dataclass(frozen=True)
class EngineContext:
    """What an engine builds from: the bundle, its spec and the engine-visible model paths.

    ``target_dir``/``draft_dir`` are neutral per-bundle aliases inside the mirror (see
    :mod:`specbundle.render.paths`), never a hub id and never the snapshot path itself.
    """

    record: BundleRecord | None
    spec: BundleSpec
    mirror_root: Path
    target_dir: Path
    draft_dir: Path | None
    #: Pinned image reference overriding the spec's ``engines.<engine>.image``.
    image: str | None = None

    @property
    def name(self) -> str:
        """The bundle name (also the served model name)."""
        return self.spec.name


class ServeEngine(Protocol):
    """A serving engine: builds the command for either benchmark arm."""

    name: EngineName
    default_port: int

    def build(self, ctx: EngineContext, *, speculation: bool) -> ServeCommand:
        """The command; ``speculation=False`` is the baseline arm, identical otherwise."""
        ...


@dataclass(frozen=True)
class RenderMeta:
    """Provenance every manifest states in its header comment."""

    bundle: str
    engine: EngineName
    target_ref: str
    draft_ref: str | None
    tool_version: str


@dataclass(frozen=True)
class RenderedFile:
    """One output file of a target, relative to the render folder."""

    path: str
    content: str
    mode: int = 0o644


class DeployTarget(Protocol):
    """A deployment target: renders a command (and its baseline arm) into files."""

    name: str
    #: Whether the result runs in a container (then the image must be pinned by digest).
    uses_image: bool

    def render(
        self, command: ServeCommand, baseline: ServeCommand, meta: RenderMeta
    ) -> tuple[RenderedFile, ...]:
        """The files for this target."""
        ...
