"""Every rendered SGLang command, for each algorithm, through SGLang 0.5.23's own parser.

``prepare_server_args`` + ``ServerArgs.resolve_once`` with ``--device cuda`` (what a GPU node
resolves; no GPU is needed to resolve) run in ``.venv-sglang``; what SGLang resolves (the
tree in force, adaptive, the overlap scheduler, attention DP, max running requests, silent
fallbacks) is compared with the spec, what render emits and what lint says. Skips without
the venv.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from specbundle.bundle import read_unsigned
from specbundle.mirror import Mirror
from specbundle.record import BundleRecord
from specbundle.render import build_serve_command, lint_bundle
from specbundle.render.rules_sglang import ngram_tree
from specbundle.spec import dump_spec, parse_spec
from tests._sglang import needs_sglang, resolve
from tests.lib.bundles import DRAFT_COMMIT, TARGET_COMMIT, make_artifact
from tests.lib.specs import spec_dict

pytestmark = needs_sglang

_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 4, "vocab_size": 256, "max_position_embeddings": 512,
          "torch_dtype": "float32"}
_ONLY = {"engines.vllm": None, "engines.llamacpp": None, "target.gguf_file": None,
         "draft.gguf_file": None}
_NO_DRAFT = {"draft": None}
_DRAFT_CFG = "_draft_config"  # a case's draft config.json, when not the llama one
_GEMMA4 = {"architectures": ["Gemma4AssistantForCausalLM"], "model_type": "gemma4_assistant",
           "text_config": {"model_type": "gemma4_text", "hidden_size": 64,
                           "num_attention_heads": 4, "num_hidden_layers": 1,
                           "num_key_value_heads": 4, "vocab_size": 256,
                           "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0}}

#: case -> (spec changes, speculation)
CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "standalone": ({}, True),
    "baseline": ({}, False),
    "eagle": ({"speculative.method": "eagle", "speculative.num_speculative_tokens": 3}, True),
    "eagle3": ({"speculative.method": "eagle3", "speculative.num_speculative_tokens": 2}, True),
    "eagle-tree-topk4": ({"speculative.method": "eagle",
                          "engines.sglang.speculative_num_steps": 5,
                          "engines.sglang.speculative_eagle_topk": 4,
                          "engines.sglang.speculative_num_draft_tokens": 8}, True),
    "eagle3-adaptive": ({"speculative.method": "eagle3", "speculative.num_speculative_tokens": 3,
                         "engines.sglang.speculative_adaptive": True}, True),
    "eagle3-adaptive-multilayer": ({"speculative.method": "eagle3",
                                    "speculative.num_speculative_tokens": 3,
                                    "engines.sglang.speculative_adaptive": True,
                                    "engines.sglang.extra_args": ["--enable-multi-layer-eagle"]},
                                   True),
    "eagle3-adaptive-tree4": ({"speculative.method": "eagle3",
                               "engines.sglang.speculative_adaptive": True,
                               "engines.sglang.speculative_num_steps": 4,
                               "engines.sglang.speculative_eagle_topk": 1,
                               "engines.sglang.speculative_num_draft_tokens": 5}, True),
    "eagle3-adaptive-tree3": ({"speculative.method": "eagle3",
                               "engines.sglang.speculative_adaptive": True,
                               "engines.sglang.speculative_num_steps": 3,
                               "engines.sglang.speculative_eagle_topk": 1,
                               "engines.sglang.speculative_num_draft_tokens": 4}, True),
    "mtp-adaptive": ({**_NO_DRAFT, "speculative.method": "mtp",
                      "engines.sglang.speculative_adaptive": True}, True),
    "eagle-adaptive-dp": ({"speculative.method": "eagle", "speculative.num_speculative_tokens": 2,
                           "engines.sglang.speculative_adaptive": True,
                           "engines.sglang.enable_dp_attention": True,
                           "engines.sglang.dp_size": 2, "engines.sglang.tp_size": 2,
                           "deployment.gpus": 2}, True),
    "ngram": ({**_NO_DRAFT, "speculative.method": "ngram"}, True),
    "eagle-gemma4-assistant": ({"speculative.method": "eagle", _DRAFT_CFG: _GEMMA4}, True),
    "eagle3-gemma4-assistant": ({"speculative.method": "eagle3", _DRAFT_CFG: _GEMMA4}, True),
    "dflash": ({"speculative.method": "dflash"}, True),
    "dspark": ({"speculative.method": "dspark", "speculative.num_speculative_tokens": 3}, True),
    "dflash-dp": ({"speculative.method": "dflash", "engines.sglang.enable_dp_attention": True,
                   "engines.sglang.dp_size": 2, "engines.sglang.tp_size": 2,
                   "deployment.gpus": 2}, True),
    "cuda-graph-split": ({"engines.sglang.extra_args": ["--cuda-graph-max-bs-decode", "8"]},
                         True),
    "cuda-graph-old": ({"engines.sglang.extra_args": ["--cuda-graph-max-bs", "8"]}, True),
    "skip-dp-mlp-sync": ({"engines.sglang.extra_args": ["--speculative-skip-dp-mlp-sync"]},
                         True),
}


def _bundle(mirror: Mirror, name: str, changes: dict[str, Any]) -> BundleRecord:
    changes = dict(changes)
    draft_cfg = json.dumps(changes.pop(_DRAFT_CFG, _LLAMA)).encode()
    spec = parse_spec(spec_dict(**{**_ONLY, "metadata.name": name, **changes}))
    cfg = json.dumps(_LLAMA).encode()
    target = make_artifact(mirror, "target", spec.target.repo, TARGET_COMMIT,
                           {"config.json": cfg, "model.safetensors": b"t"})
    draft = None
    if spec.draft is not None:
        draft = make_artifact(mirror, "draft", spec.draft.repo, DRAFT_COMMIT,
                              {"config.json": draft_cfg, "model.safetensors": b"d"})
    rec = BundleRecord(name=spec.name, spec=dump_spec(spec), target=target, draft=draft,
                       created="2026-11-29T00:00:00Z", tool_version="0.1.0")
    with mirror.lock():
        mirror.save_bundle(rec)
    return rec


@pytest.fixture(scope="module")
def verdicts(module_tmp: Path) -> dict[str, Any]:
    """Every case rendered, linted, and resolved by SGLang in one subprocess."""
    mirror = Mirror.open(module_tmp / "mirror", create=True)
    argvs, lints = {}, {}
    for i, (case, (changes, spec_arm)) in enumerate(CASES.items()):
        rec = _bundle(mirror, f"pair-{i}", changes)  # no method word in the path
        argvs[case] = build_serve_command(rec, "sglang", mirror=mirror,
                                          speculation=spec_arm).argv
        lints[case] = lint_bundle(read_unsigned(mirror, rec.name), engine="sglang")
    got = resolve(list(argvs.values()))
    return {c: (argvs[c], lints[c], r) for c, r in zip(argvs, got, strict=True)}


def _tree(r: dict[str, Any]) -> tuple[int, int, int]:
    d = r["resolved"]
    return (d["speculative_num_steps"], d["speculative_eagle_topk"],
            d["speculative_num_draft_tokens"])


def _rules(lint: Any) -> set[tuple[str, str]]:
    return {(f.rule, f.severity) for f in lint.findings}


def test_it_is_the_pinned_release(verdicts: dict[str, Any]) -> None:
    assert {r["version"] for _, _, r in verdicts.values()} == {"0.5.23"}


@pytest.mark.parametrize(("case", "tree"), [
    ("standalone", (4, 1, 5)), ("eagle", (3, 1, 4)), ("eagle3", (2, 1, 3)),
    ("eagle-tree-topk4", (5, 4, 8)),
])
def test_sglang_resolves_the_tree_render_pinned(verdicts: dict[str, Any], case: str,
                                                tree: tuple[int, int, int]) -> None:
    _, lint, r = verdicts[case]
    assert "error" not in r, r.get("error")
    assert _tree(r) == tree
    assert r["resolved"]["max_running_requests"] == 64  # pinned, not SGLang's silent 48
    assert lint.ok, lint.errors  # topk 4 with the overlap scheduler is not a lint error


def test_baseline_arm_has_no_speculation(verdicts: dict[str, Any]) -> None:
    _, _, r = verdicts["baseline"]
    assert "error" not in r, r.get("error")
    assert r["resolved"]["speculative_algorithm"] is None
    assert r["resolved"]["max_running_requests"] == 64


def test_adaptive_resolves_and_its_silent_fallback_is_warned(verdicts: dict[str, Any]) -> None:
    _, lint, r = verdicts["eagle3-adaptive"]
    assert "error" not in r, r.get("error")
    assert r["resolved"]["speculative_adaptive"] is True
    assert not any("speculative_adaptive disabled" in w for w in r["warnings"])
    # lint says what runs instead of K=3: SGLang's starting steps among the candidates
    assert _tree(r) == (3, 1, 4)
    assert ("sglang-adaptive-steps", "warning") in _rules(lint)
    _, lint, r = verdicts["eagle3-adaptive-multilayer"]
    assert any("speculative_adaptive disabled" in w and "multi_layer" in w
               for w in r["warnings"]), r
    assert ("sglang-adaptive-disabled", "warning") in _rules(lint)


def test_adaptive_with_an_explicit_tree_outside_the_candidates_is_refused_by_both(
        verdicts: dict[str, Any]) -> None:
    _, lint, r = verdicts["eagle3-adaptive-tree4"]
    assert "--speculative-num-steps=4 is not in the adaptive config candidate_steps" \
        in r.get("error", ""), r
    assert ("sglang-adaptive-steps", "error") in _rules(lint)
    _, lint, r = verdicts["eagle3-adaptive-tree3"]
    assert "error" not in r, r.get("error")
    assert r["resolved"]["speculative_adaptive"] is True and _tree(r) == (3, 1, 4)
    assert lint.ok and not {x for x, _ in _rules(lint)} & {"sglang-adaptive-steps"}


def test_mtp_with_adaptive_is_not_blocked(verdicts: dict[str, Any]) -> None:
    """0.5.23 turns NEXTN into EAGLE before it checks adaptive."""
    _, lint, r = verdicts["mtp-adaptive"]
    assert "error" not in r, r.get("error")
    assert r["resolved"]["speculative_algorithm"] == "EAGLE"
    assert r["resolved"]["speculative_adaptive"] is True
    assert lint.ok, lint.errors
    assert "sglang-adaptive-unsupported" not in {x for x, _ in _rules(lint)}


def test_where_adaptive_is_dropped_the_spec_chain_runs_not_sglangs_tree(
        verdicts: dict[str, Any]) -> None:
    """Without the pinned chain SGLang auto-chooses (5, 4, 8) for Llama under attention DP."""
    for case, k in (("eagle-adaptive-dp", 2), ("eagle3-adaptive-multilayer", 3)):
        _, lint, r = verdicts[case]
        assert "error" not in r, (case, r.get("error"))
        assert r["resolved"]["speculative_adaptive"] is False
        assert _tree(r) == (k, 1, k + 1), case
        msg = [f.message for f in lint.findings if f.rule == "sglang-adaptive-disabled"]
        assert msg and f"({k} steps, topk 1" in msg[0], case
    argv, _, r = verdicts["eagle-adaptive-dp"]
    assert r["resolved"]["attn_dp_size"] == 2 and r["resolved"]["dp_size"] == 1
    assert "--enable-dp-attention" not in argv  # deprecated in 0.5.23: --attn-dp-size
    assert not any("dp_attention" in w or "dp-attention" in w for w in r["warnings"]), r


def test_resolved_overlap_scheduler_matches_the_spec(verdicts: dict[str, Any]) -> None:
    """On CUDA the overlap scheduler stays on with every rendered chain (the CPU path turned
    it off, so the old oracle could not see this)."""
    for case, (_, spec_arm) in CASES.items():
        _, _, r = verdicts[case]
        if "error" in r or not spec_arm:
            continue
        assert r["resolved"]["device"] == "cuda"
        assert r["resolved"]["disable_overlap_schedule"] is False, case


def test_ngram_forces_its_own_tree_and_lint_says_which(verdicts: dict[str, Any]) -> None:
    argv, lint, r = verdicts["ngram"]
    assert "error" not in r, r.get("error")
    assert _tree(r) == ngram_tree(argv) == (1, 10, 12)  # whatever K=4 the spec asked for
    msg = [f.message for f in lint.findings if f.rule == "sglang-ngram-forced-tree"]
    assert msg and "topk=10" in msg[0] and "12 draft tokens" in msg[0]


def test_dflash_resolves_on_cuda_with_the_stated_width(verdicts: dict[str, Any]) -> None:
    """DFLASH is CUDA/NPU/XPU only; on CUDA it resolves with the width render states (K+1),
    not one taken silently from the draft's block size."""
    argv, lint, r = verdicts["dflash"]
    assert "error" not in r, r.get("error")
    assert _tree(r) == (1, 1, 5)
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "5"
    assert lint.ok


