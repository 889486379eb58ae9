"""Speculative-decoding compatibility: does this draft fit this target under this method?

Rules come from the engines (vLLM's speculative model registry and EAGLE loaders, SGLang's
EAGLE-3 loader, llama.cpp's draft vocabulary rule); see reference/scanning.md section 4. Every
mismatch is an error, not a warning: a wrong method or vocabulary does not fail loudly at serve
time, it silently turns speculation into overhead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np

from specbundle.scan.compat.vocab import compare_gguf_vocab, compare_tokenizers
from specbundle.scan.configs import load_config
from specbundle.scan.findings import CheckOutcome, Finding, Severity, finding
from specbundle.scan.formats import GGUFHeader, StHeader, load_gguf, read_header, tensor_bytes
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.inventory import ArtifactTree, TreeFile
from specbundle.spec import SpecMethod

__all__ = ["EAGLE3_ARCHITECTURES", "EAGLE_ARCHITECTURES", "CompatCheck", "draft_kind"]

# vLLM model_executor/models/registry.py _SPECULATIVE_DECODING_MODELS; SGLang EntryClass;
# speculators' Eagle3DraftModel.
EAGLE3_ARCHITECTURES = frozenset({"Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3",
                                  "Eagle3Qwen2_5vlForCausalLM", "Eagle3Qwen3vlForCausalLM",
                                  "Eagle3DraftModel"})
EAGLE_ARCHITECTURES = frozenset({"EagleLlamaForCausalLM", "EagleLlama4ForCausalLM",
                                 "EagleMiniCPMForCausalLM", "EagleDeepSeekMTPModel",
                                 "EagleMistralLarge3ForCausalLM"})
_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")
_MAX_MTP_LAYERS = 64


def _config(ctx: CheckContext, tree: ArtifactTree) -> dict[str, Any]:
    f = tree.file("config.json")
    if f is None:
        return {}
    doc = load_config(ctx, f).doc  # the config check's parse (its problems are its findings)
    if not isinstance(doc, dict):
        return {}
    nested = doc.get("transformer_layer_config")  # speculators format
    return {**nested, **doc} if isinstance(nested, dict) else doc


def _archs(cfg: dict[str, Any]) -> list[str]:
    v = cfg.get("architectures")
    items = v if isinstance(v, list) else [v]
    return [a for a in items if isinstance(a, str)]


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def draft_kind(cfg: dict[str, Any]) -> str:
    """What a draft is by its config: eagle3, eagle, medusa, draft_model (any other
    architecture) or unknown (no architectures at all)."""
    archs = _archs(cfg)
    smt = str(cfg.get("speculators_model_type", "")).lower()
    if smt == "eagle3" or any(a in EAGLE3_ARCHITECTURES or "Eagle3" in a for a in archs):
        return "eagle3"
    if smt == "eagle" or any(a in EAGLE_ARCHITECTURES or "Eagle" in a for a in archs):
        return "eagle"
    if "medusa_num_heads" in cfg or any("Medusa" in a for a in archs):
        return "medusa"
    return "draft_model" if archs else "unknown"


def _headers(ctx: CheckContext, tree: ArtifactTree) -> dict[str, tuple[TreeFile, StHeader]]:
    out: dict[str, tuple[TreeFile, StHeader]] = {}
    for f in tree.matching(".safetensors"):
        if not ctx.readable(f.path):
            continue  # the files check reports it
        hdr = ctx.cached("safetensors", f.path,
                         lambda p: read_header(p, ctx.options.max_safetensors_header))
        if not hdr.problems:
            for name in hdr.tensors:
                out[name] = (f, hdr)
    return out


def _gguf(ctx: CheckContext, tree: ArtifactTree) -> tuple[str, GGUFHeader] | None:
    names = [tree.gguf_file] if tree.gguf_file else [f.rel for f in tree.matching(".gguf")]
    if len(names) != 1 or (f := tree.file(names[0])) is None:
        return None
    h = load_gguf(ctx, f.path)
    return (f.rel, h) if h else None


def _int(cfg: dict[str, Any], key: str) -> int | None:
    v = cfg.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class CompatCheck(Check):
    """Method vs draft, tokenizer, vocab, EAGLE/EAGLE-3 head and MTP layer rules."""

    family = "compat"
    rules: ClassVar[dict[str, str]] = {
        "compat.method-mismatch": "The spec's method does not match what the draft is",
        "compat.tokenizer-mismatch": "Draft and target tokenizers differ (or cannot be compared)",
        "compat.tokenizer-format": "Tokenizer files differ only in formatting (recorded)",
        "compat.gguf-vocab": "llama.cpp's draft vocabulary rule is violated",
        "compat.special-tokens": "BOS/EOS ids differ between draft and target",
        "compat.vocab-size": "vocab_size differs between draft and target",
        "compat.eagle-architecture": "EAGLE head architecture the engines do not accept",
        "compat.draft-vocab-size": "draft_vocab_size larger than the target vocabulary",
        "compat.hidden-size": "Head hidden size does not match the target",
        "compat.aux-layers": "Auxiliary hidden-state layer ids beyond the target's layers",
        "compat.d2t": "d2t is missing, not int64 [draft_vocab], out of range or not injective",
        "compat.t2d": "t2d is inconsistent with draft_vocab_size",
        "compat.verifier": "The head was trained for a different target",
        "compat.mtp-missing": "MTP layers declared or present in the target are missing",
    }

    def run(self, ctx: CheckContext) -> CheckOutcome:
        """Apply the rules of the spec's method."""
        target = ctx.tree("target") or ctx.tree("tree")
        draft = ctx.tree("draft")
        if target is None or ctx.method is None:
            return CheckOutcome()
        if ctx.method is SpecMethod.MTP:
            return CheckOutcome.of(f.with_role("target") for f in self._mtp(ctx, target))
        if draft is None:
            return CheckOutcome()
        return CheckOutcome.of(f.with_role("draft") for f in self._pair(ctx, target, draft))

    def _pair(self, ctx: CheckContext, target: ArtifactTree,
              draft: ArtifactTree) -> Iterator[Finding]:
        tcfg, dcfg = _config(ctx, target), _config(ctx, draft)
        kind = draft_kind(dcfg) if dcfg else "draft_model"
        method = ctx.method or SpecMethod.DRAFT_MODEL
        if (method in (SpecMethod.DRAFT_MODEL, SpecMethod.EAGLE, SpecMethod.EAGLE3,
                       SpecMethod.MEDUSA) and kind != method.value):
            yield finding("compat.method-mismatch", Severity.HIGH,
                          f"spec says {method.value!r} but the draft is {kind!r}",
                          "config.json", method=method.value, draft_kind=kind,
                          architectures=_archs(dcfg))
            return
        if method is SpecMethod.DRAFT_MODEL:
            yield from self._draft_model(ctx, target, draft, tcfg, dcfg)
        elif method in (SpecMethod.EAGLE, SpecMethod.EAGLE3):
            yield from self._eagle(ctx, target, draft, tcfg, dcfg)

    def _draft_model(self, ctx: CheckContext, target: ArtifactTree, draft: ArtifactTree,
                     tcfg: dict[str, Any], dcfg: dict[str, Any]) -> Iterator[Finding]:
        pair = (_gguf(ctx, target), _gguf(ctx, draft))
        if pair[0] and pair[1]:
            yield from compare_gguf_vocab(pair[0][1], pair[1][1], pair[1][0])
        if target.file("config.json") or draft.file("config.json"):
            yield from compare_tokenizers(target, draft,
                                          load=lambda f: load_config(ctx, f).doc)
            if _int(tcfg, "vocab_size") != _int(dcfg, "vocab_size"):
                yield finding("compat.vocab-size", Severity.HIGH, "vocab_size differs",
                              "config.json", target=tcfg.get("vocab_size"),
                              draft=dcfg.get("vocab_size"))
            for key in ("bos_token_id", "eos_token_id"):
                if tcfg.get(key) != dcfg.get(key):
                    yield finding("compat.special-tokens", Severity.HIGH, f"{key} differs",
                                  "config.json", target=tcfg.get(key), draft=dcfg.get(key))

    def _eagle(self, ctx: CheckContext, target: ArtifactTree, draft: ArtifactTree,
               tcfg: dict[str, Any], dcfg: dict[str, Any]) -> Iterator[Finding]:
        archs = set(_archs(dcfg))
        if not archs & (EAGLE3_ARCHITECTURES | EAGLE_ARCHITECTURES):
            yield finding("compat.eagle-architecture", Severity.HIGH,
                          f"architectures {sorted(archs)} are not registered EAGLE heads",
                          "config.json")
        vocab = _int(tcfg, "vocab_size")
        if _int(dcfg, "vocab_size") != vocab:
            yield finding("compat.vocab-size", Severity.HIGH, "head vocab_size differs",
                          "config.json", target=vocab, draft=dcfg.get("vocab_size"))
        dvocab = _int(dcfg, "draft_vocab_size") or _int(dcfg, "vocab_size")
        if vocab is not None and dvocab is not None and dvocab > vocab:
            yield finding("compat.draft-vocab-size", Severity.HIGH,
                          "draft_vocab_size exceeds the target vocab_size", "config.json",
                          draft_vocab_size=dvocab, vocab_size=vocab)
        th = _int(tcfg, "hidden_size")
        want = _int(dcfg, "target_hidden_size") or _int(dcfg, "hidden_size")
        if th is not None and want != th:
            yield finding("compat.hidden-size", Severity.HIGH,
                          "head hidden size (or target_hidden_size) differs from the target",
                          "config.json", target=th, head=want)
        layers = _int(tcfg, "num_hidden_layers")
        aux = _dict(dcfg.get("eagle_config")).get("eagle_aux_hidden_state_layer_ids") or []
        if layers is not None and (not isinstance(aux, list) or any(
                type(i) is not int or not 0 <= i < layers for i in aux)):
            yield finding("compat.aux-layers", Severity.HIGH,
                          "aux hidden-state layer id beyond the target's layers", "config.json",
                          ids=aux, target_layers=layers)
        verifier = _dict(_dict(dcfg.get("speculators_config")).get("verifier")).get(
            "name_or_path")
        if isinstance(verifier, str) and target.repo and verifier != target.repo:
            yield finding("compat.verifier", Severity.MEDIUM,
                          f"head was trained for {verifier}, target is {target.repo}",
                          "config.json")
        if vocab is not None and dvocab is not None:
            yield from self._d2t(ctx, draft, vocab, dvocab)

    def _d2t(self, ctx: CheckContext, draft: ArtifactTree, vocab: int,
             dvocab: int) -> Iterator[Finding]:
        tensors = _headers(ctx, draft)
        if "d2t" not in tensors:
            if dvocab < vocab:
                yield finding("compat.d2t", Severity.HIGH,
                              "draft_vocab_size < vocab_size but no d2t tensor", None)
            return
        f, hdr = tensors["d2t"]
        t = hdr.tensors["d2t"]
        if max(dvocab, vocab) > ctx.options.max_vocab:
            yield finding("compat.d2t", Severity.HIGH,
                          f"vocabulary of {max(dvocab, vocab)} entries: too large to analyse "
                          f"(limit {ctx.options.max_vocab})", f.rel)
            return
        if t.dtype != "I64" or t.shape != (dvocab,):
            yield finding("compat.d2t", Severity.HIGH, "d2t must be int64 [draft_vocab_size]",
                          f.rel, dtype=t.dtype, shape=list(t.shape), draft_vocab_size=dvocab)
            return
        d2t = np.frombuffer(tensor_bytes(f.path, hdr, "d2t"), dtype="<i8")
        ids = np.arange(dvocab, dtype=np.int64) + d2t
        bad = np.flatnonzero((ids < 0) | (ids >= vocab))
        if bad.size:
            yield finding("compat.d2t", Severity.HIGH, "d2t maps outside the target vocabulary",
                          f.rel, first_index=int(bad[0]), target_id=int(ids[bad[0]]))
        elif dvocab > 1 and not bool(np.all(np.diff(ids) > 0)):
            yield finding("compat.d2t", Severity.HIGH,
                          "d2t is not strictly increasing (not injective)", f.rel)
        if "t2d" in tensors:
            tf, thdr = tensors["t2d"]
            tt = thdr.tensors["t2d"]
            mask = np.frombuffer(tensor_bytes(tf.path, thdr, "t2d"), dtype=np.uint8) \
                if tt.dtype == "BOOL" and tt.shape == (vocab,) else None
            if mask is None or int(np.count_nonzero(mask)) != dvocab or (
                    not bad.size and not bool(np.all(mask[ids] != 0))):
                yield finding("compat.t2d", Severity.MEDIUM,
                              "t2d is not bool [vocab_size] consistent with d2t", tf.rel)

    def _mtp(self, ctx: CheckContext, target: ArtifactTree) -> Iterator[Finding]:
        cfg = _config(ctx, target)
        n = next((v for k in _MTP_KEYS if (v := _int(cfg, k))), None)
        layers = _int(cfg, "num_hidden_layers")
        if not cfg:
            g = _gguf(ctx, target)
            arch = g[1].kv.get("general.architecture") if g else None
            nk = g[1].kv.get(f"{arch}.nextn_predict_layers") if g else None
            if type(nk) is not int or nk < 1:
                yield finding("compat.mtp-missing", Severity.HIGH,
                              "method mtp but the target GGUF declares no MTP layers", None)
            return
        if not n or not 0 < n <= _MAX_MTP_LAYERS:
            yield finding("compat.mtp-missing", Severity.HIGH,
                          "method mtp but the target config declares no (plausible) MTP layers "
                          f"({', '.join(_MTP_KEYS)})", "config.json", declared=n)
            return
        names = set(_headers(ctx, target))
        prefixes = [f"model.layers.{(layers or 0) + k}." for k in range(n)]
        have = [p for p in prefixes if any(x.startswith(p) for x in names)]
        mtp_prefixed = any(x.startswith(("mtp.", "model.mtp.")) for x in names)
        if not mtp_prefixed and (layers is None or len(have) < n):
            missing = [p for p in prefixes if p not in have]
            yield finding("compat.mtp-missing", Severity.HIGH,
                          f"config declares {n} MTP layers but their weights are missing",
                          "config.json", missing=", ".join(missing)[:300])
