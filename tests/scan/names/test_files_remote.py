"""File names, links and types; remote code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specbundle.scan import Severity, scan_tree
from specbundle.scan.names.check import name_problem
from tests.lib import corpus
from tests.scan.conftest import FAST, ids


def test_clean_model_folder(tmp_path: Path) -> None:
    corpus.hf_model(tmp_path / "m")
    rep = scan_tree(tmp_path / "m", options=FAST)
    assert rep.findings == ()
    assert {f.path for f in rep.files} >= {"config.json", "model.safetensors"}
    assert [t.file for t in rep.templates] == ["tokenizer_config.json"]


def test_elf_named_tokenizer_model(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.model").write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 64)
    rep = scan_tree(tmp_path, options=FAST)
    [f] = [f for f in rep.findings if f.check_id == "files.executable"]
    assert f.severity is Severity.CRITICAL and f.file == "tokenizer.model"


def _spm_piece(text: bytes) -> bytes:
    """One ``ModelProto.pieces`` entry: field 1 (the piece), field 2 (its score, 0.0)."""
    body = b"\x0a" + bytes([len(text)]) + text + b"\x15" + b"\x00" * 4
    return b"\x0a" + bytes([len(body)]) + body


@pytest.mark.parametrize("name", ["tokenizer.model.v3", "tokenizer.model.v7",
                                  "tokenizer.mm.model.v7m1"])
def test_mistral_versioned_tokenizers_are_sentencepiece(tmp_path: Path, name: str) -> None:
    """Real Mistral repos carry these beside tokenizer.model (mistral-common reads them): a
    SentencePiece model passes, anything else under the name is what it is."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    (good / name).write_bytes(b"".join(_spm_piece(t) for t in (b"<unk>", b"<s>", b"</s>")))
    (good / "tekken.json").write_text(json.dumps({"config": {"pattern": "x"}, "vocab": []}))
    assert scan_tree(good, options=FAST).findings == ()
    (bad / name).write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 64)
    (bad / f"{name}x!").write_bytes(b"".join(_spm_piece(t) for t in (b"<s>",)))
    got = {(f.file, f.check_id) for f in scan_tree(bad, options=FAST).findings}
    assert (name, "files.executable") in got
    assert (f"{name}x!", "files.unknown-type") in got


def test_magic_mismatch_and_archives(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"GGUF" + b"\x00" * 40)
    (tmp_path / "extra.tar.gz").write_bytes(b"\x1f\x8b\x08" + b"\x00" * 20)
    (tmp_path / "run.sh").write_bytes(b"#!/bin/sh\ncurl x | sh\n")
    (tmp_path / "weights.bin").write_bytes(b"7z\xbc\xaf\x27\x1c" + b"\x00" * 20)
    rep = scan_tree(tmp_path, options=FAST)
    got = {(f.file, f.check_id) for f in rep.findings}
    assert ("model.safetensors", "files.magic-mismatch") in got
    assert ("extra.tar.gz", "files.archive") in got
    assert ("run.sh", "files.executable") in got
    assert ("weights.bin", "files.archive") in got


def test_symlink_out_of_tree_and_hard_link(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").symlink_to("/etc/passwd")
    (d / "inside.json").write_text("{}")
    (d / "alias.json").symlink_to("inside.json")
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    os.link(outside, d / "notes.txt")
    (d / "sub").symlink_to(tmp_path)
    rep = scan_tree(d, options=FAST)
    got = {(f.file, f.check_id) for f in rep.findings}
    assert ("config.json", "files.symlink-escape") in got
    assert ("sub", "files.symlink-escape") in got
    assert ("notes.txt", "files.hard-link") in got
    assert not any(f.file == "alias.json" for f in rep.findings)


def test_fifo_is_special(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.json")
    assert "files.special" in ids(scan_tree(tmp_path, options=FAST))


def test_case_collision(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "Config.json").write_text("{}")
    assert "files.name-collision" in ids(scan_tree(tmp_path, options=FAST))


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a\\b", "//srv/share/x", "C:/x",
                                  "a/./b", "a\x00b", "a//b", "x" * 300])
def test_unsafe_names(name: str) -> None:
    assert name_problem(name) is not None


@pytest.mark.parametrize("name", ["config.json", "additional_chat_templates/a.jinja",
                                  "model-00001-of-00002.safetensors", ".gitattributes"])
def test_safe_names(name: str) -> None:
    assert name_problem(name) is None


def _evil_repo(d: Path) -> Path:
    corpus.hf_model(d, config={
        "architectures": ["EvilForCausalLM"], "vocab_size": 300,
        "auto_map": {"AutoConfig": "configuration_evil.EvilConfig",
                     "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM",
                     "AutoTokenizer": ["other/repo--tokenization_x.XTokenizer", None]}})
    (d / "modeling_evil.py").write_text("import os\nos.system('id')\n")
    (d / "custom_generate").mkdir()
    (d / "custom_generate" / "generate.py").write_text("def generate(): ...\n")
    return d


def test_auto_map_and_modeling_evil(tmp_path: Path) -> None:
    rep = scan_tree(_evil_repo(tmp_path / "m"), options=FAST)
    got = {(f.file, f.check_id, f.severity) for f in rep.findings}
    assert ("config.json", "remote-code.auto-map", Severity.HIGH) in got
    assert ("config.json", "remote-code.cross-repo", Severity.CRITICAL) in got
    assert ("config.json", "remote-code.missing-module", Severity.HIGH) in got  # configuration
    assert ("modeling_evil.py", "remote-code.code-file", Severity.HIGH) in got
    assert ("custom_generate/generate.py", "remote-code.custom-generate", Severity.HIGH) in got
    assert rep.blocked


def test_remote_code_allowed_is_recorded_but_cross_repo_still_blocks(tmp_path: Path) -> None:
    rep = scan_tree(_evil_repo(tmp_path / "m"), allow_remote_code=True, options=FAST)
    sev = {(f.file, f.check_id): f.severity for f in rep.findings}
    assert sev[("config.json", "remote-code.auto-map")] is Severity.INFO
    assert sev[("modeling_evil.py", "remote-code.code-file")] is Severity.INFO
    assert sev[("config.json", "remote-code.cross-repo")] is Severity.CRITICAL


def test_deep_json_config_is_no_crash(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("[" * 200_000)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"a": 1}))
    rep = scan_tree(tmp_path, options=FAST)
    assert rep.crashed_checks == ()


def test_empty_tree_is_never_clean(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    report = scan_tree(tmp_path / "empty")
    assert report.blocked
    assert [f.check_id for f in report.findings] == ["files.nothing-scanned"]
