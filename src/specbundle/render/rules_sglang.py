"""SGLang lint rules tied to a release: image features, NGRAM's forced tree, removed flags.

Facts are from the released sources of SGLang 0.5.23 and 0.5.4 (``arg_groups/
speculative_hook.py``, ``speculative/adaptive_spec_params.py``, ``arg_groups/fields``);
the tests hold the 0.5.23 ones against SGLang's own ``ServerArgs`` resolution.
"""

from __future__ import annotations

from collections.abc import Iterator

from specbundle.render.lint import Finding, LintInput, Rule, finding
from specbundle.render.rules_cmd import flag_value as _value
from specbundle.render.sglang import ADAPTIVE_CANDIDATE_STEPS, ALGORITHMS, adaptive_dropped
from specbundle.render.sglang_versions import FEATURE_TEXT, FEATURES, has_feature, image_version
from specbundle.spec import EngineName, SpecMethod

__all__ = ["SGLANG_RULES", "ngram_tree"]

S = EngineName.SGLANG
#: Flags 0.5.23's parser refuses (argparse error: the server does not start).
_REMOVED = {
    "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode and --cuda-graph-max-bs-prefill",
    "--speculative-skip-dp-mlp-sync": "nothing (the flag does not exist)",
}
_NGRAM_BREADTH, _NGRAM_DRAFT_TOKENS = 10, 12  # _handle_ngram defaults in 0.5.23


def _int(argv: tuple[str, ...], flag: str) -> int | None:
    v = _value(argv, flag)
    return int(v) if v is not None and v.isdigit() else None


