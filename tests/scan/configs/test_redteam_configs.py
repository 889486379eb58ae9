"""Red-team fixtures of issue 11, classes 3, 6 (names) and 7 (file counts and trees).

Each hostile case is generated here and paired with the benign twin that must pass: configs
that another reader interprets differently (NaN, duplicate keys, byte-order mark, UTF-16,
invalid UTF-8, comments, huge integers) are searched in every reading; class references other
than ``auto_map`` (``custom_pipelines``, sentence-transformers modules, any cross-repository
string); YAML alias bombs; hidden, look-alike and Windows-hostile names; deep, unreadable and
huge trees. Nothing here is ever imported, unpickled or executed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from specbundle.scan import ScanReport, Severity, scan_tree
from specbundle.scan.names.check import name_problem
from specbundle.spec import SpecMethod
from tests.lib import corpus
from tests.scan.conftest import FAST, ids
from tests.scan.unreadable import unreadable

Scan = Callable[..., ScanReport]
_XREPO = {"AutoModel": "evil/repo--modeling_x.Evil"}


def _tree(d: Path, files: dict[str, str | bytes]) -> Path:
    for name, data in files.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
    return d


def _got(rep: ScanReport) -> set[tuple[str, Severity]]:
    return {(f.check_id, f.severity) for f in rep.findings}


def _clean(rep: ScanReport) -> bool:
    return not rep.blocked and not rep.crashed_checks and ids(rep) == set()


# -- class 3: a config is searched in every reading some reader makes ---------------------------
_AUTO = json.dumps({"auto_map": _XREPO})
_X = json.dumps(_XREPO)
_HIDDEN_CONFIGS: dict[str, bytes] = {
    # Python's json reads NaN; the strict reader refused the file, so auto_map went unseen
    "nan": f'{{"rope_theta": NaN, "auto_map": {_X}}}'.encode(),
    # Python keeps the last duplicate (empty), other readers the first (the payload)
    "duplicate-first-wins": f'{{"auto_map": {_X}, "auto_map": {{}}}}'.encode(),
    "bom": b"\xef\xbb\xbf" + _AUTO.encode(),
    "utf-16": _AUTO.encode("utf-16"),
    "utf-16-no-bom": _AUTO.encode("utf-16-le"),
    "latin-1": f'{{"name": "caf\xe9", "auto_map": {_X}}}'.encode("latin-1"),
    "comments": ("// lenient readers skip this\n" + _AUTO[:-1] + ",}").encode(),
    "huge-integer": f'{{"n": {"9" * 5000}, "auto_map": {_X}}}'.encode(),
    "control-in-string": f'{{"n": "a\tb", "auto_map": {_X}}}'.encode(),
}
_CONFIG_FINDING = {"nan": ("config.non-standard", Severity.MEDIUM),
                   "duplicate-first-wins": ("config.duplicate-key", Severity.HIGH),
                   "bom": ("config.encoding", Severity.HIGH),
                   "utf-16": ("config.encoding", Severity.HIGH),
                   "utf-16-no-bom": ("config.encoding", Severity.HIGH),
                   "latin-1": ("config.encoding", Severity.HIGH),
                   "comments": ("config.malformed", Severity.HIGH),
                   "huge-integer": ("config.malformed", Severity.HIGH),
                   "control-in-string": ("config.malformed", Severity.HIGH)}


@pytest.mark.parametrize("case", sorted(_HIDDEN_CONFIGS))
def test_config_is_searched_in_every_reading(scan_one: Scan, case: str) -> None:
    data = _HIDDEN_CONFIGS[case]
    for name in ("config.json", "video_preprocessor_config.json", "sub/processor_config.json"):
        rep = scan_one(name, data)
        got = _got(rep)
        assert ("remote-code.cross-repo", Severity.CRITICAL) in got, (case, name, got)
        assert _CONFIG_FINDING[case] in got, (case, got)
        assert rep.blocked and not rep.crashed_checks


def test_nan_config_twin_is_only_a_medium(scan_one: Scan) -> None:
    rep = scan_one("generation_config.json", b'{"temperature": NaN, "top_p": Infinity}')
    assert _got(rep) == {("config.non-standard", Severity.MEDIUM)} and not rep.blocked
    assert _clean(scan_one("generation_config.json", b'{"temperature": 0.6, "top_p": 0.9}'))


def test_template_behind_nan_is_analysed(scan_one: Scan) -> None:
    rep = scan_one("tokenizer_config.json", json.dumps(
        {"chat_template": "{{ x['__in' ~ 'it__'] }}"}).replace("{", '{"a": NaN, ', 1).encode())
    assert any(c.startswith("template.") for c in ids(rep, Severity.HIGH)), rep.findings


@pytest.mark.parametrize("data", [b'{"a":' * 5000 + b"1" + b"}" * 5000, b"[" * 200_000,
                                  b"\xff\xfe\x00", b"", b"{", b'{"a": 1} {"b": 2}'])
def test_unreadable_json_is_high_never_a_crash(scan_one: Scan, data: bytes) -> None:
    rep = scan_one("config.json", data)
    assert not rep.crashed_checks and rep.blocked
    assert ids(rep, Severity.HIGH) & {"config.malformed", "config.encoding",
                                       "files.magic-mismatch"}


# -- class 3: class references beyond auto_map --------------------------------------------------
_REFS: dict[str, tuple[str, object, str]] = {
    "custom-pipeline": ("config.json", {"custom_pipelines": {"text-classification": {
        "impl": "pipeline_x.XPipeline", "pt": ["AutoModelForSequenceClassification"]}}},
        "remote-code.auto-map"),
    "custom-pipeline-cross-repo": ("config.json", {"custom_pipelines": {"x": {
        "impl": "org/repo--pipeline_x.XPipeline"}}}, "remote-code.cross-repo"),
    "st-module": ("modules.json", [{"idx": 0, "name": "0", "path": "",
                                    "type": "custom_st.MyModule"}], "remote-code.auto-map"),
    "st-router": ("router_config.json", {"types": {"0_X": "custom_st.Router"}},
                  "remote-code.auto-map"),
    "trust-flag": ("sentence_bert_config.json", {"max_seq_length": 512,
                                                 "model_args": {"trust_remote_code": True}},
                   "remote-code.trust-flag"),
    "cross-repo-anywhere": ("tokenizer_config.json", {"tokenizer_class": "org/repo--tok.Tok"},
                            "remote-code.cross-repo"),
    "cross-repo-deep": ("preprocessor_config.json", {"a": [{"b": {"c": "o/r--m.C"}}]},
                        "remote-code.cross-repo"),
    "nested-auto-map": ("adapter_config.json", {"x": {"auto_map": {"AutoModel": "m.M"}}},
                        "remote-code.auto-map"),
}


@pytest.mark.parametrize("case", sorted(_REFS))
def test_class_references_beyond_auto_map(scan_one: Scan, case: str) -> None:
    name, doc, check_id = _REFS[case]
    rep = scan_one(name, json.dumps(doc).encode())
    assert check_id in ids(rep, Severity.HIGH), rep.findings
    assert rep.blocked and not rep.crashed_checks


def test_class_references_allowed_by_the_spec_are_recorded(scan_one: Scan) -> None:
    rep = scan_one("modules.json", json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "custom_st.MyModule"}]).encode(),
                   allow_remote_code=True)
    assert ("remote-code.auto-map", Severity.INFO) in _got(rep)


def test_sentence_transformers_and_cache_paths_twin(tmp_path: Path) -> None:
    """The benign twins: a real sentence-transformers layout, a hub cache path in
    ``_name_or_path``, ``--`` inside ordinary strings."""
    corpus.hf_model(tmp_path, config={
        "architectures": ["LlamaForCausalLM"], "vocab_size": 300,
        "_name_or_path": "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B/snapshots/"
                         "a09a3545/model.safetensors",
        "note": "trained with --lr 3e-4 -- see README", "trust_remote_code": False})
    _tree(tmp_path, {
        "modules.json": json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize",
             "type": "sentence_transformers.models.Normalize"}]),
        "sentence_bert_config.json": json.dumps({"max_seq_length": 512,
                                                 "do_lower_case": False}),
        "config_sentence_transformers.json": json.dumps(
            {"__version__": {"sentence_transformers": "3.0.1"}, "prompts": {},
             "default_prompt_name": None, "similarity_fn_name": "cosine"}),
        "1_Pooling/config.json": json.dumps({"word_embedding_dimension": 8,
                                             "pooling_mode_mean_tokens": True}),
        "generation_config.json": json.dumps({"bos_token_id": 0, "eos_token_id": [1, 2],
                                              "do_sample": True, "temperature": 0.6}),
        "special_tokens_map.json": json.dumps({"bos_token": "<s>", "eos_token": "</s>"}),
        "LICENSE": "Apache License 2.0\n", ".gitattributes": "*.safetensors filter=lfs\n",
    })
    assert _clean(scan_tree(tmp_path, options=FAST))


@pytest.mark.parametrize("name", ["modeling_evil.PY", "Modeling.Py", "sub/x.pyw",
                                  "CUSTOM_GENERATE/generate.txt"])
def test_code_file_suffix_and_folder_any_case(scan_one: Scan, name: str) -> None:
    rep = scan_one(name, b"import os\n")
    assert ids(rep, Severity.HIGH) & {"remote-code.code-file", "remote-code.custom-generate"}


# -- class 3/7: YAML aliases --------------------------------------------------------------------
def _laughs(levels: int) -> str:
    return "a0: &a0 [1, 1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n"
                                         for i in range(1, levels))


def test_yaml_alias_bomb_is_refused_quickly(scan_one: Scan) -> None:
    t0 = time.perf_counter()
    rep = scan_one("config.yaml", _laughs(32).encode())  # 2^32 nodes through 62 aliases
    assert time.perf_counter() - t0 < 5
    assert "config.too-large" in ids(rep, Severity.HIGH) and not rep.crashed_checks
    assert "config.too-large" in ids(scan_one("x.yml", b"a: &a [*a]\n"), Severity.HIGH)


def test_yaml_small_aliases_and_mixed_keys_twin(scan_one: Scan) -> None:
    assert _clean(scan_one("params.yaml", _laughs(4).encode()))
    rep = scan_one("x.yaml", b"auto_map:\n  1: a.B\n  x: c.D\n")  # int and str keys
    assert not rep.crashed_checks and "remote-code.auto-map" in ids(rep)


# -- class 6: names -----------------------------------------------------------------------------
_HOSTILE_NAMES = [
    "tokenizer_config.json.", "config.json ", " config.json", "sub./config.json",
    "CON.json", "nul", "lpt1.txt", "com\u00b9.md", "aux/config.json", "config.json:stream",
    "a<b.md", "a|b.md", "a?.md", "a*.md", 'a".md',
    "m\u043edel.safetensors", "\u0440\u043e\u0435.md", "\u03bfpt.md",  # Cyrillic/Greek
    "\uff43onfig.json", "\U0001d426odel.md", "\ufb01le.md",  # fullwidth, math bold, ligature
    "config\ufe0f.json", "config\U000e0100.json", "config\u3164.json", "config\u115f.json",
    "config\uffa0.json", "config\u034f.json", "model.safetensors\u0338.md", "e\u0301.md",
    "\u0301x.md", "read\u00a0me.md", "read\u3000me.md", "a\u2800b.md", "a\u180eb.md",
    "a\u2060b.md", "a\u2062b.md", "a\u2064b.md", "a\ufeffb.md", "a\U000e0041b.md",
    "a\U000e007fb.md", "a\u00adb.md", "a\u17b4b.md", "a\u0085b.md", "a\u009bb.md",
    "a\u200db.md", "a\u202eb.md", "model\u05d0.exe.txt", "gpj.\u0627exe", "x" * 256,
    "\u05d0model.md", "\u0645\u062f\u0644-model.md",  # Latin beside right-to-left letters
    "/".join(["d" * 200] * 6),
]


@pytest.mark.parametrize("name", _HOSTILE_NAMES, ids=lambda n: ascii(n)[:40])
def test_hostile_names(name: str) -> None:
    assert name_problem(name) is not None, name


@pytest.mark.parametrize("name", [
    "config.json", "model-00001-of-00004.safetensors", "original/params.json", ".gitattributes",
    "additional_chat_templates/tool_use.jinja", "1_Pooling/config.json", "modèle-ü.md",
    "модель.json", "模型说明.md", "モデル.md", "Ελληνικά.md", "README (copy).md", "a.b.c.json",
    "consolidated.00.pth", "icon-\u00e9t\u00e9.png", "CONFIG.json", "console.json",
    "\u05de\u05d5\u05d3\u05dc", "auxiliary.json", "com10.txt",
    # a right-to-left name with a plain extension reads as written (Arabic, Hebrew model cards)
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629.md", "docs/\u05ea\u05de\u05d5\u05e0\u05d4.png",
])
def test_real_names_pass(name: str) -> None:
    assert name_problem(name) is None, name_problem(name)


def test_hidden_name_is_blocked_and_shown_escaped(scan_one: Scan) -> None:
    name = "config\u3164.json"
    rep = scan_one(name, b"{}")
    assert "files.unsafe-name" in ids(rep, Severity.CRITICAL)
    assert name not in json.dumps(rep.to_json(), ensure_ascii=False)


@pytest.mark.parametrize("names", [("config.json", "\uff43onfig.json"),
                                   ("config.json", "config.json."),
                                   ("Sub/a.json", "sub/b.json"),
                                   ("model", "MODEL/x.json"),
                                   ("caf\u00e9.md", "cafe\u0301.md")], ids=repr)
def test_name_collisions(tmp_path: Path, names: tuple[str, str]) -> None:
    _tree(tmp_path, dict.fromkeys(names, "{}"))
    assert "files.name-collision" in ids(scan_tree(tmp_path, options=FAST), Severity.HIGH)


def test_no_collision_between_distinct_folders(tmp_path: Path) -> None:
    _tree(tmp_path, {"a/config.json": "{}", "b/config.json": "{}", "a/b.json": "{}"})
    assert "files.name-collision" not in ids(scan_tree(tmp_path, options=FAST))


# -- class 7 and 5: trees -----------------------------------------------------------------------
def _chain(root: Path, depth: int, leaf: bytes | None) -> None:
    """``root/a/a/.../a`` (``depth`` levels) with ``config.json`` at the bottom; with
    ``leaf=None``, remove such a chain. Through directory descriptors: ``pathlib`` and
    ``shutil.rmtree`` recurse once per level, as ``os.walk`` did."""
    fds = [os.open(root, os.O_RDONLY)]
    try:
        for _ in range(depth):
            if leaf is not None:
                os.mkdir("a", dir_fd=fds[-1])
            fds.append(os.open("a", os.O_RDONLY, dir_fd=fds[-1]))
        if leaf is not None:
            fd = os.open("config.json", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1])
            os.write(fd, leaf)
            os.close(fd)
        else:
            os.unlink("config.json", dir_fd=fds[-1])
            for parent in reversed(fds[:-1]):
                os.rmdir("a", dir_fd=parent)
    finally:
        for fd in fds:
            os.close(fd)


def test_deep_folder_chain_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    _chain(d, 1500, json.dumps({"auto_map": _XREPO}).encode())
    try:
        rep = scan_tree(d, options=FAST)
    finally:
        _chain(d, 1500, None)
    assert "files.too-many" in ids(rep, Severity.HIGH) and not rep.crashed_checks
    twin = tmp_path / "twin"
    _tree(twin, {"a/b/c/d/e/config.json": json.dumps({"auto_map": _XREPO})})
    assert "remote-code.cross-repo" in ids(scan_tree(twin, options=FAST))


def test_unlistable_folder_is_a_finding(tmp_path: Path) -> None:
    _tree(tmp_path, {"config.json": "{}", "secret/config.json": "{}"})
    with unreadable(tmp_path / "secret"):
        rep = scan_tree(tmp_path, options=FAST)
    assert [f.file for f in rep.findings if f.check_id == "files.unreadable"] == ["secret"]
    assert rep.blocked


def test_unreadable_file_is_a_finding(tmp_path: Path) -> None:
    _tree(tmp_path, {"config.json": "{}", "model.safetensors": b"x" * 16})
    with unreadable(tmp_path / "model.safetensors"):
        rep = scan_tree(tmp_path, options=FAST)
    assert "files.unreadable" in ids(rep, Severity.HIGH) and not rep.crashed_checks


def test_symlink_and_fifo_tricks(tmp_path: Path) -> None:
    _tree(tmp_path, {"config.json": "{}"})
    (tmp_path / "a.json").symlink_to("b.json")
    (tmp_path / "b.json").symlink_to("a.json")  # a loop
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "tokenizer.json").symlink_to("pipe")  # a link to a FIFO inside the tree
    (tmp_path / "vocab.json").symlink_to("/dev/zero")
    rep = scan_tree(tmp_path, options=FAST)
    bad = {f.file for f in rep.findings if f.check_id in ("files.symlink-escape",
                                                          "files.special")}
    assert bad >= {"a.json", "b.json", "pipe", "tokenizer.json", "vocab.json"}
    assert not rep.crashed_checks


def _tiny_files(d: Path, n: int) -> Path:
    for i in range(n):
        sub = d / f"d{i % 64}"
        if i < 64:
            sub.mkdir(parents=True)
        (sub / f"c{i}.json").write_text(f'{{"a": {i}}}')
    return d


def test_tiny_files_scan_in_linear_time(tmp_path: Path) -> None:
    """Ten times the files costs about ten times the time, not a hundred: a ratio measured in
    the same run, interleaved and best-of-two, so a busy machine slows both sides alike
    (a wall-clock limit failed at load 12 on a scan that is linear)."""
    small, large = _tiny_files(tmp_path / "s", 1_500), _tiny_files(tmp_path / "l", 15_000)
    best = {small: float("inf"), large: float("inf")}
    for _ in range(2):
        for d in (small, large):
            t0 = time.perf_counter()
            rep = scan_tree(d, options=FAST)
            best[d] = min(best[d], time.perf_counter() - t0)
            assert _clean(rep)
    assert len(rep.files) == 15_000
    assert best[large] / best[small] < 30, best  # linear: ~10; quadratic: ~100


# -- class 5: hostile JSON in the compatibility check -------------------------------------------
@pytest.mark.parametrize("tok", [
    b'{"model": {"vocab": {"a": 0}}, "normalizer": NaN, "added_tokens": []}',
    b'{"model": {"vocab": {"\\ud800": 0}}, "added_tokens": [{"id": 5, "content": "\\udfff"}]}',
    b'{"model": {"vocab": []}, "added_tokens": {"a": 1}}',
])
def test_hostile_tokenizer_json_never_crashes_compat(tmp_path: Path, tok: bytes) -> None:
    cfg = json.dumps({"vocab_size": 1, "architectures": ["LlamaForCausalLM"]})
    target = _tree(tmp_path / "t", {"config.json": cfg, "tokenizer.json": json.dumps(
        {"model": {"vocab": {"a": 0}}, "added_tokens": []})})
    draft = _tree(tmp_path / "d", {"config.json": cfg, "tokenizer.json": tok})
    rep = scan_tree(target, draft=draft, method=SpecMethod.DRAFT_MODEL, options=FAST)
    assert not rep.crashed_checks
    assert "compat.tokenizer-mismatch" in ids(rep, Severity.HIGH)
    rep.canonical_bytes().decode("utf-8")


def test_sparse_tokenizer_file_is_not_hashed(tmp_path: Path) -> None:
    cfg = json.dumps({"vocab_size": 1, "architectures": ["LlamaForCausalLM"]})
    target = _tree(tmp_path / "t", {"config.json": cfg, "merges.txt": "a b\n"})
    draft = _tree(tmp_path / "d", {"config.json": cfg})
    with (draft / "merges.txt").open("wb") as fh:
        fh.truncate(1 << 40)  # a sparse 1 TiB file: hashing it would take minutes
    t0 = time.perf_counter()
    rep = scan_tree(target, draft=draft, method=SpecMethod.DRAFT_MODEL, options=FAST)
    assert time.perf_counter() - t0 < 10
    assert "compat.tokenizer-mismatch" in ids(rep, Severity.HIGH) and not rep.crashed_checks


def test_refused_names_take_no_part_in_collisions(tmp_path: Path) -> None:
    """Two skipped absolute names share an empty first component: each is refused as unsafe,
    and no collision with an empty file name is invented from them."""
    from dataclasses import replace

    from specbundle.record import SkippedFile
    from specbundle.scan.inventory import walk_tree
    from specbundle.scan.names.check import FilesCheck
    from specbundle.scan.runner import run_checks

    _tree(tmp_path, {"config.json": "{}"})
    tree = replace(walk_tree(tmp_path, "target"), skipped=(
        SkippedFile("/etc/a.json", "unsafe name"), SkippedFile("/etc/b.json", "unsafe name"),
        SkippedFile("Config.JSON", "not matched")))
    rep = run_checks((tree,), subject="t", method=None, options=FAST, checks=(FilesCheck(),))
    unsafe = {f.file for f in rep.findings if f.check_id == "files.unsafe-name"}
    assert unsafe == {"/etc/a.json", "/etc/b.json"}
    [collision] = [f for f in rep.findings if f.check_id == "files.name-collision"]
    assert collision.file == "Config.JSON"  # the sound names still collide
