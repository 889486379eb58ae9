"""The four deployment targets: each renders any :class:`ServeCommand` through a Jinja template.

Templates live in the top-level ``templates/`` folder; the wheel ships them as
``specbundle/templates`` (pyproject force-include), an editable install reads the source tree.
Values are quoted by filters, never by hand in templates: ``sh`` (POSIX shell), ``json``
(a JSON string is a valid YAML scalar), ``compose`` (JSON with ``$$`` against compose's
interpolation), ``systemd`` (systemd's own quoting, C escapes, ``%``/``$``) and ``systemd_path``
(quoted paths for path-list settings).
"""

from __future__ import annotations

import importlib.resources
import json
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from specbundle.errors import EnvironmentProblem, RenderError
from specbundle.render.interface import (
    DeployTarget,
    RenderedFile,
    RenderMeta,
    ServeCommand,
)

__all__ = [
    "TARGETS",
    "ComposeTarget",
    "KubernetesOciTarget",
    "KubernetesTarget",
    "OciModelSource",
    "ShellTarget",
    "SystemdTarget",
    "resource_name",
    "templates_dir",
]

_TEMPLATE_PROBE = "shell/serve.sh.j2"


def templates_dir() -> Path:
    """``specbundle/templates`` of an installed wheel, else the repository's ``templates/``."""
    packaged = importlib.resources.files("specbundle") / "templates"
    candidates = [Path(str(packaged)), Path(__file__).resolve().parents[3] / "templates"]
    for cand in candidates:
        if (cand / _TEMPLATE_PROBE).is_file():
            return cand
    raise EnvironmentProblem(
        "specbundle's manifest templates are missing (looked in "
        + ", ".join(str(c) for c in candidates) + ")",
        hint="reinstall specbundle; the wheel ships them as specbundle/templates",
    )


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _systemd_quote(value: str) -> str:
    """One word of ``ExecStart=``/``Environment=``: double-quoted; backslash, quote and every
    control character as C escapes (systemd unescapes these settings), so no value can end
    the line; ``%`` (specifiers) and ``$`` (variable expansion) doubled."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    escaped = _CONTROL.sub(lambda m: "".join(f"\\x{b:02x}" for b in m.group().encode()),
                           escaped)
    return '"' + escaped.replace("%", "%%").replace("$", "$$") + '"'


def _systemd_path(value: str) -> str:
    """One path of ``RequiresMountsFor=``/``ReadOnlyPaths=``: double-quoted (a space does not
    split it), backslash and quote escaped, ``%`` doubled. These settings do not unescape C
    escapes, so a path with a control character cannot be written at all: refused."""
    if _CONTROL.search(value):
        raise RenderError(f"path {value!r} holds a control character; a systemd unit cannot "
                          "name it", hint="move the mirror to a plain path")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


#: What JSON leaves raw but YAML refuses (DEL, C1) or reads as a line break (NEL, U+2028/9).
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")


def _yaml_json(value: Any) -> str:
    """A JSON value that is also one YAML flow scalar with the same content."""
    text = json.dumps(value, ensure_ascii=False)
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _sh_lines(args: tuple[str, ...]) -> list[str]:
    """Shell-quoted argument lines, a flag and its value on one line, for people to read."""
    lines: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and i + 1 < len(args) and not args[i + 1].startswith("-"):
            lines.append(f"{shlex.quote(a)} {shlex.quote(args[i + 1])}")
            i += 2
        else:
            lines.append(shlex.quote(a))
            i += 1
    return lines


def _sh_default(var: str, default: str) -> str:
    return f'"${{{var}:-{default}}}"' if re.fullmatch(r"[A-Za-z0-9_./-]+", default) else (
        f'"${{{var}:-"{shlex.quote(default)}"}}"'
    )


@cache
def _env() -> jinja2.Environment:
    # Output is shell, YAML and unit files, not HTML: quoting is done by the filters below.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, autoescape=False,  # noqa: S701
    )
    env.filters["sh"] = lambda v: shlex.quote(str(v))
    env.filters["json"] = _yaml_json
    env.filters["systemd"] = lambda v: _systemd_quote(str(v))
    env.filters["systemd_path"] = lambda v: _systemd_path(str(v))
    # Compose interpolates $VAR in every string; $$ is a literal dollar.
    env.filters["compose"] = lambda v: _yaml_json(str(v).replace("$", "$$"))
    env.filters["sh_default"] = _sh_default
    env.filters["sh_lines"] = _sh_lines
    return env


def _render(template: str, **values: Any) -> str:
    return _env().get_template(template).render(**values)


def resource_name(meta: RenderMeta) -> str:
    """A DNS-1123 label for Kubernetes objects and compose projects (max 63 chars)."""
    raw = f"sb-{meta.bundle}-{meta.engine.value}".lower()
    name = re.sub(r"[^a-z0-9-]+", "-", raw).strip("-")
    return name[:63].rstrip("-")


def _container_argv(cmd: ServeCommand) -> list[str]:
    # Containers listen on every interface of their own network namespace.
    return [*cmd.container_program, *cmd.args, *cmd.listen_args]


def _mirror_root(cmd: ServeCommand) -> str:
    return str(cmd.mounts[0].source)


class ShellTarget:
    """``serve.sh``: runs a local binary; also starts the benchmark's baseline arm."""

    name = "shell"
    uses_image = False

    def render(
        self, command: ServeCommand, baseline: ServeCommand, meta: RenderMeta
    ) -> tuple[RenderedFile, ...]:
        """One executable POSIX shell script."""
        files = [p for p in _model_files(command) if p]
        text = _render("shell/serve.sh.j2", cmd=command, base=baseline, meta=meta,
                       model_files=files, mirror_root=_mirror_root(command))
        return (RenderedFile("serve.sh", text, 0o755),)


