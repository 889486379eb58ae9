"""Lint rules on the engine image: a GPU build, and a release that has what is rendered.

The release comes from the image tag (:mod:`specbundle.render.image_versions`); SGLang's own
rules are in :mod:`specbundle.render.rules_sglang`.
"""

from __future__ import annotations

from collections.abc import Iterator

from specbundle.render.image_versions import (
    DEFAULT_IMAGES,
    LLAMACPP_BUILD,
    VLLM_REMOVED,
    cpu_only_image,
    engine_image_version,
)
from specbundle.render.lint import Finding, LintInput, Rule, finding
from specbundle.spec import EngineName

__all__ = ["IMAGE_RULES", "vllm_removed_in_image"]

V, L = EngineName.VLLM, EngineName.LLAMACPP


def _image_cpu_build(inp: LintInput) -> Iterator[Finding]:
    """A CPU-only image on a GPU deployment serves, benchmarks and admits on the CPU."""
    if inp.container_target is False or inp.spec.deployment.gpus < 1:
        return
    for eng, cmd in inp.commands.items():
        if cpu_only_image(eng, cmd.image):
            sev = "error" if inp.container_target else "warning"
            yield finding("image-cpu-build", sev, f"engines.{eng.value}.image",
                          f"{cmd.image!r} is a CPU-only build but the deployment reserves "
                          f"{inp.spec.deployment.gpus} GPU(s): the engine ignores them "
                          "(llama.cpp only warns about -ngl), so serving, the benchmark and "
                          "admission all run on the CPU.",
                          f"use a GPU build such as {DEFAULT_IMAGES[eng]}", eng)


def _version(inp: LintInput, eng: EngineName) -> str | None:
    """The command image's release, else the spec's tag (a recorded digest carries no tag)."""
    settings = getattr(inp.spec.engines, eng.value)
    images = [inp.commands[eng].image] if eng in inp.commands else []
    images += [settings.image] if settings is not None else []
    return next((v for v in (engine_image_version(eng, i) for i in images) if v), None)


def vllm_removed_in_image(inp: LintInput) -> tuple[str | None, frozenset[str], frozenset[str]]:
    """(release, removed methods, removed keys) of the vLLM image."""
    version = _version(inp, V)
    methods, keys = VLLM_REMOVED.get(version or "", (frozenset(), frozenset()))
    return version, methods, keys


def _vllm_image_release(inp: LintInput) -> Iterator[Finding]:
    """The image's vLLM release must still have the method and every speculative key."""
    cmd = inp.commands.get(V)
    if cmd is None:
        return
    version, methods, keys = vllm_removed_in_image(inp)
    where = "engines.vllm.image"
    if version is None:
        yield finding("vllm-image-version", "warning", where,
                      f"cannot tell which vLLM release {cmd.image!r} is, so lint cannot check "
                      "that it still has the rendered method and speculative-config keys.",
                      f"use a versioned tag such as {DEFAULT_IMAGES[V]} (plus @sha256:...)", V)
        return
    cfg = inp.vllm_spec_config() or {}
    method = str(cfg.get("method", ""))
    if method in methods:
        yield finding("vllm-image-version", "error", "speculative.method",
                      f"vLLM {version} (the image) has no method {method!r}: it refuses the "
                      "speculative config at startup.",
                      f"use eagle3 or draft_model, or an image of vLLM {DEFAULT_IMAGES[V]}", V)
    for key in sorted(set(cfg) & keys):
        yield finding("vllm-image-version", "error", f"engines.vllm.speculative_extra.{key}",
                      f"vLLM {version} (the image) removed the speculative-config key "
                      f"{key!r}: it refuses unknown keys at startup.",
                      "remove the key, or use an image of the release that has it", V)


def _llamacpp_image_release(inp: LintInput) -> Iterator[Finding]:
    """The flags are checked against llama.cpp b11434; another build may not have them."""
    cmd = inp.commands.get(L)
    if cmd is None:
        return
    build = _version(inp, L)
    if build == LLAMACPP_BUILD:
        return
    what = f"build {build}" if build else "no build number"
    yield finding("llamacpp-image-version", "warning", "engines.llamacpp.image",
                  f"{cmd.image!r} names {what}; the rendered --spec-* flags (draft-mtp "
                  f"without a draft, ngram-mod, --kv-unified) are checked against "
                  f"{LLAMACPP_BUILD}, and llama-server refuses flags it does not know.",
                  f"use {DEFAULT_IMAGES[L]} (plus @sha256:...)", L)


IMAGE_RULES: dict[str, Rule] = {
    "image-cpu-build": _image_cpu_build,
    "vllm-image-version": _vllm_image_release,
    "llamacpp-image-version": _llamacpp_image_release,
}
