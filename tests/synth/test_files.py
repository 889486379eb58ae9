"""The generated directories are what a real llama repo + GGUF conversion would be."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gguf
import jinja2.sandbox
import numpy as np
import pytest
import yaml
from safetensors import safe_open
from safetensors.numpy import load_file

from specbundle.synth import (
    MODEL_FILES,
    SynthPair,
    build_tokenizer,
    make_eagle3_head,
    make_model,
    make_pair,
)


def _gguf_field(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


def test_every_model_file_is_written(good_pair: SynthPair) -> None:
    for d in (good_pair.target_dir, good_pair.draft_dir):
        assert sorted(p.name for p in d.iterdir()) == sorted(MODEL_FILES)


def test_config_matches_safetensors(good_pair: SynthPair) -> None:
    for model in (good_pair.target, good_pair.draft):
        cfg = json.loads((model.path / "config.json").read_text())
        assert cfg["architectures"] == ["LlamaForCausalLM"]
        assert cfg["num_hidden_layers"] == model.shape.num_hidden_layers
        with safe_open(str(model.safetensors), "np") as f:
            names = set(f.keys())
            assert f.metadata() == {"format": "pt"}
            emb = f.get_tensor("model.embed_tokens.weight")
            assert emb.dtype == np.float16
            assert emb.shape == (cfg["vocab_size"], cfg["hidden_size"])
            down = f.get_tensor("model.layers.0.mlp.down_proj.weight")
            assert down.shape == (cfg["hidden_size"], cfg["intermediate_size"])
        layers = {n.split(".")[2] for n in names if n.startswith("model.layers.")}
        assert layers == {str(i) for i in range(cfg["num_hidden_layers"])}
        assert len(names) == 3 + 9 * cfg["num_hidden_layers"]
    assert good_pair.target_layers > good_pair.draft_layers
    assert good_pair.cost_ratio < 0.2


def test_gguf_is_a_complete_llama_conversion(good_pair: SynthPair) -> None:
    tok = build_tokenizer(good_pair.vocab_size)
    r = gguf.GGUFReader(good_pair.target.gguf)
    assert _gguf_field(r, "general.architecture") == "llama"
    assert _gguf_field(r, "general.file_type") == gguf.LlamaFileType.MOSTLY_F16
    assert _gguf_field(r, "llama.block_count") == good_pair.target_layers
    assert _gguf_field(r, "tokenizer.ggml.model") == "gpt2"
    assert _gguf_field(r, "tokenizer.ggml.tokens") == list(tok.tokens)
    assert _gguf_field(r, "tokenizer.ggml.merges") == list(tok.merges)
    assert _gguf_field(r, "tokenizer.ggml.bos_token_id") == tok.bos_id
    types = {t.name: t.tensor_type for t in r.tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.F16
    assert types["output_norm.weight"] == gguf.GGMLQuantizationType.F32
    assert len(types) == 3 + 9 * good_pair.target_layers


def test_target_and_draft_share_the_tokenizer(good_pair: SynthPair, bad_pair: SynthPair) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        texts = {(p.draft_dir / name).read_bytes() for p in (good_pair, bad_pair)}
        texts.add((good_pair.target_dir / name).read_bytes())
        assert len(texts) == 1, name


def test_good_draft_is_the_targets_prefix_and_bad_is_not(good_pair: SynthPair,
                                                         bad_pair: SynthPair) -> None:
    target = load_file(str(good_pair.target.safetensors))
    good = load_file(str(good_pair.draft.safetensors))
    bad = load_file(str(bad_pair.draft.safetensors))
    for name, w in good.items():
        np.testing.assert_array_equal(w, target[name])
    assert not np.array_equal(bad["lm_head.weight"], target["lm_head.weight"])
    # The target depends only on seed and shape, so both pairs share one baseline.
    assert (bad_pair.target.gguf.read_bytes() == good_pair.target.gguf.read_bytes())
    # The extra layers only nudge the residual stream: that is what keeps acceptance high.
    extra = target[f"model.layers.{good_pair.target_layers - 1}.self_attn.o_proj.weight"]
    first = target["model.layers.0.self_attn.o_proj.weight"]
    assert float(np.abs(extra).mean()) < 0.05 * float(np.abs(first).mean())


def test_costly_draft_is_most_of_the_target(costly_pair: SynthPair,
                                            good_pair: SynthPair) -> None:
    assert costly_pair.draft_layers == costly_pair.target_layers * 3 // 4
    assert costly_pair.cost_ratio > 0.7 > 0.2 > good_pair.cost_ratio
    target = load_file(str(costly_pair.target.safetensors))
    for name, w in load_file(str(costly_pair.draft.safetensors)).items():
        np.testing.assert_array_equal(w, target[name])


def test_tokenizer_json_loads_and_round_trips(good_pair: SynthPair) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    t = tokenizers.Tokenizer.from_file(str(good_pair.target_dir / "tokenizer.json"))
    assert t.get_vocab_size(with_added_tokens=True) == good_pair.vocab_size
    text = "Speculative decoding: 42 drafts, 3.14 accepted!"
    enc = t.encode(text)
    assert enc.ids[0] == build_tokenizer(good_pair.vocab_size).bos_id
    assert len(enc.ids) < len(text.encode())  # merges actually apply
    assert t.decode(enc.ids, skip_special_tokens=True) == text


def test_chat_template_renders_in_a_sandbox(good_pair: SynthPair) -> None:
    cfg = json.loads((good_pair.target_dir / "tokenizer_config.json").read_text())
    env = jinja2.sandbox.ImmutableSandboxedEnvironment()
    out = env.from_string(cfg["chat_template"]).render(
        messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True,
        bos_token=cfg["bos_token"])
    assert out.startswith("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi")
    assert out.endswith("assistant<|end_header_id|>\n\n")


def test_readme_front_matter_has_a_license(good_pair: SynthPair) -> None:
    text = (good_pair.draft_dir / "README.md").read_text()
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["license"] == "apache-2.0"


def test_generation_is_deterministic(tmp_path: Path) -> None:
    a = make_model(tmp_path / "a", seed=3, num_hidden_layers=1, hidden_size=64)
    b = make_model(tmp_path / "b", seed=3, num_hidden_layers=1, hidden_size=64)
    c = make_model(tmp_path / "c", seed=4, num_hidden_layers=1, hidden_size=64)
    digest = [hashlib.sha256(m.gguf.read_bytes()).hexdigest() for m in (a, b, c)]
    assert digest[0] == digest[1] != digest[2]


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="quality"):
        make_pair(tmp_path, quality="meh")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="draft_layers"):
        make_pair(tmp_path, target_layers=2, draft_layers=2)
    with pytest.raises(ValueError, match="vocab_size"):
        build_tokenizer(100)


def test_eagle3_head_maps_draft_ids_to_target_ids(good_pair: SynthPair, tmp_path: Path) -> None:
    hot = list(range(0, 2 * 64, 2))
    d = make_eagle3_head(tmp_path / "eagle3", good_pair.target.shape, draft_vocab_size=64,
                         hot_ids=hot)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["draft_vocab_size"] == 64
    assert cfg["vocab_size"] == good_pair.vocab_size
    t = load_file(str(d / "model.safetensors"))
    assert t["d2t"].dtype == np.int64
    assert (np.arange(64) + t["d2t"]).tolist() == hot
    assert t["t2d"].dtype == np.bool_
    assert t["t2d"].shape == (good_pair.vocab_size,)
    assert np.flatnonzero(t["t2d"]).tolist() == hot
    assert t["fc.weight"].shape == (cfg["hidden_size"], 3 * cfg["hidden_size"])
    assert t["lm_head.weight"].shape == (64, cfg["hidden_size"])
