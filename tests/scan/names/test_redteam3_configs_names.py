"""Red-team round 3 of issue 11, classes 3, 5 and 6: configs and names.

Each hostile fixture is generated here and paired with a benign twin that must pass:

- class-name keys a loader resolves by name (``tokenizer_class``, ``processor_class``,
  ``*_processor_type``, ``feature_extractor_type``) holding something that is not a plain
  tokenizer/processor class (transformers falls back to ``getattr(transformers, name)``);
- tokenizer file arguments (``vocab_file``, ``tokenizer_file``...) pointing outside the
  artifact (transformers keeps the config's value over the repository's file);
- ``attn_implementation`` naming a hub kernel repository (compiled code outside the snapshot);
- PEFT ``auto_mapping`` (``import_module(parent_library)``) and diffusers ``model_index.json``
  components from another library;
- unpaired surrogate escapes (Python reads them, the tokenizers library refuses the file) and
  searched keys followed by a NUL (C-string readers cut the key there, Python does not);
- YAML tags that build other structures in other readers (``!!omap`` is a mapping to ruamel,
  a list of pairs to PyYAML);
- names with look-alike punctuation, digits, Latin letters, stacked combining marks,
  un-normalised forms and a ``.git`` folder, blocked by the scan and never fetched by pull.

Nothing here is ever imported, unpickled or executed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from specbundle.pull.interface import RemoteFile
from specbundle.pull.listing import UNSAFE_NAME_REASON, screen_listing
from specbundle.scan import ScanReport, Severity, scan_tree
from specbundle.scan.names.check import name_problem
from specbundle.text import hidden_chars

Scan = Callable[..., ScanReport]
_MINE = ("files.", "config.", "remote-code.")


def _mine(rep: ScanReport, at_least: Severity = Severity.HIGH) -> set[str]:
    """Check ids of this area's findings at or above a severity."""
    return {f.check_id for f in rep.findings
            if f.severity.rank >= at_least.rank and f.check_id.startswith(_MINE)}


