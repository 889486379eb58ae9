"""Bundle spec validation: every bad field is named, with what is allowed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from specbundle.errors import SpecError
from specbundle.spec import SpecMethod, load_spec, parse_spec

GOOD: dict[str, Any] = {
    "apiVersion": "specbundle/v1",
    "metadata": {"name": "llama-eagle3"},
    "target": {"repo": "meta-llama/Llama-3.1-8B-Instruct", "revision": "main"},
    "draft": {"repo": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "revision": "v1"},
    "speculative": {"method": "eagle3", "num_speculative_tokens": 5,
                    "schedule": [[1, 16, 5], [17, 64, 3]]},
    "engines": {"vllm": {"tensor_parallel_size": 1}},
    "deployment": {"p95_concurrency": 32},
}


def _with(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    node = doc
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return doc


_DELETE = object()


def test_good_spec_parses() -> None:
    spec = parse_spec(GOOD)
    assert spec.name == "llama-eagle3"
    assert spec.speculative.method is SpecMethod.EAGLE3
    assert spec.speculative.schedule == ((1, 16, 5), (17, 64, 3))
    assert spec.admission.min_throughput_ratio_lower_bound == 1.05


@pytest.mark.parametrize(("path", "value", "field", "says"), [
    ("apiVersion", "specbundle/v2", "apiVersion", "specbundle/v1"),
    ("metadata.name", "Bad Name!", "metadata.name", "lowercase"),
    ("target.repo", "not-a-repo", "target.repo", "org/name"),
    ("target.repo", "../etc/passwd", "target.repo", "org/name"),
    ("target.revision", "a b", "target.revision", "branch, tag or commit"),
    ("target.source", "s3://bucket", "target.source", "dir:<path>"),
    ("target.gguf_file", "/abs/model.gguf", "target.gguf_file", ".gguf"),
    ("target.unknown", 1, "target.unknown", "unknown field"),
    ("draft", _DELETE, "draft", "required for method 'eagle3'"),
    ("speculative.method", "telepathy", "speculative.method", "draft_model"),
    ("speculative.num_speculative_tokens", 0, "speculative.num_speculative_tokens", "greater than or equal to 1"),
    ("speculative.schedule", [[16, 1, 5]], "speculative.schedule", "start_bs <= end_bs"),
    ("speculative.schedule", [], "speculative.schedule", "empty schedule"),
    ("speculative.temperature", -1, "speculative.temperature", "greater than or equal to 0"),
    ("engines", {}, "engines", "at least one"),
    ("engines.vllm.tensor_parallel_size", 0, "engines.vllm.tensor_parallel_size", "greater than or equal to 1"),
    ("engines.tgi", {}, "engines.tgi", "unknown field"),
    ("deployment.p95_concurrency", 0, "deployment.p95_concurrency", "greater than or equal to 1"),
    ("deployment", _DELETE, "deployment", "required"),
    ("admission.min_token_agreement", 2, "admission.min_token_agreement", "less than or equal to 1"),
    ("bench.concurrency_levels", [4, 2], "bench.concurrency_levels", "ascending"),
    ("bench.rounds", 1, "bench.rounds", "greater than or equal to 2"),
])
def test_bad_field_is_named(path: str, value: Any, field: str, says: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec(_with(path, value), file="b.yaml")
    msg = str(exc.value)
    assert msg.startswith("b.yaml: "), msg
    assert field in msg, msg
    assert says in msg, msg


def test_llamacpp_needs_gguf_files() -> None:
    doc = _with("engines", {"llamacpp": {}})
    doc["speculative"] = {"method": "draft_model", "num_speculative_tokens": 4}
    with pytest.raises(SpecError, match="target.gguf_file"):
        parse_spec(doc)


def test_mtp_takes_no_draft() -> None:
    doc = _with("speculative", {"method": "mtp", "num_speculative_tokens": 1})
    with pytest.raises(SpecError, match="uses no separate draft"):
        parse_spec(doc)
    del doc["draft"]
    assert parse_spec(doc).draft is None


def test_load_spec_resolves_dir_sources(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    doc["target"]["source"] = "dir:models/t"
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(doc))
    spec = load_spec(tmp_path / "b.yaml")
    assert spec.target.dir_path == (tmp_path / "models" / "t").resolve()


def test_unreadable_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.yaml")
    (tmp_path / "x.yaml").write_text("a: [")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(tmp_path / "x.yaml")


def test_shipped_examples_validate() -> None:
    examples = sorted((Path(__file__).parents[1] / "manifests" / "examples").glob("*.yaml"))
    assert len(examples) >= 3
    for ex in examples:
        assert load_spec(ex).name


_MINIMAL = ("apiVersion: specbundle/v1\nmetadata: {name: x}\ntarget: {repo: a/b}\n"
            "speculative: {method: ngram, num_speculative_tokens: 2}\nengines: {vllm: {}}\n"
            "deployment: {p95_concurrency: 1}\n")


@pytest.mark.parametrize(("data", "says"), [
    (_MINIMAL.encode("utf-16"), "UTF-16"),
    (b"apiVersion: \xff\xfe specbundle/v1\n", "not valid UTF-8"),
    (b"a: " + b"[" * 10_000 + b"]" * 10_000 + b"\n", "nested deeper"),
    (_MINIMAL.encode() + b"target: {repo: c/d}\n", "duplicate key 'target'"),
    (b"# " + b"x" * (2 << 20) + b"\n", "larger than"),
])
def test_malformed_spec_files_are_one_line_exit_2(
    tmp_path: Path, data: bytes, says: str, capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.lib.cli import run_cli

    path = tmp_path / "bundle.yaml"
    path.write_bytes(data)
    with pytest.raises(SpecError, match=says):
        load_spec(path)
    code, _, err = run_cli(capsys, "pull", str(path), "--mirror", str(tmp_path / "m"))
    assert code == 2, err
    assert says in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2  # the error line and at most a hint


def test_huge_spec_is_refused_before_parsing(tmp_path: Path) -> None:
    """A 100 MB bundle.yaml is refused by its size, not parsed for minutes."""
    import time

    path = tmp_path / "bundle.yaml"
    with path.open("wb") as fh:
        fh.write(_MINIMAL.encode())
        fh.truncate(100 << 20)
    t0 = time.monotonic()
    with pytest.raises(SpecError, match="larger than"):
        load_spec(path)
    assert time.monotonic() - t0 < 5
