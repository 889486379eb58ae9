"""Every speculative method the pinned engines have, and what specbundle does with each.

An engine's method name is either rendered from a :class:`SpecMethod` or refused with a reason
(:data:`specbundle.spec.REFUSED_METHODS`: the spec parser names the reason); no third case,
so a bundle never reaches an engine method that render would get wrong. The tests read each
engine's own list (vLLM's ``SpeculativeMethod`` literal, SGLang's ``SpeculativeAlgorithm``
enum, llama-server b11434's ``--spec-type`` help) and fail when an engine gains a name this
table does not know.
"""

from __future__ import annotations

import re

from specbundle.render.rules_cmd import LLAMACPP_SPEC_TYPES
from specbundle.render.sglang import ALGORITHMS
from specbundle.spec import REFUSED_METHODS, EngineName, SpecMethod

__all__ = ["ENGINE_REFUSED", "engine_method"]

#: vLLM rewrites every model-specific ``*_mtp`` method (``deepseek_mtp``, ``gemma4_mtp``, ...)
#: to ``mtp`` (``SpeculativeConfig.__post_init__``), which is what render writes.
_VLLM_MTP_ALIAS = re.compile(r"^[a-z0-9_]+_mtp$")

#: engine -> its method names specbundle refuses -> the key of the reason in REFUSED_METHODS.
ENGINE_REFUSED: dict[EngineName, dict[str, str]] = {
    EngineName.VLLM: {"suffix": "suffix", "mlp_speculator": "mlp_speculator",
                      "custom_class": "custom_class",
                      "extract_hidden_states": "extract_hidden_states"},
    EngineName.SGLANG: {"UNO": "uno", "FROZEN_KV_MTP": "frozen_kv_mtp"},
    EngineName.LLAMACPP: {},
}


def _rendered(engine: EngineName, name: str) -> SpecMethod | None:
    if engine == EngineName.VLLM:
        if _VLLM_MTP_ALIAS.match(name):
            return SpecMethod.MTP
        return SpecMethod(name) if name in {m.value for m in SpecMethod} else None
    if engine == EngineName.SGLANG:
        if name == "NEXTN":
            return SpecMethod.MTP
        return next((m for m, a in ALGORITHMS.items() if a == name), None)
    return next((m for m, types in LLAMACPP_SPEC_TYPES.items() if name in types), None)


def engine_method(engine: EngineName, name: str) -> SpecMethod | str | None:
    """What specbundle does with an engine's method name: the :class:`SpecMethod` rendered
    as it, the reason it is refused, or None when specbundle does not know the name."""
    rendered = _rendered(engine, name)
    if rendered is not None:
        return rendered
    key = ENGINE_REFUSED[engine].get(name)
    return REFUSED_METHODS[key] if key is not None else None