def _j(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


# -- configs: (file name, hostile bytes, expected finding, benign twin bytes) --------------------
_CONFIGS: dict[str, tuple[str, bytes, str, bytes]] = {
    "tokenizer-class-dotted": (
        "tokenizer_config.json", _j({"tokenizer_class": "tokenization_evil.EvilTokenizer"}),
        "remote-code.class-name", _j({"tokenizer_class": "LlamaTokenizerFast"})),
    "tokenizer-class-not-a-tokenizer": (
        "tokenizer_config.json", _j({"tokenizer_class": "AutoModelForCausalLM"}),
        "remote-code.class-name", _j({"tokenizer_class": "PreTrainedTokenizerFast"})),
    "processor-class-cross-repo": (
        "processor_config.json", _j({"processor_class": "evil/repo--proc.EvilProcessor"}),
        "remote-code.class-name", _j({"processor_class": "Qwen2_5_VLProcessor"})),
    "nested-image-processor-type": (
        "preprocessor_config.json",
        _j({"image_processor": {"image_processor_type": ["os", "system"]}}),
        "remote-code.class-name",
        _j({"image_processor": {"image_processor_type": "SiglipImageProcessorFast"},
            "feature_extractor_type": "WhisperFeatureExtractor",
            "video_processor_type": "Qwen2VLVideoProcessor"})),
    "vocab-file-absolute": (
        "tokenizer_config.json", _j({"vocab_file": "/srv/mirror/objects/ab12/tokenizer.model"}),
        "remote-code.outside-path", _j({"vocab_file": "tokenizer.model"})),
    "tokenizer-file-traversal": (
        "tokenizer_config.json", _j({"tokenizer_file": "sub/../../other/tokenizer.json"}),
        "remote-code.outside-path", _j({"tokenizer_file": "sub/tokenizer.json"})),
    "merges-file-url-nested": (
        "processor_config.json", _j({"tokenizer": {"merges_file": "https://e.example/m.txt"}}),
        "remote-code.outside-path",
        # old tokenizer_configs record the saver's own paths for files never opened from there
        _j({"tokenizer": {"merges_file": "merges.txt"},
            "special_tokens_map_file": "/root/.cache/special_tokens_map.json"})),
    "sentence-transformers-module-outside": (
        "modules.json", _j([{"idx": 0, "name": "0", "path": "../../other",
                             "type": "sentence_transformers.models.Transformer"}]),
        "remote-code.outside-path",
        _j([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"}])),
    "hub-kernel-attention": (
        "config.json", _j({"model_type": "llama",
                           "text_config": {"attn_implementation": "kernels-community/flash-mla"}}),
        "remote-code.cross-repo",
        _j({"model_type": "llama", "text_config": {"attn_implementation": "sdpa"},
            "_attn_implementation": "flash_attention_2"})),
    "hub-kernel-per-subconfig": (
        "config.json", _j({"attn_implementation": {"text_config": "evil/kern@v1:attn"}}),
        "remote-code.cross-repo", _j({"attn_implementation": {"text_config": "eager"}})),
    "cross-repo-dashed-module": (
        "config.json", _j({"some_loader": {"cls": "org/repo--my-module.Evil"}}),
        "remote-code.cross-repo",
        _j({"some_loader": {"cls": "my-module.Evil"}, "note": "a -- b.", "x": "--flag"})),
    "peft-auto-mapping": (
        "adapter_config.json",
        _j({"peft_type": "LORA", "auto_mapping": {"base_model_class": "Evil",
                                                  "parent_library": "evil_pkg.loader"}}),
        "remote-code.auto-map",
        _j({"peft_type": "LORA", "base_model_name_or_path": "/data/llama",
            "auto_mapping": {"base_model_class": "LlamaForCausalLM",
                             "parent_library": "transformers.models.llama.modeling_llama"}})),
    "diffusers-foreign-library": (
        "model_index.json", _j({"_class_name": "P", "unet": ["evil_pkg", "UNet"]}),
        "remote-code.auto-map",
        _j({"_class_name": "P", "unet": ["diffusers", "UNet2DConditionModel"],
            "text_encoder": ["transformers", "CLIPTextModel"], "safety_checker": [None, None]})),
    "lone-surrogate-key": (
        "config.json", b'{"auto_map\\ud800": {"AutoConfig": "m.C"}, "model_type": "llama"}',
        "config.encoding",
        # an escaped pair is one character (Python's own ensure_ascii output), CJK text is text
        b'{"name": "\\ud83e\\udd17 \\u4e2d\\u6587", "note": "\xe4\xb8\xad\xe6\x96\x87"}'),
    "lone-surrogate-value": (
        "tokenizer_config.json", b'{"eos_token": "</s>\\udc00"}', "config.encoding",
        _j({"eos_token": "</s>", "added_tokens_decoder": {"7": {"content": "<|\u4f60\u597d|>"}}})),
    "nul-cut-key": (
        # cJSON-style readers keep keys as C strings: this is their chat_template
        "tokenizer_config.json", b'{"chat_template\\u0000x": "{{ cycler.__init__ }}"}',
        "config.duplicate-key",
        # a vocabulary may hold the NUL character as a token
        b'{"model": {"vocab": {"\\u0000": 0, "a\\u0000": 1}}, "chat_template": "hi"}'),
    "nul-cut-key-yaml": (
        "config.yaml", b'"auto_map\\0": {AutoConfig: m.C}\n', "config.duplicate-key",
        b'"nul\\0": {AutoConfig: 1}\n'),
    "yaml-omap": (
        "config.yaml", b"!!omap [auto_map: {AutoConfig: m.C}]\n", "config.malformed",
        b"model: {dim: 4096, released: 2024-05-01}\nlayers: [1, 2]\n"),
    "yaml-local-tag": (
        "params.yaml", b"a: !evil {x: 1}\n", "config.malformed", b"a: {x: 1}\n"),
    "yaml-binary": (
        "params.yml", b"blob: !!binary aGVsbG8=\n", "config.malformed", b"blob: aGVsbG8=\n"),
}


@pytest.mark.parametrize("case", sorted(_CONFIGS))
def test_hostile_config_is_blocked(scan_one: Scan, case: str) -> None:
    name, hostile, expected, _benign = _CONFIGS[case]
    rep = scan_one(name, hostile)
    assert not rep.crashed_checks or expected == "config.encoding"
    assert expected in _mine(rep), (case, [(f.check_id, f.message) for f in rep.findings])


@pytest.mark.parametrize("case", sorted(_CONFIGS))
def test_benign_config_twin_passes(scan_one: Scan, case: str) -> None:
    name, _hostile, _expected, benign = _CONFIGS[case]
    rep = scan_one(name, benign)
    assert not rep.crashed_checks
    assert _mine(rep) == set(), [(f.check_id, f.message) for f in rep.findings]


def test_vocabulary_tokens_named_like_keys_are_not_classes(scan_one: Scan) -> None:
    # a tokenizer.json vocabulary maps token text to ids: a token spelled like a key is data
    vocab = {"tokenizer_class": 5, "auto_mapping": 6, "vocab_file": 7, "processor_class": 8}
    doc = {"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    rep = scan_one("tokenizer.json", _j(doc))
    assert not ({"remote-code.class-name", "remote-code.outside-path", "remote-code.auto-map"}
                & _mine(rep, Severity.LOW))


# -- names ---------------------------------------------------------------------------------------
_HOSTILE_NAMES = [
    "model\u00b7safetensors", "model\u0589json", "config\u3002json", "model\u2e31json",
    "config\u0387json", "original\u2215tokenizer.model", "original\u2044tokenizer.model",
    "a\u29f8b.json", "model\u201000001.safetensors", "model\u221200001.safetensors",
    "model\u201300001.safetensors", "model-0000\u0661.safetensors",
    "model-0000\u0967.safetensors", "model-0000\u3007.safetensors", "\u00e9\u0301.md",
    "\u4e2d\u0301.md", "1\u0301.md",
    "conf\u0131g.json", "\u1d04onfig.json", "\u0261pt.json", "\u13aa.json", "a\ua60ejson",
    "a\u02d0json", "a\u02bcb.json", "\u212a.json", "\u2126.json", "a\U0001d159b.md",
    ".git/config", ".GIT/hooks/post-checkout", "git~1/config", "sub/.git./config",
    "d/" * 70 + "config.json",  # short enough in bytes, deeper than the scan walks
]
_BENIGN_NAMES = [
    "\u0939\u093f\u0928\u094d\u0926\u0940.md", "\u0e44\u0e17\u0e22.md",
    "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd.md", "\U0001f917.md", "stra\u00dfe.md",
    "na\u00efve.json", "\u00d8resund.md", ".github/README.md", "git/config.json",
    "\u30e2\u30c7\u30eb\u30fc.md", "\ud55c\uad6d\uc5b4.md", "Ti\u1ebfng Vi\u1ec7t.md",
    "\u4e2d\u6587-\u6a21\u578b_v1.2.md", ".gitattributes", ".gitignore",
    "\u0130stanbul.md", "\u0410\u0411.md", "d/" * 40 + "config.json",
]


@pytest.mark.parametrize("name", _HOSTILE_NAMES, ids=lambda n: ascii(n)[:40])
def test_disguised_names_are_refused(name: str) -> None:
    assert name_problem(name) is not None, name


@pytest.mark.parametrize("name", _BENIGN_NAMES, ids=lambda n: ascii(n)[:40])
def test_real_world_names_pass(name: str) -> None:
    assert name_problem(name) is None, name_problem(name)


def test_disguised_name_is_blocked_by_the_scan_and_twin_passes(scan_one: Scan) -> None:
    hostile = scan_one("original\u2215tokenizer.model", b"x" * 16)
    assert "files.unsafe-name" in _mine(hostile, Severity.CRITICAL)
    twin = scan_one("original/tokenizer.model", b"x" * 16)
    assert "files.unsafe-name" not in _mine(twin, Severity.LOW)


def _remote(path: str) -> RemoteFile:
    return RemoteFile(path, 2, None, "0" * 40)


def test_pull_never_fetches_disguised_or_hidden_names() -> None:
    hidden = ["config\u202e.json", "a\u200bb.json", "config\U000e0041.json",
              "model\u3164.safetensors"]
    files = tuple(_remote(n) for n in (*_HOSTILE_NAMES, *hidden, *_BENIGN_NAMES,
                                       "CON.json", "config.json.", "a:b.json"))
    keep, unsafe = screen_listing("target org/x@c", files)
    # a name only Windows refuses stays a plain path on the POSIX mirror (the scan blocks it)
    assert {f.path for f in keep} == {*_BENIGN_NAMES, "a:b.json"}
    assert len(unsafe) == len(_HOSTILE_NAMES) + len(hidden) + 2
    for s in unsafe:
        assert s.reason.startswith(UNSAFE_NAME_REASON)
        assert hidden_chars(s.path) == [], ascii(s.path)  # stored and shown without them
        assert name_problem(s.path) is not None  # and the scan still blocks the record


def test_pull_never_fetches_names_that_collide_on_folding_file_systems() -> None:
    # KELVIN SIGN is refused on its own, so 'k.md' is then the only one of its spelling
    hostile = ["config.json", "Config.json", "Sub/a.json", "sub/b.json", "\u212a.md"]
    benign = ["a/config.json", "b/config.json", "model.safetensors", "k.md"]
    keep, unsafe = screen_listing("target org/x@c", tuple(map(_remote, (*hostile, *benign))))
    assert sorted(f.path for f in keep) == sorted(benign)
    assert sorted(s.path for s in unsafe) == sorted(hostile)
    assert all(s.reason.startswith(UNSAFE_NAME_REASON) for s in unsafe)


@pytest.mark.parametrize("escape", ["\\ud800", "\\udbff\\u0041", "\\udc80"])
def test_lone_surrogate_template_is_judged_not_a_crash(tmp_path: Path, escape: str) -> None:
    """A JSON escape yields a lone surrogate in the template text: the template is still
    digested and analysed (no scanner crash finding), and the file is blocked for its text."""
    tpl = "{{ bos_token }}" + escape + "{% for m in messages %}{{ m.content }}{% endfor %}"
    (tmp_path / "tokenizer_config.json").write_text(
        '{"chat_template": "' + tpl.replace('"', '\\"') + '"}')
    rep = scan_tree(tmp_path)
    assert rep.crashed_checks == (), [f.message for f in rep.findings]
    assert rep.templates and rep.templates[0].file == "tokenizer_config.json"
    assert any(f.severity.rank >= Severity.HIGH.rank for f in rep.findings)