def test_dspark_resolves_on_cuda_with_the_specs_gamma(verdicts: dict[str, Any]) -> None:
    """DSPARK takes gamma = K from the rendered block size (not the draft's config or its
    default) and verifies gamma + 1 tokens as a chain; lint has nothing to say."""
    argv, lint, r = verdicts["dspark"]
    if re.fullmatch(r"ModuleNotFoundError: No module named '(openai|partial_json_parser|einops)'",
                    r.get("error", "")):
        pytest.skip(f"{r['error']}: the SGLang venv predates DSPARK's imports "
                    "(rerun ci/install-sglang.sh)")
    assert "error" not in r, r.get("error")
    assert r["resolved"]["speculative_algorithm"] == "DSPARK"
    assert _tree(r) == (1, 1, 4)
    assert argv[argv.index("--speculative-dspark-block-size") + 1] == "3"
    assert lint.ok, lint.findings


def test_a_gemma4_assistant_draft_runs_as_frozen_kv_mtp_and_lint_says_so(
        verdicts: dict[str, Any]) -> None:
    """SGLang promotes EAGLE to FROZEN_KV_MTP for this draft (silently, at info level) and
    refuses EAGLE3: lint warns of the first and blocks the second."""
    _, lint, r = verdicts["eagle-gemma4-assistant"]
    assert "error" not in r, r.get("error")
    assert r["resolved"]["speculative_algorithm"] == "FROZEN_KV_MTP"
    assert ("sglang-frozen-kv-mtp", "warning") in _rules(lint)
    _, lint, r = verdicts["eagle3-gemma4-assistant"]
    assert "EAGLE3 is not supported" in r["error"]
    assert ("sglang-frozen-kv-mtp", "error") in _rules(lint)


