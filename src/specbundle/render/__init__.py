"""Render: offline serve manifests for vLLM, SGLang and llama.cpp, and the pitfall linter.

Engines (:mod:`.vllm`, :mod:`.sglang`, :mod:`.llamacpp`) build a target-neutral
:class:`ServeCommand`; targets (:mod:`.targets`: shell, compose, kubernetes, systemd) render
any command through the Jinja templates in ``templates/``; :mod:`.lint` with :mod:`.rules`
and :mod:`.rules_cmd` blocks the known speculative-decoding pitfalls. Entry points live in
:mod:`.api`.

Two choices users see: engines get target and draft through neutral per-bundle aliases
(``bundles/<name>/render/models/{target,draft}``, see :mod:`.paths`), and container targets
need an image pinned by digest, taken from ``--image``/``--image-digest``, else the images
stage's record (``bundles/<name>/images/<engine>.json``), else the spec's ``image`` if it
already carries ``@sha256:``; otherwise render refuses unless ``--allow-unpinned-image``.
Shell and systemd targets run a local binary and need no image.
"""

from specbundle.render.api import (
    ENGINES,
    RULES,
    RenderResult,
    build_serve_command,
    lint_bundle,
    lint_spec,
    render_bundle,
)
from specbundle.render.interface import OFFLINE_ENV, Mount, RenderMeta, ServeCommand
from specbundle.render.lint import Finding, LintReport
from specbundle.render.targets import TARGETS

__all__ = [
    "ENGINES",
    "OFFLINE_ENV",
    "RULES",
    "TARGETS",
    "Finding",
    "LintReport",
    "Mount",
    "RenderMeta",
    "RenderResult",
    "ServeCommand",
    "build_serve_command",
    "lint_bundle",
    "lint_spec",
    "render_bundle",
]
