"""Draft/target compatibility: tokenizer, vocab, EAGLE/EAGLE-3 heads, MTP, method."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specbundle.scan import ScanReport, Severity, scan_tree
from specbundle.spec import SpecMethod
from tests.lib import corpus
from tests.scan.conftest import FAST, ids


def _pair(tmp_path: Path, method: SpecMethod, **draft: Any) -> ScanReport:
    t = corpus.hf_model(tmp_path / "target")
    d = corpus.hf_model(tmp_path / "draft", **draft)
    return scan_tree(t, draft=d, method=method, options=FAST)


def _compat(rep: ScanReport) -> set[str]:
    return {i for i in ids(rep, Severity.INFO) if i.startswith("compat.")}


def test_matching_pair_is_clean(tmp_path: Path) -> None:
    rep = _pair(tmp_path, SpecMethod.DRAFT_MODEL)
    assert rep.findings == ()


def test_draft_tokenizer_differs_by_one_token(tmp_path: Path) -> None:
    rep = _pair(tmp_path, SpecMethod.DRAFT_MODEL, tokenizer=corpus.tokenizer_json(change=137))
    [f] = [f for f in rep.findings if f.check_id == "compat.tokenizer-mismatch"]
    assert f.severity is Severity.HIGH and f.role == "draft"
    assert dict(f.evidence)["first_token_id"] == "137"


def test_tokenizer_formatting_only(tmp_path: Path) -> None:
    t = corpus.hf_model(tmp_path / "target")
    d = corpus.hf_model(tmp_path / "draft")
    (d / "tokenizer.json").write_text(json.dumps(corpus.tokenizer_json(), indent=4))
    rep = scan_tree(t, draft=d, method=SpecMethod.DRAFT_MODEL, options=FAST)
    assert _compat(rep) == {"compat.tokenizer-format"}
    assert not rep.blocked


def test_vocab_size_and_special_tokens(tmp_path: Path) -> None:
    cfg = {"architectures": ["LlamaForCausalLM"], "vocab_size": 320, "hidden_size": 8,
           "bos_token_id": 0, "eos_token_id": 7}
    rep = _pair(tmp_path, SpecMethod.DRAFT_MODEL, config=cfg)
    assert {"compat.vocab-size", "compat.special-tokens"} <= _compat(rep)


def test_gguf_pair_llama_cpp_rule(tmp_path: Path) -> None:
    toks = [f"tok{i}" for i in range(64)]
    t, d, d2, d3 = (tmp_path / n for n in ("t", "d", "d2", "d3"))
    for p in (t, d, d2, d3):
        p.mkdir()
    corpus.gguf_model(t / "model.gguf", tokens=toks)
    corpus.gguf_model(d / "model.gguf", tokens=[*toks[:40], "other", *toks[41:]])
    corpus.gguf_model(d2 / "model.gguf", tokens=["x", *toks[1:]])  # ids < 5 are not compared
    corpus.gguf_model(d3 / "model.gguf", tokens=toks + [f"extra{i}" for i in range(200)])
    one = scan_tree(t, draft=d, method=SpecMethod.DRAFT_MODEL, options=FAST)
    [f] = [f for f in one.findings if f.check_id == "compat.gguf-vocab"]
    assert dict(f.evidence)["token_id"] == "40"
    assert _compat(scan_tree(t, draft=d2, method=SpecMethod.DRAFT_MODEL, options=FAST)) == set()
    assert "compat.gguf-vocab" in _compat(
        scan_tree(t, draft=d3, method=SpecMethod.DRAFT_MODEL, options=FAST))


def _eagle3(tmp_path: Path, *, d2t: np.ndarray | None, cfg: dict[str, Any] | None = None,
            t2d: np.ndarray | None = None) -> Path:
    d = tmp_path / "head"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg or {
        "architectures": ["LlamaForCausalLMEagle3"], "vocab_size": 300,
        "draft_vocab_size": 100, "hidden_size": 8, "num_hidden_layers": 1}))
    tensors: dict[str, np.ndarray] = {"midlayer.mlp.weight": np.zeros((8, 8), np.float16),
                                      "fc.weight": np.zeros((8, 24), np.float16)}
    if d2t is not None:
        tensors["d2t"] = d2t
    if t2d is not None:
        tensors["t2d"] = t2d
    corpus.st_tensors(d / "model.safetensors", tensors)
    return d


def _good_d2t() -> tuple[np.ndarray, np.ndarray]:
    target_ids = np.arange(100, dtype=np.int64) * 2  # hot tokens 0, 2, ..., 198
    mask = np.zeros(300, dtype=np.bool_)
    mask[target_ids] = True
    return target_ids - np.arange(100, dtype=np.int64), mask


def test_eagle3_head_is_compatible(tmp_path: Path) -> None:
    d2t, t2d = _good_d2t()
    t = corpus.hf_model(tmp_path / "target")
    rep = scan_tree(t, draft=_eagle3(tmp_path, d2t=d2t, t2d=t2d), method=SpecMethod.EAGLE3,
                    options=FAST)
    assert _compat(rep) == set()


@pytest.mark.parametrize(("d2t", "why"), [
    (None, "no d2t tensor"),
    (np.zeros(100, dtype=np.int32), "int64"),
    (np.full(100, 250, dtype=np.int64), "outside"),
    (np.full(100, -1, dtype=np.int64), "outside"),
    (np.concatenate([[5, 4], np.arange(98, dtype=np.int64)]).astype(np.int64), "injective"),
])
def test_eagle3_bad_d2t(tmp_path: Path, d2t: np.ndarray | None, why: str) -> None:
    t = corpus.hf_model(tmp_path / "target")
    rep = scan_tree(t, draft=_eagle3(tmp_path, d2t=d2t), method=SpecMethod.EAGLE3, options=FAST)
    [f] = [f for f in rep.findings if f.check_id == "compat.d2t"]
    assert why in f.message or why in str(dict(f.evidence))


def test_eagle3_vocab_past_the_cap_is_not_read(tmp_path: Path) -> None:
    """d2t/t2d are read whole: a vocabulary past the cap is a HIGH finding, not a read."""
    d2t, t2d = _good_d2t()
    t2d[1] = True  # a t2d the check reports once it reads it (test_t2d_inconsistent)
    t = corpus.hf_model(tmp_path / "target")
    head = _eagle3(tmp_path, d2t=d2t, t2d=t2d)
    rep = scan_tree(t, draft=head, method=SpecMethod.EAGLE3,
                    options=dataclasses.replace(FAST, max_vocab=200))
    read = [f.check_id for f in rep.findings if f.check_id == "compat.t2d"]
    [f] = [f for f in rep.findings if f.check_id == "compat.d2t"]
    assert "too large to analyse" in f.message and rep.blocked and read == []


def test_eagle3_config_rules(tmp_path: Path) -> None:
    d2t, _ = _good_d2t()
    t = corpus.hf_model(tmp_path / "target")
    head = _eagle3(tmp_path, d2t=d2t, cfg={
        "architectures": ["Eagle3LlamaForCausalLM"], "vocab_size": 300,
        "draft_vocab_size": 400, "hidden_size": 16, "num_hidden_layers": 1,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 5]}})
    got = _compat(scan_tree(t, draft=head, method=SpecMethod.EAGLE3, options=FAST))
    assert {"compat.draft-vocab-size", "compat.hidden-size", "compat.aux-layers"} <= got


def test_t2d_inconsistent(tmp_path: Path) -> None:
    d2t, t2d = _good_d2t()
    t2d[1] = True
    t = corpus.hf_model(tmp_path / "target")
    rep = scan_tree(t, draft=_eagle3(tmp_path, d2t=d2t, t2d=t2d), method=SpecMethod.EAGLE3,
                    options=FAST)
    assert _compat(rep) == {"compat.t2d"}


def test_method_must_match_draft(tmp_path: Path) -> None:
    d2t, _ = _good_d2t()
    t = corpus.hf_model(tmp_path / "target")
    head = _eagle3(tmp_path, d2t=d2t)
    rep = scan_tree(t, draft=head, method=SpecMethod.DRAFT_MODEL, options=FAST)
    [f] = [f for f in rep.findings if f.check_id == "compat.method-mismatch"]
    assert f.severity is Severity.HIGH and dict(f.evidence)["draft_kind"] == "eagle3"
    plain = corpus.hf_model(tmp_path / "plain")
    assert "compat.method-mismatch" in _compat(
        scan_tree(t, draft=plain, method=SpecMethod.EAGLE3, options=FAST))
    assert "compat.method-mismatch" in _compat(
        scan_tree(t, draft=head, method=SpecMethod.EAGLE, options=FAST))


@pytest.mark.parametrize(("cfg_extra", "layer", "ok"), [
    ({"num_nextn_predict_layers": 1}, 2, True),
    ({"num_nextn_predict_layers": 1}, 1, False),
    ({}, 2, False),
])
def test_mtp_layers(tmp_path: Path, cfg_extra: dict[str, Any], layer: int, ok: bool) -> None:
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 300, "hidden_size": 8,
           "num_hidden_layers": 2, **cfg_extra}
    t = corpus.hf_model(tmp_path / "t", config=cfg, tensors={
        f"model.layers.{layer}.eh_proj.weight": np.zeros((8, 16), np.float16)})
    rep = scan_tree(t, method=SpecMethod.MTP, options=FAST)
    assert ("compat.mtp-missing" not in _compat(rep)) is ok