def test_dflash_with_attention_dp_is_allowed_with_the_dp_lm_head(
        verdicts: dict[str, Any]) -> None:
    argv, lint, r = verdicts["dflash-dp"]
    assert "--enable-dp-lm-head" in argv
    assert "error" not in r, r.get("error")
    assert r["resolved"]["attn_dp_size"] == 2 and r["resolved"]["enable_dp_lm_head"] is True
    assert lint.ok, lint.errors
    no_head = [a for a in argv[3:] if a != "--enable-dp-lm-head"]
    (refused,) = resolve([[*argv[:3], *no_head]])
    assert "requires --enable-dp-lm-head" in refused.get("error", ""), refused


def test_removed_flags_are_refused_by_sglang_and_by_lint(verdicts: dict[str, Any]) -> None:
    for case in ("cuda-graph-old", "skip-dp-mlp-sync"):
        _, lint, r = verdicts[case]
        assert r.get("error", "").startswith("argparse"), (case, r)
        assert ("sglang-removed-flag", "error") in _rules(lint)
    _, lint, r = verdicts["cuda-graph-split"]
    assert "error" not in r, r.get("error")
    assert lint.ok


def test_feature_table_row_matches_the_installed_release(verdicts: dict[str, Any]) -> None:
    """The 0.5.23 row of the version table, checked against the installed sources."""
    from specbundle.render.sglang_versions import DEFAULT_VERSION, FEATURES
    from tests._sglang import VENV

    assert DEFAULT_VERSION == "0.5.23" and FEATURES["0.5.23"] == frozenset(
        {"dflash", "dspark", "adaptive", "meta-counts", "retract-counter", "cuda-graph-split",
         "attn-dp-size"})
    src = next(VENV.glob("lib/python3*/site-packages/sglang/srt"))
    assert "spec_num_proposed_drafts" in (src / "managers/tokenizer_manager.py").read_text()
    collector = (src / "observability/metrics_collector.py").read_text()
    assert '"sglang:num_retracted_requests_total"' in collector
    assert "error" not in verdicts["eagle3-adaptive"][2]  # adaptive: parsed and resolved
    assert "error" not in verdicts["cuda-graph-split"][2]  # the split flag exists
    assert verdicts["dflash"][2]["resolved"]["speculative_algorithm"] == "DFLASH"


