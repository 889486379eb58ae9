"""Tokenizer identity between target and draft: file digests, tokenizer.json, GGUF vocab.

A draft proposes token *ids*; if its vocabulary differs from the target's by even one token the
engine silently verifies the wrong tokens (acceptance collapses) or, in llama.cpp, refuses to
start. Byte digests of the tokenizer files decide first; when they differ, ``tokenizer.json``
is compared semantically (formatting differences are not a mismatch) and the first differing
token is named. For GGUF pairs the rule is llama.cpp's own (``common/speculative.cpp``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeGuard

import numpy as np

from specbundle.digest import hash_file, sha256_bytes
from specbundle.scan.findings import Finding, Severity, finding
from specbundle.scan.formats import GGUFHeader, StringArray
from specbundle.scan.inventory import ArtifactTree, TreeFile
from specbundle.scan.jsonfile import load_json

__all__ = ["TOKENIZER_FILES", "compare_gguf_vocab", "compare_tokenizers"]

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt",
                   "added_tokens.json", "special_tokens_map.json")
_SEMANTIC_KEYS = ("model", "added_tokens", "normalizer", "pre_tokenizer", "post_processor",
                  "decoder")
# llama.cpp common/speculative.cpp
SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5


# tokenizer files are hashed whole: real ones are at most tens of MB, so a larger one (a sparse
# 1 TB merges.txt) is not compared at all (a HIGH finding, never minutes of hashing)
MAX_TOKENIZER_FILE = 512 * 1024 * 1024


def _digests(tree: ArtifactTree) -> dict[str, str]:
    return {n: hash_file(f.path) for n in TOKENIZER_FILES if (f := tree.file(n)) is not None}


def _load_file(f: TreeFile) -> Any:
    return load_json(f.path)


def _semantic(doc: dict[str, Any]) -> str | None:
    """Digest of the parts of a tokenizer.json that decide tokenisation, or None when they
    cannot be serialised (NaN, lone surrogates and deep nesting are hostile input, not a
    crash: the caller then reports the files as differing)."""
    try:
        text = json.dumps({k: doc.get(k) for k in _SEMANTIC_KEYS}, sort_keys=True,
                          separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    except (ValueError, TypeError, RecursionError):
        return None
    return sha256_bytes(text.encode("ascii"))


def _vocab(doc: Any) -> dict[int, str]:
    out: dict[int, str] = {}
    model = doc.get("model", {}) if isinstance(doc, dict) else {}
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        out.update({int(i): str(t) for t, i in vocab.items() if isinstance(i, int)})
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        out.update({i: str(p[0]) for i, p in enumerate(vocab) if isinstance(p, list) and p})
    added = doc.get("added_tokens") if isinstance(doc, dict) else None
    for tok in added if isinstance(added, list) else []:
        if isinstance(tok, dict) and isinstance(tok.get("id"), int):
            out[tok["id"]] = str(tok.get("content"))
    return out


def _first_difference(a: dict[int, str], b: dict[int, str]) -> tuple[int, str | None, str | None]:
    for i in sorted(set(a) | set(b)):
        if a.get(i) != b.get(i):
            return i, a.get(i), b.get(i)
    return -1, None, None


def compare_tokenizers(target: ArtifactTree, draft: ArtifactTree, *,
                       load: Callable[[TreeFile], Any] = _load_file) -> Iterator[Finding]:
    """Findings when the HF tokenizer files of target and draft are not the same tokenizer.

    ``load`` reads a JSON file (the scan passes its shared, bounded config parse).
    """
    big = [(t.role, f.rel) for t in (target, draft) for n in TOKENIZER_FILES
           if (f := t.file(n)) is not None and f.size > MAX_TOKENIZER_FILE]
    if big:
        yield finding("compat.tokenizer-mismatch", Severity.HIGH,
                      f"cannot verify the tokenizer: {big[0][1]} of the {big[0][0]} is larger "
                      f"than {MAX_TOKENIZER_FILE} bytes (too large to compare)", big[0][1])
        return
    try:
        dt, dd = _digests(target), _digests(draft)
    except OSError as err:
        yield finding("compat.tokenizer-mismatch", Severity.HIGH,
                      f"cannot verify the tokenizer: a tokenizer file cannot be read: "
                      f"{err.strerror or err}", None)
        return
    if not dd or not dt:
        yield finding("compat.tokenizer-mismatch", Severity.HIGH,
                      "cannot verify the tokenizer: no tokenizer files in "
                      + ("the draft" if not dd else "the target"), None,
                      target_files=", ".join(sorted(dt)), draft_files=", ".join(sorted(dd)))
        return
    differing = sorted(n for n in set(dt) | set(dd) if dt.get(n) != dd.get(n))
    if not differing:
        return
    ft, fd = target.file("tokenizer.json"), draft.file("tokenizer.json")
    tj = None if ft is None else load(ft)
    dj = None if fd is None else load(fd)
    if differing == ["tokenizer.json"] and isinstance(tj, dict) and isinstance(dj, dict):
        sem_t, sem_d = _semantic(tj), _semantic(dj)
        if sem_t is not None and sem_t == sem_d:
            yield finding("compat.tokenizer-format", Severity.INFO,
                          "tokenizer.json differs only in formatting", "tokenizer.json")
            return
    idx, a, b = _first_difference(_vocab(tj), _vocab(dj)) if tj and dj else (-1, None, None)
    ev: dict[str, object] = {"files": ", ".join(differing)}
    if idx >= 0:
        ev.update(first_token_id=idx, target_token=repr(a)[:80], draft_token=repr(b)[:80])
    yield finding("compat.tokenizer-mismatch", Severity.HIGH,
                  "draft and target tokenizers differ"
                  + (f" (first at token id {idx})" if idx >= 0 else ""),
                  differing[0], **ev)


def _plain(v: object) -> object:
    """GGUF arrays come back as numpy arrays; compare them as lists."""
    return v.tolist() if isinstance(v, np.ndarray) else v


def _strings(v: object) -> TypeGuard[Sequence[str]]:
    return isinstance(v, StringArray) or (
        isinstance(v, list) and all(isinstance(x, str) for x in v))


def compare_gguf_vocab(target: GGUFHeader, draft: GGUFHeader, file: str) -> Iterator[Finding]:
    """llama.cpp's compatibility rule, evaluated from the GGUF metadata alone."""
    kv_t, kv_d = target.kv, draft.kv
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.add_bos_token",
                "tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_eos_token",
                "tokenizer.ggml.eos_token_id"):
        a, b = _plain(kv_t.get(key)), _plain(kv_d.get(key))
        if a != b:
            yield finding("compat.gguf-vocab", Severity.HIGH, f"{key} differs", file,
                          target=repr(a)[:80], draft=repr(b)[:80])
    tt, td = kv_t.get("tokenizer.ggml.tokens"), kv_d.get("tokenizer.ggml.tokens")
    if not _strings(tt) or not _strings(td):
        yield finding("compat.gguf-vocab", Severity.HIGH, "tokenizer.ggml.tokens missing", file)
        return
    if abs(len(tt) - len(td)) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        yield finding("compat.gguf-vocab", Severity.HIGH,
                      f"vocab sizes differ by more than {SPEC_VOCAB_MAX_SIZE_DIFFERENCE}", file,
                      target=len(tt), draft=len(td))
    if isinstance(tt, StringArray) and isinstance(td, StringArray) and tt == td:
        return  # byte-identical arrays: nothing to compare token by token
    for i in range(SPEC_VOCAB_CHECK_START_TOKEN_ID, min(len(tt), len(td))):
        if tt[i] != td[i]:
            yield finding("compat.gguf-vocab", Severity.HIGH,
                          f"token {i} differs (llama.cpp refuses this draft)", file,
                          token_id=i, target_token=repr(tt[i])[:80], draft_token=repr(td[i])[:80])
            return