def ngram_tree(argv: tuple[str, ...]) -> tuple[int, int, int]:
    """(steps, topk, draft_tokens) SGLang 0.5.23 resolves for NGRAM from a command line.

    ``_handle_ngram`` sets topk := ``--speculative-ngram-max-bfs-breadth`` (10) whatever
    ``--speculative-eagle-topk`` says, draft tokens := 12 when unset, steps := tokens // topk
    when unset.
    """
    topk = _int(argv, "--speculative-ngram-max-bfs-breadth") or _NGRAM_BREADTH
    tokens = _int(argv, "--speculative-num-draft-tokens") or _NGRAM_DRAFT_TOKENS
    steps = _int(argv, "--speculative-num-steps")
    return (steps if steps is not None else tokens // topk, topk, tokens)


def _image_features(inp: LintInput) -> Iterator[Finding]:
    """The image's SGLang release must have every feature the command renders or the bench reads."""
    s = inp.spec.engines.sglang
    if s is None or S not in inp.commands:
        return
    version = image_version(inp.commands[S].image) or image_version(s.image)
    where = "engines.sglang.image"
    if version is None or version not in FEATURES:
        known = ", ".join(FEATURES)
        yield finding("sglang-image-version", "warning", where,
                      f"cannot tell which SGLang release {s.image!r} is (known: {known}), so "
                      "lint cannot check that it has DFLASH, --speculative-adaptive and the "
                      "meta_info acceptance counts the benchmark needs.",
                      "use a versioned tag such as lmsysorg/sglang:v0.5.23 (plus @sha256:...)",
                      S)
        return
    argv = inp.argv(S)
    needed = []
    algo = _value(argv, "--speculative-algorithm")
    if algo in ("DFLASH", "DSPARK"):
        needed.append(algo.lower())
    if "--speculative-adaptive" in argv:
        needed.append("adaptive")
    if any(a.split("=", 1)[0].startswith("--cuda-graph-max-bs-") for a in argv):
        needed.append("cuda-graph-split")
    for feat in needed:
        if not has_feature(version, feat):
            yield finding("sglang-image-version", "error", where,
                          f"SGLang {version} has no {FEATURE_TEXT[feat]}, which the rendered "
                          "command uses: it refuses to start.",
                          "use lmsysorg/sglang:v0.5.23 or newer", S)
    if inp.spec.speculative.method in ALGORITHMS and not has_feature(version, "meta-counts"):
        yield finding("sglang-image-version", "warning", where,
                      f"SGLang {version} reports no {FEATURE_TEXT['meta-counts']}, so every "
                      "benchmark window is unmeasured and admission refuses the bundle.",
                      "use lmsysorg/sglang:v0.5.23 or newer", S)


def _ngram_forced_tree(inp: LintInput) -> Iterator[Finding]:
    """NGRAM ignores the spec's K: topk = BFS breadth, 12 draft tokens, steps = tokens // topk."""
    if inp.spec.speculative.method != SpecMethod.NGRAM or S not in inp.commands:
        return
    argv = inp.argv(S)
    steps, topk, tokens = ngram_tree(argv)
    k = inp.spec.speculative.num_speculative_tokens
    asked = _int(argv, "--speculative-eagle-topk")
    extra = f" (--speculative-eagle-topk {asked} is overridden)" if asked not in (None, topk) \
        else ""
    yield finding("sglang-ngram-forced-tree", "warning", "speculative.num_speculative_tokens",
                  f"SGLang NGRAM does not take num_speculative_tokens={k}: it runs topk={topk} "
                  f"(the BFS breadth), {tokens} draft tokens and {steps} step(s){extra}; the "
                  f"benchmark reports the K in force ({tokens - 1} drafts per verify step).",
                  "set --speculative-num-draft-tokens / --speculative-ngram-max-bfs-breadth in "
                  "extra_args to size the tree, or accept these values", S)


def _adaptive_disabled(inp: LintInput) -> Iterator[Finding]:
    """0.5.23 silently drops ``--speculative-adaptive`` with attention DP, multi-layer EAGLE,
    two-batch overlap or PD multiplexing; render then pins the spec's chain, since SGLang
    would otherwise auto-choose a tree (topk 4 for Llama) and the benchmark measure that."""
    s = inp.spec.engines.sglang
    argv = inp.argv(S)
    if s is None or "--speculative-adaptive" not in argv:
        return
    k = inp.spec.speculative.num_speculative_tokens
    for r in adaptive_dropped(inp.spec, s):
        if r.startswith(("algorithm", "topk")):
            continue  # sglang-adaptive-unsupported: an error
        yield finding("sglang-adaptive-disabled", "warning", "engines.sglang.speculative_adaptive",
                      f"--speculative-adaptive is silently disabled with {r}; render pins the "
                      f"static chain ({k} steps, topk 1, {k + 1} draft tokens) so SGLang does "
                      "not choose its own tree.",
                      "turn that option off, or speculative_adaptive off", S)


def _adaptive_steps(inp: LintInput) -> Iterator[Finding]:
    """With adaptive in force SGLang picks steps among the config's candidate_steps; an
    explicit ``--speculative-num-steps`` outside them is refused at startup."""
    s = inp.spec.engines.sglang
    argv = inp.argv(S)
    if s is None or "--speculative-adaptive" not in argv or adaptive_dropped(inp.spec, s):
        return
    where = "engines.sglang.speculative_adaptive"
    cands = list(ADAPTIVE_CANDIDATE_STEPS)
    steps = _int(argv, "--speculative-num-steps")
    if _value(argv, "--speculative-adaptive-config") is not None:
        yield finding("sglang-adaptive-steps", "warning", where,
                      "--speculative-adaptive-config names the candidate steps, which lint "
                      "cannot read; SGLang refuses a --speculative-num-steps outside them.",
                      "check the steps against the config's candidate_steps", S)
    elif steps is not None and steps not in cands:
        yield finding("sglang-adaptive-steps", "error", "engines.sglang.speculative_num_steps",
                      f"SGLang 0.5.23 refuses it at startup: --speculative-num-steps={steps} "
                      f"is not in the adaptive config candidate_steps {cands}.",
                      f"set speculative_num_steps to one of {cands} (with topk 1 and steps+1 "
                      "draft tokens), or leave the tree unset", S)
    elif steps is None:
        k = inp.spec.speculative.num_speculative_tokens
        mid = cands[len(cands) // 2]
        yield finding("sglang-adaptive-steps", "warning", "speculative.num_speculative_tokens",
                      f"with --speculative-adaptive SGLang starts at {mid} steps (topk 1) and "
                      f"moves among {cands} by batch size; num_speculative_tokens={k} is not "
                      "what runs, and the benchmark reports the adaptive chain's acceptance.",
                      f"pin speculative_num_steps to one of {cands} to choose the start", S)


def _dflash_width(inp: LintInput) -> Iterator[Finding]:
    """DFLASH verifies ``--speculative-num-draft-tokens`` positions; a draft trained for
    another block size still loads (SGLang only logs a mismatch) and accepts less."""
    if S not in inp.commands or inp.spec.speculative.method != SpecMethod.DFLASH:
        return
    argv = inp.argv(S)
    width = _int(argv, "--speculative-dflash-block-size") \
        or _int(argv, "--speculative-num-draft-tokens")
    cfg = inp.draft_config or {}
    nested = cfg.get("dflash_config")
    block = (nested.get("block_size") if isinstance(nested, dict) else None) \
        or cfg.get("block_size")
    if width is not None and isinstance(block, int) and block != width:
        yield finding("sglang-dflash-width", "warning", "speculative.num_speculative_tokens",
                      f"DFLASH verifies {width} positions (num_speculative_tokens + 1) but the "
                      f"draft was trained with block_size {block}; SGLang only logs 'DFLASH "
                      "block size mismatch' and acceptance drops.",
                      f"set speculative.num_speculative_tokens to {block - 1}", S)


def _removed_flags(inp: LintInput) -> Iterator[Finding]:
    """Flags SGLang 0.5.23 does not have: argparse refuses them and the server never starts;
    deprecated ones still start but are due for removal."""
    s = inp.spec.engines.sglang
    for a in inp.argv(S):
        name = a.split("=", 1)[0]
        if name in _REMOVED:
            yield finding("sglang-removed-flag", "error", f"argv: {name}",
                          f"SGLang 0.5.23 has no {name}; it refuses to start.",
                          f"use {_REMOVED[name]}", S)
    for a in s.extra_args if s is not None else ():
        if a.split("=", 1)[0] == "--enable-dp-attention":
            yield finding("sglang-removed-flag", "warning", "engines.sglang.extra_args",
                          "--enable-dp-attention is deprecated in SGLang 0.5.23 (removal due "
                          "after 2026-12-31): --dp-size N with it means --attn-dp-size N.",
                          "set engines.sglang.enable_dp_attention: render writes "
                          "--attn-dp-size", S)


#: Draft architectures ``_resolve_speculative_algorithm_alias`` (0.5.23) turns EAGLE/NEXTN into
#: FROZEN_KV_MTP for, and refuses EAGLE3 with.
_GEMMA4_ASSISTANT = ("Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM")


def _frozen_kv_mtp(inp: LintInput) -> Iterator[Finding]:
    """A Gemma4 assistant draft: SGLang runs FROZEN_KV_MTP for EAGLE, refuses EAGLE3."""
    archs = (inp.draft_config or {}).get("architectures") or []
    if S not in inp.commands or not any(a in _GEMMA4_ASSISTANT for a in archs):
        return
    algo = _value(inp.argv(S), "--speculative-algorithm")
    if algo == "EAGLE3":
        yield finding("sglang-frozen-kv-mtp", "error", "speculative.method",
                      f"the draft is a Gemma4 assistant ({archs}); SGLang 0.5.23 refuses it "
                      "with EAGLE3 at startup.", "set speculative.method: eagle", S)
    elif algo in ("EAGLE", "NEXTN"):
        yield finding("sglang-frozen-kv-mtp", "warning", "speculative.method",
                      f"the draft is a Gemma4 assistant ({archs}); SGLang 0.5.23 runs it as "
                      "FROZEN_KV_MTP (drafting over the target's frozen KV), not EAGLE: the "
                      "benchmark measures that algorithm.",
                      "benchmark on SGLang before admitting; vLLM names it gemma4_mtp (mtp)", S)


SGLANG_RULES: dict[str, Rule] = {
    "sglang-frozen-kv-mtp": _frozen_kv_mtp,
    "sglang-image-version": _image_features,
    "sglang-ngram-forced-tree": _ngram_forced_tree,
    "sglang-adaptive-disabled": _adaptive_disabled,
    "sglang-adaptive-steps": _adaptive_steps,
    "sglang-dflash-width": _dflash_width,
    "sglang-removed-flag": _removed_flags,
}