def _model_files(cmd: ServeCommand) -> list[str]:
    # The shell script checks these exist before exec, so a missing mirror fails clearly.
    out = [str(cmd.target_path)]
    if cmd.draft_path is not None and cmd.speculation:
        out.append(str(cmd.draft_path))
    return out


class ComposeTarget:
    """``compose.yaml``: internal network (no egress), GPU reservation, read-only mirror."""

    name = "compose"
    uses_image = True

    def render(
        self, command: ServeCommand, baseline: ServeCommand, meta: RenderMeta
    ) -> tuple[RenderedFile, ...]:
        """One compose file."""
        text = _render("compose/compose.yaml.j2", cmd=command, meta=meta,
                       project=resource_name(meta), network="specbundle",
                       container_argv=_container_argv(command))
        return (RenderedFile("compose.yaml", text),)


def _k8s_labels(app: str, meta: RenderMeta) -> tuple[tuple[str, str], ...]:
    return (
        ("app.kubernetes.io/name", "specbundle"),
        ("app.kubernetes.io/instance", app),
        ("app.kubernetes.io/component", meta.engine.value),
        ("specbundle.dev/bundle", meta.bundle),
    )


class KubernetesTarget:
    """Deployment + Service + egress-denying NetworkPolicy."""

    name = "kubernetes"
    uses_image = True

    def render(
        self, command: ServeCommand, baseline: ServeCommand, meta: RenderMeta
    ) -> tuple[RenderedFile, ...]:
        """One multi-document YAML file."""
        app = resource_name(meta)
        labels = _k8s_labels(app, meta)
        text = _render("kubernetes/kubernetes.yaml.j2", cmd=command, meta=meta, app=app,
                       labels=labels, container_argv=_container_argv(command))
        return (RenderedFile("kubernetes.yaml", text),)


@dataclass(frozen=True)
class OciModelSource:
    """Where a cluster pulls the models from: ModelPack artifacts pinned by digest.

    ``models`` maps role -> ``registry/repo@sha256:...`` of its ModelPack manifest; ``index``
    is the bundle index (what the init-container and the benchmark Job pull and verify);
    ``tool_image`` is an image with specbundle (and, for the Job, the engine), by digest.
    """

    models: tuple[tuple[str, str], ...]
    index: str
    tool_image: str | None = None
    init_container: bool = False
    plain_http: bool = False


def _registry_port(ref: str) -> int:
    host = ref.split("/", 1)[0]
    port = host.rsplit(":", 1)[1] if ":" in host and not host.endswith("]") else ""
    return int(port) if port.isdigit() else 443


class KubernetesOciTarget:
    """Kubernetes with models from a registry: read-only ``image`` volumes (1.31+), or an
    init-container that pulls and verifies the bundle into an emptyDir for older clusters;
    plus a benchmark Job that attaches its report to the bundle as a referrer."""

    name = "kubernetes"
    uses_image = True

    def __init__(self, source: OciModelSource) -> None:
        if source.init_container and not source.tool_image:
            raise RenderError("the init-container variant needs --oci-tool-image "
                              "(an image with specbundle, pinned by digest)")
        self.source = source

    def _paths(self, command: ServeCommand) -> dict[str, str]:
        paths = {"target": str(command.target_path)}
        if command.draft_path is not None and command.speculation:
            paths["draft"] = str(command.draft_path)
        root = _mirror_root(command)
        for a in command.args:
            if a.startswith(root) and not any(a.startswith(p) for p in paths.values()):
                raise RenderError(f"the command reads {a} from the mirror, which an image "
                                  "volume does not provide", hint="use --model-source mirror")
        return paths

    def render(
        self, command: ServeCommand, baseline: ServeCommand, meta: RenderMeta
    ) -> tuple[RenderedFile, ...]:
        """``kubernetes.yaml`` (serving) and ``bench-job.yaml`` (when a tool image is set)."""
        app = resource_name(meta)
        labels = _k8s_labels(app, meta)
        refs = dict(self.source.models)
        volumes = [(role, refs[role], path) for role, path in self._paths(command).items()]
        oci = {"volumes": volumes, "index": self.source.index, "init": self.source.init_container,
               "tool_image": self.source.tool_image, "mirror_root": _mirror_root(command),
               "plain_http": self.source.plain_http, "registry_port": _registry_port(
                   self.source.index)}
        text = _render("kubernetes/kubernetes.yaml.j2", cmd=command, meta=meta, app=app,
                       labels=labels, container_argv=_container_argv(command), oci=oci)
        files = [RenderedFile("kubernetes.yaml", text)]
        if self.source.tool_image:
            files.append(RenderedFile("bench-job.yaml", _render(
                "kubernetes/bench-job.yaml.j2", cmd=command, meta=meta, app=app, labels=labels,
                oci=oci)))
        return tuple(files)


class SystemdTarget:
    """A hardened unit; address-based egress limits instead of PrivateNetwork=."""

    name = "systemd"
    uses_image = False

    def render(
        self, command: ServeCommand, baseline: ServeCommand, meta: RenderMeta
    ) -> tuple[RenderedFile, ...]:
        """One ``.service`` unit."""
        state = resource_name(meta)
        unit = f"{state}.service"
        text = _render("systemd/unit.service.j2", cmd=command, meta=meta, unit_name=unit,
                       state_name=state, argv=list(command.argv),
                       mirror_root=_mirror_root(command))
        return (RenderedFile(unit, text),)


TARGETS: dict[str, DeployTarget] = {
    t.name: t for t in (ShellTarget(), ComposeTarget(), KubernetesTarget(), SystemdTarget())
}
