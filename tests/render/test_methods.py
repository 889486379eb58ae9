"""Every engine method is rendered or refused with a reason, read from the engines themselves.

vLLM's list is its ``SpeculativeMethod`` literal (the shipped table, which
``test_engine_vllm.py`` holds to the installed engine, and the installed vLLM itself when
present), SGLang's its ``SpeculativeAlgorithm`` enum in ``.venv-sglang``, llama.cpp's the
``--spec-type`` list of the built b11434 server (or its stored ``--help``). A method an engine
gains fails here until it is rendered or refused.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from specbundle.bundle import read_unsigned
from specbundle.errors import RenderError, SpecError
from specbundle.mirror import Mirror
from specbundle.render import build_serve_command, lint_bundle
from specbundle.render.argrules import SGLANG_ALGORITHMS, VLLM_METHODS
from specbundle.render.methods import ENGINE_REFUSED, engine_method
from specbundle.render.vllm_oracle import dump_table
from specbundle.spec import REFUSED_METHODS, EngineName, SpecMethod, parse_spec
from tests._engine import find_llama_server
from tests._sglang import algorithms, needs_sglang
from tests._vllm import find_test_vllm
from tests.lib.bundles import BundleFactory
from tests.lib.specs import spec_dict
from tests.render._argcheck import DATA, check_llamacpp, check_sglang, check_vllm

V, S, L = EngineName.VLLM, EngineName.SGLANG, EngineName.LLAMACPP


def _unknown(engine: EngineName, names: set[str]) -> set[str]:
    return {n for n in names if engine_method(engine, n) is None}


def test_every_vllm_method_is_rendered_or_refused() -> None:
    assert _unknown(V, set(VLLM_METHODS)) == set()
    assert {"suffix", "ngram_gpu", "dspark"} <= set(VLLM_METHODS)
    assert engine_method(V, "ngram_gpu") is SpecMethod.NGRAM_GPU
    assert engine_method(V, "dspark") is SpecMethod.DSPARK
    assert engine_method(V, "gemma4_mtp") is SpecMethod.MTP  # vLLM rewrites *_mtp to mtp
    assert "arctic-inference" in str(engine_method(V, "suffix"))


def test_installed_vllm_methods_are_rendered_or_refused() -> None:
    found = find_test_vllm()
    if found is None:
        pytest.skip("vLLM not installed")
    methods = set(dump_table(found)["methods"])
    assert _unknown(V, methods) == set()
    assert methods == set(VLLM_METHODS)


@needs_sglang
def test_every_sglang_algorithm_is_rendered_or_refused() -> None:
    algos = algorithms()
    assert _unknown(S, algos) == set()
    assert algos == set(SGLANG_ALGORITHMS)  # the lint table's choices are the engine's
    assert engine_method(S, "DSPARK") is SpecMethod.DSPARK
    assert "Gemma4" in str(engine_method(S, "FROZEN_KV_MTP"))


def test_every_llamacpp_spec_type_is_rendered_or_refused() -> None:
    binary = find_llama_server()
    text = (subprocess.run([str(binary), "--help"], capture_output=True, text=True,
                           timeout=60, check=False).stdout if binary is not None else "") \
        or (DATA / "llama-server-help.txt").read_text()
    m = re.search(r"^--spec-type (\S+)", text, re.MULTILINE)
    assert m is not None
    types = set(m.group(1).split(",")) - {"none"}
    assert "draft-dspark" in types
    assert _unknown(L, types) == set()
    assert engine_method(L, "draft-dspark") is SpecMethod.DSPARK


@pytest.mark.parametrize("name", sorted({k for r in ENGINE_REFUSED.values() for k in r.values()}))
def test_a_refused_method_is_refused_by_the_spec_with_its_reason(name: str) -> None:
    doc = spec_dict(**{"speculative.method": name.upper() if name == "uno" else name})
    with pytest.raises(SpecError, match=re.escape(REFUSED_METHODS[name][:40])):
        parse_spec(doc)


_NO_LLAMA = {"engines.llamacpp": None, "target.gguf_file": None, "draft.gguf_file": None}


def test_dspark_renders_for_every_engine_and_each_parser_takes_it(
        mirror: Mirror, bundle: BundleFactory) -> None:
    rec = bundle(**{"speculative.method": "dspark", "speculative.num_speculative_tokens": 4,
                    "engines.llamacpp.spec_type": "draft-dspark"})
    vargs = build_serve_command(rec, "vllm", mirror=mirror).argv
    ns = check_vllm(vargs)
    cfg = ns.speculative_config
    assert (cfg["method"], cfg["num_speculative_tokens"]) == ("dspark", 4) and "model" in cfg
    sargs = list(build_serve_command(rec, "sglang", mirror=mirror).argv)
    check_sglang(sargs)
    # gamma = K pinned (else read from the draft or defaulted); SGLang verifies gamma + 1
    assert sargs[sargs.index("--speculative-algorithm") + 1] == "DSPARK"
    assert sargs[sargs.index("--speculative-dspark-block-size") + 1] == "4"
    largv = list(build_serve_command(rec, "llamacpp", mirror=mirror).argv)
    check_llamacpp(largv)
    assert largv[largv.index("--spec-type") + 1] == "draft-dspark"
    assert largv[largv.index("--spec-draft-n-max") + 1] == "4"
    lint = lint_bundle(read_unsigned(mirror, rec.name))
    # b11434 refuses a p_min > 0 unless the DSpark GGUF has a confidence head: lint says so
    warned = [f for f in lint.findings if f.rule.endswith("method")]
    assert [(f.severity, f.where) for f in warned] == [
        ("warning", "engines.llamacpp.draft_p_min")], warned
    rec = bundle(**{"metadata.name": "dspark-p0", "speculative.method": "dspark",
                    "engines.llamacpp.spec_type": "draft-dspark",
                    "engines.llamacpp.draft_p_min": 0.0})
    lint = lint_bundle(read_unsigned(mirror, rec.name))
    assert not [f for f in lint.findings if f.rule.endswith("method")], lint.findings


def test_ngram_gpu_renders_for_vllm_and_fails_closed_elsewhere(
        mirror: Mirror, bundle: BundleFactory) -> None:
    rec = bundle(**_NO_LLAMA, **{"draft": None, "speculative.method": "ngram_gpu",
                                 "engines.sglang": None})
    ns = check_vllm(build_serve_command(rec, "vllm", mirror=mirror).argv)
    assert ns.speculative_config == {"method": "ngram_gpu", "num_speculative_tokens": 4}
    assert lint_bundle(read_unsigned(mirror, rec.name), engine="vllm").ok
    rec = bundle(**_NO_LLAMA, **{"draft": None, "metadata.name": "ngram-gpu-sg",
                                 "speculative.method": "ngram_gpu"})
    with pytest.raises(RenderError, match="SGLang has no speculative algorithm"):
        build_serve_command(rec, "sglang", mirror=mirror)
    rules = {f.rule for f in lint_bundle(read_unsigned(mirror, rec.name)).findings}
    assert "sglang-method-unsupported" in rules
    rec = bundle(**{"draft": None, "metadata.name": "ngram-gpu-llama", "engines.vllm": None,
                    "engines.sglang": None, "speculative.method": "ngram_gpu"})
    found = {f.rule: f.severity for f in lint_bundle(read_unsigned(mirror, rec.name)).findings}
    assert found.get("llamacpp-spec-type-method") == "error"
