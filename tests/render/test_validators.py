"""Every rendered vLLM/SGLang flag and speculative-config key passes the engines' argument
rules; llama.cpp flags pass the real binary's ``--help``. A typo must fail the validator."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specbundle.mirror import Mirror
from specbundle.render import build_serve_command
from tests.lib.bundles import BundleFactory
from tests.render._argcheck import (
    ArgCheckError,
    check_llamacpp,
    check_sglang,
    check_spec_config,
    check_vllm,
)

_NO_LLAMA = {"engines.llamacpp": None, "target.gguf_file": None}

VARIANTS: dict[str, dict[str, Any]] = {
    "draft_model": {},
    "eagle3-schedule": {
        **_NO_LLAMA, "draft.gguf_file": None, "speculative.method": "eagle3",
        "speculative.num_speculative_tokens": 4, "speculative.draft_tensor_parallel_size": 1,
        "speculative.schedule": [[1, 16, 4], [17, 64, 2], [65, 1024, 0]],
        "engines.vllm.tensor_parallel_size": 2, "engines.sglang.tp_size": 2,
        "deployment.gpus": 2,
    },
    "mtp": {**_NO_LLAMA, "draft": None, "speculative.method": "mtp",
            "speculative.num_speculative_tokens": 1},
    "ngram": {**_NO_LLAMA, "draft": None, "engines.sglang": None, "speculative.method": "ngram",
              "engines.vllm.speculative_extra": {"prompt_lookup_max": 4,
                                                 "prompt_lookup_min": 2}},
    "dflash": {**_NO_LLAMA, "draft.gguf_file": None, "speculative.method": "dflash"},
    "eagle-tree": {
        **_NO_LLAMA, "draft.gguf_file": None, "speculative.method": "eagle",
        "engines.sglang.speculative_num_steps": 5, "engines.sglang.speculative_eagle_topk": 4,
        "engines.sglang.speculative_num_draft_tokens": 8,
        "engines.sglang.disable_overlap_schedule": True,
    },
    "eagle3-adaptive": {**_NO_LLAMA, "draft.gguf_file": None, "speculative.method": "eagle3",
                        "engines.sglang.speculative_adaptive": True},
}


def _spec_flags(argv: tuple[str, ...]) -> set[str]:
    return {a for a in argv if a.startswith("--speculative") or a.startswith("--spec-")}


def _without_spec(argv: tuple[str, ...]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--speculative-config", "--speculative-algorithm",
                 "--speculative-draft-model-path", "--speculative-num-steps",
                 "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                 "--spec-type", "--spec-draft-model", "--spec-draft-n-max",
                 "--spec-draft-n-min", "--spec-draft-p-min", "--spec-draft-ngl"):
            skip = True
            continue
        if a == "--speculative-adaptive":
            continue
        out.append(a)
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_commands_pass_engine_rules(mirror: Mirror, bundle: BundleFactory,
                                             variant: str) -> None:
    rec = bundle(**VARIANTS[variant])
    engines = [e for e in ("vllm", "sglang", "llamacpp") if rec.spec["engines"].get(e)]
    assert engines
    for engine in engines:
        spec_arm = build_serve_command(rec, engine, mirror=mirror)
        base_arm = build_serve_command(rec, engine, mirror=mirror, speculation=False)
        check = {"vllm": check_vllm, "sglang": check_sglang, "llamacpp": check_llamacpp}[engine]
        check(spec_arm.argv)
        check(base_arm.argv)
        # The baseline arm is the same server with the speculation flags removed, nothing else.
        assert _spec_flags(spec_arm.argv) and not _spec_flags(base_arm.argv)
        assert _without_spec(spec_arm.argv) == list(base_arm.argv)
        assert spec_arm.env == base_arm.env and spec_arm.image == base_arm.image
        assert spec_arm.mounts == base_arm.mounts and spec_arm.port == base_arm.port


def test_vllm_speculative_config_is_explicit_and_local(mirror: Mirror,
                                                       bundle: BundleFactory) -> None:
    rec = bundle(**VARIANTS["eagle3-schedule"])
    ns = check_vllm(build_serve_command(rec, "vllm", mirror=mirror).argv)
    cfg = ns.speculative_config
    assert cfg["method"] == "eagle3"
    assert cfg["num_speculative_tokens"] == 4
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, 16, 4], [17, 64, 2],
                                                            [65, 1024, 0]]
    assert cfg["draft_tensor_parallel_size"] == 1
    assert cfg["model"].startswith(str(mirror.root)) and cfg["model"].endswith("/draft")


def test_sglang_pins_tree_and_max_running(mirror: Mirror, bundle: BundleFactory) -> None:
    rec = bundle(**{"engines.sglang.max_running_requests": None})
    ns = check_sglang(build_serve_command(rec, "sglang", mirror=mirror).argv)
    assert ns.speculative_algorithm == "STANDALONE"
    assert (ns.speculative_num_steps, ns.speculative_eagle_topk,
            ns.speculative_num_draft_tokens) == (4, 1, 5)
    assert ns.max_running_requests == 64  # 2 x P95 concurrency, not SGLang's silent 48
    assert ns.enable_metrics is True


@pytest.mark.parametrize(("bad", "message"), [
    (["--max-num-seq", "8"], "unknown arguments"),
    (["--tensor-parallel-size", "zero"], "invalid"),
    (["--gpu-memory-utilization", "0"], "minimum"),
    (["--per-request-spec-decode-metrics", "all"], "invalid choice"),
])
def test_vllm_validator_catches_typos(mirror: Mirror, bundle: BundleFactory, bad: list[str],
                                      message: str) -> None:
    argv = build_serve_command(bundle(), "vllm", mirror=mirror).argv
    check_vllm(argv)
    with pytest.raises(ArgCheckError, match=message):
        check_vllm((*argv, *bad))


@pytest.mark.parametrize(("cfg", "message"), [
    ({"method": "draft_model", "model": "/m", "num_speculative_tokens": 3,
      "tensor_parallel_size": 2}, "tensor_parallel_size"),
    ({"method": "draft_model", "model": "/m", "num_speculative_token": 3}, "unknown"),
    ({"model": "/m", "num_speculative_tokens": 3}, "explicit method"),
    ({"method": "eagle3", "model": "org/repo", "num_speculative_tokens": 3}, "absolute"),
    ({"method": "draft_model", "model": "/m", "num_speculative_tokens": 0}, "below"),
    ({"method": "eagle3", "model": "/m", "num_speculative_tokens": 3,
      "num_speculative_tokens_per_batch_size": [[1, 8, 3], [8, 16, 1]]}, "overlapping"),
    ({"method": "eagle3", "model": "/m", "num_speculative_tokens": 3,
      "num_speculative_tokens_per_batch_size": [[2, 8, 3]]}, "start at 1"),
])
def test_spec_config_validator_catches_mistakes(cfg: dict[str, Any], message: str) -> None:
    with pytest.raises(ArgCheckError, match=message):
        check_spec_config(cfg)


def test_sglang_validator_catches_partial_tree_and_typos(mirror: Mirror,
                                                         bundle: BundleFactory) -> None:
    argv = build_serve_command(bundle(), "sglang", mirror=mirror).argv
    check_sglang(argv)
    with pytest.raises(ArgCheckError, match="unknown"):
        check_sglang((*argv, "--speculative-num-step", "3"))
    with pytest.raises(ArgCheckError, match="invalid choice"):
        check_sglang((*argv, "--speculative-algorithm", "EAGLE2"))
    partial = list(argv)
    i = partial.index("--speculative-eagle-topk")
    del partial[i:i + 2]
    with pytest.raises(ArgCheckError, match="all together"):
        check_sglang(partial)


def test_llamacpp_validator_uses_real_help(mirror: Mirror, bundle: BundleFactory) -> None:
    argv = build_serve_command(bundle(), "llamacpp", mirror=mirror).argv
    seen = check_llamacpp(argv)
    assert seen["--spec-type"] == "draft-simple"
    assert seen["--spec-draft-p-min"] == "0.75"
    assert "--offline" in seen and "--metrics" in seen
    with pytest.raises(ArgCheckError, match="invalid argument: --draft-max"):
        check_llamacpp((*argv, "--draft-max", "16"))
    with pytest.raises(ArgCheckError, match="invalid argument"):
        check_llamacpp((*argv, "--spec-draft-pmin", "0.5"))


def test_command_json_round_trips(mirror: Mirror, bundle: BundleFactory) -> None:
    cmd = build_serve_command(bundle(), "vllm", mirror=mirror)
    doc = json.loads(json.dumps(cmd.to_json()))
    assert doc["argv"] == list(cmd.argv)
    assert doc["env"]["HF_HUB_OFFLINE"] == "1"
    assert doc["mounts"] == [{"source": str(mirror.root), "target": str(mirror.root),
                              "read_only": True}]
