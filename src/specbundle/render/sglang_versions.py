"""Which SGLang release has which feature specbundle renders or measures.

Derived from the released wheels (``pip download sglang==<v> --no-deps``): 0.5.4 has no
``DFLASH`` or ``DSPARK`` in ``speculative/spec_info.py``, no ``--speculative-adaptive``
field, only ``spec_verify_ct`` / ``spec_accept_length`` in ``tokenizer_manager`` (no
accepted/proposed counts), no ``sglang:num_retracted_requests_total`` counter, and still the single
``--cuda-graph-max-bs``. 0.5.23 (the pinned default) has all of them and the split
``--cuda-graph-max-bs-decode``/``-prefill``. The tests check the 0.5.23 row against
SGLang's own parser when it is installed (``ci/install-sglang.sh``).
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_VERSION", "FEATURES", "FEATURE_TEXT", "has_feature", "image_version"]

DEFAULT_VERSION = "0.5.23"

#: feature -> what it is, for lint messages.
FEATURE_TEXT: dict[str, str] = {
    "dflash": "the DFLASH speculative algorithm",
    "dspark": "the DSPARK speculative algorithm",
    "adaptive": "--speculative-adaptive",
    "meta-counts": "accepted/proposed draft counts in /generate meta_info",
    "retract-counter": "the sglang:num_retracted_requests_total counter",
    "cuda-graph-split": "--cuda-graph-max-bs-decode / --cuda-graph-max-bs-prefill",
    "attn-dp-size": "--attn-dp-size (--dp-size N --enable-dp-attention is deprecated)",
}

#: release -> features it has (releases in between are not listed: lint cannot tell).
FEATURES: dict[str, frozenset[str]] = {
    "0.5.4": frozenset(),
    "0.5.23": frozenset(FEATURE_TEXT),
}

_TAG_RE = re.compile(r":v?(\d+\.\d+\.\d+)(?:[-.][A-Za-z0-9._-]*)?(?:@|$)")


def image_version(image: str) -> str | None:
    """The release an image tag names (``lmsysorg/sglang:v0.5.23-cu129@sha256:...``)."""
    m = _TAG_RE.search(image)
    return m.group(1) if m else None


def has_feature(version: str, feature: str) -> bool | None:
    """Whether a release has a feature; ``None`` when the release is not in the table."""
    feats = FEATURES.get(version)
    return None if feats is None else feature in feats
