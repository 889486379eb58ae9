"""Hostile input is a finding, never a crashed check: seeded mutations of the whole corpus."""

from __future__ import annotations

import json
import random
import zipfile
from pathlib import Path

import numpy as np

from specbundle.scan import Severity, scan_tree
from specbundle.spec import SpecMethod
from tests.lib import corpus
from tests.scan.conftest import FAST, ids
from tests.scan.unreadable import unreadable


def _seeds(work: Path) -> dict[str, bytes]:
    corpus.st_tensors(work / "a.safetensors", {"a": np.zeros((2, 3), np.float16),
                                              "d2t": np.arange(4, dtype=np.int64)})
    corpus.gguf_model(work / "m.gguf", template="{{ x }}")
    corpus.torch_zip(work / "z.bin")
    corpus.npy_object(work / "o.npy", corpus._state_dict())
    return {
        "model.safetensors": (work / "a.safetensors").read_bytes(),
        "model.gguf": (work / "m.gguf").read_bytes(),
        "pytorch_model.bin": (work / "z.bin").read_bytes(),
        "x.npy": (work / "o.npy").read_bytes(),
        "data.pkl": corpus.reduce_pickle("posix", "system", proto=4),
        "legacy.pt": corpus.legacy_checkpoint(corpus._state_dict()),
        "config.json": json.dumps({
            "architectures": ["LlamaForCausalLMEagle3"], "vocab_size": 4,
            "draft_vocab_size": 4, "hidden_size": 8, "auto_map": {"A": "m.X"},
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1]}}).encode(),
        "tokenizer_config.json": json.dumps(
            {"chat_template": [{"name": "a", "template": "{{ x.y }}"}]}).encode(),
        "model.safetensors.index.json": json.dumps(
            {"weight_map": {"a": "model.safetensors"}, "metadata": {"total_size": 12}}).encode(),
    }


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(b)) if b else 0
        op = rng.random()
        if op < 0.5 and b:
            b[i] = rng.randrange(256)
        elif op < 0.7:
            b[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op < 0.85 and b:
            del b[i:i + rng.randint(1, 16)]
        else:
            del b[i:]
    return bytes(b)


def test_mutated_corpus_never_crashes_a_check(tmp_path: Path) -> None:
    rng = random.Random(1234)
    seeds = _seeds(tmp_path)
    target = corpus.hf_model(tmp_path / "target")
    blocked = 0
    for it in range(60):
        d = tmp_path / f"d{it}"
        d.mkdir()
        for name, data in seeds.items():
            (d / name).write_bytes(_mutate(rng, data) if rng.random() < 0.6 else data)
        method = rng.choice([SpecMethod.EAGLE3, SpecMethod.DRAFT_MODEL, SpecMethod.MTP])
        rep = scan_tree(target, draft=d, method=method, allow_pickle=True, options=FAST)
        assert rep.crashed_checks == (), [f.message for f in rep.findings]
        blocked += rep.blocked
    assert blocked == 60  # the seed set contains a malicious pickle in every round


def test_zip_with_bad_crc_is_malformed(tmp_path: Path) -> None:
    path = corpus.torch_zip(tmp_path / "pytorch_model.bin")
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("archive/data.pkl")
    start = info.header_offset + 30 + len(info.filename)
    data[start + 5] ^= 0xFF
    path.write_bytes(bytes(data))
    rep = scan_tree(tmp_path, allow_pickle=True, options=FAST)
    assert "pickle.zip-malformed" in ids(rep) and rep.crashed_checks == ()


def test_npy_header_that_does_not_tokenize(tmp_path: Path) -> None:
    (tmp_path / "x.npy").write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': '|O',\n")
    rep = scan_tree(tmp_path, allow_pickle=True, options=FAST)
    assert "pickle.malformed" in ids(rep) and rep.crashed_checks == ()


def test_an_unreadable_file_is_a_finding_never_a_crash(tmp_path: Path) -> None:
    """Every kind of file, unreadable in turn in the target or the draft: the files check
    reports it (HIGH) and no check crashes on it."""
    target = corpus.hf_model(tmp_path / "target")
    draft = tmp_path / "draft"
    draft.mkdir()
    for name, data in _seeds(tmp_path).items():
        (draft / name).write_bytes(data)
    (draft / "chat_template.jinja").write_text("{{ messages[0].content }}")
    for f in target.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            (draft / f.name).write_bytes(f.read_bytes())
    files = sorted(p for d in (target, draft) for p in d.iterdir() if p.is_file())
    for i, path in enumerate(files):
        method = (SpecMethod.DRAFT_MODEL, SpecMethod.EAGLE3)[i % 2]
        with unreadable(path):
            rep = scan_tree(target, draft=draft, method=method, allow_pickle=True, options=FAST)
        assert rep.crashed_checks == (), (path.name, [f.message for f in rep.findings])
        assert "files.unreadable" in ids(rep, Severity.HIGH), path.name
