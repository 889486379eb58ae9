"""SGLang lint rules tied to a release: image features, NGRAM's forced tree, removed flags.

Facts are from the released sources of SGLang 0.5.23 and 0.5.4 (``arg_groups/
speculative_hook.py``, ``speculative/adaptive_spec_params.py``, ``arg_groups/fields``);
the tests hold the 0.5.23 ones against SGLang's own ``ServerArgs`` resolution.
"""

from __future__ import annotations

from collections.abc import Iterator

from specbundle.render.lint import Finding, LintInput, Rule, finding
from specbundle.render.rules_cmd import flag_value as _value
from specbundle.render.sglang import ALGORITHMS
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


def image_features(inp: LintInput) -> Iterator[Finding]:
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
    if _value(argv, "--speculative-algorithm") == "DFLASH":
        needed.append("dflash")
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


def ngram_forced_tree(inp: LintInput) -> Iterator[Finding]:
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


def adaptive_disabled(inp: LintInput) -> Iterator[Finding]:
    """0.5.23 silently drops ``--speculative-adaptive`` with attention DP, multi-layer EAGLE
    or two-batch overlap."""
    s = inp.spec.engines.sglang
    argv = inp.argv(S)
    if s is None or "--speculative-adaptive" not in argv:
        return
    reasons = []
    if s.enable_dp_attention or "--enable-dp-attention" in argv \
            or (_int(argv, "--attn-dp-size") or 1) > 1:
        reasons.append("attention DP (tier decisions are not synchronised across DP ranks)")
    if "--enable-multi-layer-eagle" in argv:
        reasons.append("--enable-multi-layer-eagle (MultiLayerEagleWorkerV2 has no adaptive)")
    if "--enable-two-batch-overlap" in argv:
        reasons.append("--enable-two-batch-overlap (the state swap drops the TBO backend)")
    for r in reasons:
        yield finding("sglang-adaptive-disabled", "warning", "engines.sglang.speculative_adaptive",
                      f"--speculative-adaptive is silently disabled with {r}; SGLang falls back "
                      "to the static tree.",
                      "turn that option off, or speculative_adaptive off", S)


def removed_flags(inp: LintInput) -> Iterator[Finding]:
    """Flags SGLang 0.5.23 does not have: argparse refuses them and the server never starts."""
    for a in inp.argv(S):
        name = a.split("=", 1)[0]
        if name in _REMOVED:
            yield finding("sglang-removed-flag", "error", f"argv: {name}",
                          f"SGLang 0.5.23 has no {name}; it refuses to start.",
                          f"use {_REMOVED[name]}", S)


SGLANG_RULES: dict[str, Rule] = {
    "sglang-image-version": image_features,
    "sglang-ngram-forced-tree": ngram_forced_tree,
    "sglang-adaptive-disabled": adaptive_disabled,
    "sglang-removed-flag": removed_flags,
}
