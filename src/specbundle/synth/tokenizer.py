"""A tiny byte-level BPE tokenizer, emitted both as HF ``tokenizer.json`` and as GGUF metadata.

Hand-written because the only library that trains BPE (``tokenizers``) is not a runtime
dependency, and the job is small: GPT-2 byte mapping plus a few hundred greedy merges over a
built-in corpus. Target and draft get the same :class:`SynthTokenizer`, so the engine's vocab
compatibility check (type, BOS/EOS, token text) passes exactly as it does for a real family.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from typing import Any

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "SynthTokenizer", "build_tokenizer"]

SPECIAL_TOKENS = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                  "<|end_header_id|>", "<|eot_id|>")
BOS, EOS = SPECIAL_TOKENS[0], SPECIAL_TOKENS[1]

# Benign: only loops over messages and prints their fields; no attribute access beyond that.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

_CORPUS = """\
Speculative decoding lets a small draft model propose several tokens that the large target
model then checks in one batched step. When the draft agrees with the target most of the time,
the target runs fewer sequential steps and the answer arrives sooner. When the draft disagrees,
the work it did is thrown away and the deployment is slower than plain decoding.
An air-gapped cluster cannot download weights when a server starts, so both models are pulled,
scanned, signed and copied into an internal mirror before anyone serves them. The mirror keeps
every file by its sha256 digest, the bundle records the commit of each repository, and the
attestations say who scanned, signed and admitted the pair, with what evidence.
The benchmark runs the same engine with the same prompts at the same concurrency, once with
speculation and once without, and admits the bundle only when speculation really pays.
Numbers like 0123456789, 2026, 3.14 and 42 appear in logs; so do words such as token, layer,
vocab, hidden, attention, throughput, latency, acceptance, request, queue and cache.
"""

# The GPT-2 pre-tokenizer split, restricted to what Python's ``re`` can express.
_SPLIT = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


@cache
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (what ByteLevel uses)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return dict(sorted(table.items()))


@dataclass(frozen=True)
class SynthTokenizer:
    """Tokens in id order, the BPE merges, and which ids are special."""

    tokens: tuple[str, ...]
    merges: tuple[str, ...]
    bos_id: int
    eos_id: int
    eot_id: int

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def special_ids(self) -> tuple[int, ...]:
        return tuple(self.tokens.index(t) for t in SPECIAL_TOKENS)

    def tokenizer_json(self) -> dict[str, Any]:
        """The HF fast-tokenizer document (``tokenizer.json``)."""
        specials = set(self.special_ids)
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True}
        bos_ref = {"SpecialToken": {"id": BOS, "type_id": 0}}
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [
                {"id": i, "content": self.tokens[i], "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": False, "special": True}
                for i in sorted(specials)
            ],
            "normalizer": None,
            "pre_tokenizer": byte_level,
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [bos_ref, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [bos_ref, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": BOS, "type_id": 1}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {BOS: {"id": BOS, "ids": [self.bos_id], "tokens": [BOS]}},
            },
            "decoder": byte_level,
            "model": {
                "type": "BPE", "dropout": None, "unk_token": None,
                "continuing_subword_prefix": None, "end_of_word_suffix": None,
                "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                "vocab": {t: i for i, t in enumerate(self.tokens) if i not in specials},
                "merges": list(self.merges),
            },
        }

    def tokenizer_config(self, model_max_length: int) -> dict[str, Any]:
        """``tokenizer_config.json`` with the chat template and the special tokens."""
        return {
            "added_tokens_decoder": {
                str(i): {"content": self.tokens[i], "lstrip": False, "normalized": False,
                         "rstrip": False, "single_word": False, "special": True}
                for i in self.special_ids
            },
            "bos_token": BOS,
            "eos_token": self.tokens[self.eot_id],
            "pad_token": EOS,
            "add_bos_token": True,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": model_max_length,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "chat_template": CHAT_TEMPLATE,
        }

    def special_tokens_map(self) -> dict[str, str]:
        return {"bos_token": BOS, "eos_token": self.tokens[self.eot_id], "pad_token": EOS}

    def token_types(self) -> list[int]:
        """GGUF token types: 1 normal, 3 control (llama.cpp ``LLAMA_TOKEN_TYPE_*``)."""
        specials = set(self.special_ids)
        return [3 if i in specials else 1 for i in range(self.vocab_size)]


def _train_merges(n_new: int) -> list[tuple[str, str]]:
    """Greedy BPE over the corpus words until ``n_new`` distinct tokens exist.

    Ties break on the pair text so the output is stable. Two merges may spell the same token
    ("ab"+"c", "a"+"bc"); both stay in the merge list, the token is counted once.
    """
    table = _bytes_to_unicode()
    words = Counter("".join(table[b] for b in w.encode()) for w in _SPLIT.findall(_CORPUS))
    split = {w: list(w) for w in words}
    merges: list[tuple[str, str]] = []
    new: set[str] = set()
    while len(new) < n_new:
        pairs: Counter[tuple[str, str]] = Counter()
        for w, n in words.items():
            parts = split[w]
            for a, b in pairwise(parts):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        new.add(best[0] + best[1])
        for w, parts in split.items():
            i, out = 0, []
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                    out.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            split[w] = out
    return merges


@cache
def build_tokenizer(vocab_size: int = 512) -> SynthTokenizer:
    """A deterministic tokenizer with exactly ``vocab_size`` ids (bytes, merges, then specials)."""
    n_new = vocab_size - 256 - len(SPECIAL_TOKENS)
    if n_new < 0:
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)}")
    merges = _train_merges(n_new)
    tokens = [*_bytes_to_unicode().values(), *dict.fromkeys(a + b for a, b in merges)]
    if len(tokens) < vocab_size - len(SPECIAL_TOKENS):
        raise ValueError(f"the built-in corpus yields only {len(tokens) - 256} merged tokens; "
                         f"vocab_size must be at most {len(tokens) + len(SPECIAL_TOKENS)}")
    first = len(tokens)
    tokens.extend(SPECIAL_TOKENS)
    return SynthTokenizer(tokens=tuple(tokens), merges=tuple(f"{a} {b}" for a, b in merges),
                          bos_id=first, eos_id=first + 1, eot_id=first + 4)