def test_transcribed_flag_table_is_a_subset_of_the_real_parser() -> None:
    """The table lint falls back on (SGLang absent) names only flags 0.5.23 has."""
    from specbundle.render.argrules import SGLANG_FLAGS
    from tests._sglang import flags

    real = flags()
    ours = {n for k, r in SGLANG_FLAGS.items() for n in (k, *r.aliases)}
    assert ours - set(real) == set()
    assert not {"--cuda-graph-max-bs", "--speculative-skip-dp-mlp-sync"} & set(real)
    # value kinds agree where SGLang's parser types them; it parses some values itself
    # ("str" there: --context-length takes "128k", algorithms come from a plugin registry)
    wrong = {k: (r.kind, real[k]) for k, r in SGLANG_FLAGS.items()
             if (r.kind == "bool") != (real[k] == "bool")
             or (real[k] in ("int", "float") and r.kind != real[k])}
    assert wrong == {}


def test_transcribed_choices_and_negations_are_the_real_parsers() -> None:
    """Flags with argparse choices carry exactly SGLang's choices; no ``--no-<flag>`` form is
    accepted that 0.5.23 does not have (its booleans are store_true)."""
    from specbundle.render.argrules import SGLANG_FLAGS, canonical_flag
    from tests._sglang import choices, flags

    real, real_choices = flags(), choices()
    for k, r in SGLANG_FLAGS.items():
        if k in real_choices:
            assert r.kind == "choice" and list(r.choices) == real_choices[k], k
        if r.kind == "bool":
            negated = "--no-" + k[2:]
            assert (canonical_flag(negated, SGLANG_FLAGS) is not None) == (negated in real), k
