"""Malformed safetensors, one case per rule, and shard-index consistency."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specbundle.scan import ScanOptions, ScanReport, Severity, scan_tree
from tests.lib import corpus
from tests.scan.conftest import FAST, ids

Scan = Callable[..., ScanReport]


def _valid() -> tuple[dict[str, Any], bytes]:
    return corpus.f16_header(("a", (2, 2)), ("b", (4,)))


def test_library_written_file_is_clean(tmp_path: Path) -> None:
    corpus.st_tensors(tmp_path / "model.safetensors",
                      {"a": np.ones((3, 5), np.float16), "b": np.zeros(7, np.int64)})
    rep = scan_tree(tmp_path, options=FAST)
    assert rep.findings == ()


def _case(name: str) -> bytes:
    hdr, data = _valid()
    if name == "header-length-beyond-file":
        return corpus.safetensors_bytes(hdr, data, raw_len=1 << 40)
    if name == "duplicate-key":
        raw = json.dumps(hdr).encode()[:-1] + b', "a": ' + json.dumps(hdr["a"]).encode() + b"}"
        return corpus.safetensors_bytes(raw, data)
    if name == "header-start":
        return corpus.safetensors_bytes(b" " + json.dumps(hdr).encode(), data)
    if name == "unknown-dtype":
        hdr["a"]["dtype"] = "F17"
    elif name == "size-mismatch":
        hdr["a"]["shape"] = [3, 2]
    elif name == "overlap":
        hdr["b"]["data_offsets"] = [4, 12]
        hdr["a"]["data_offsets"] = [0, 8]
        data = data[:12]
    elif name == "offset-range":
        hdr["b"]["data_offsets"] = [8, 16]
        data = data[:10]
    elif name == "trailing-bytes":
        data += b"PAYLOAD!"
    elif name == "tensor-name":
        hdr["../../etc/passwd"] = hdr.pop("b")
    elif name == "gap":
        hdr["b"]["data_offsets"] = [10, 18]
        data += b"\x00\x00"
    elif name == "header-json":
        return corpus.safetensors_bytes(b"{not json", data)
    elif name == "metadata":
        hdr["__metadata__"] = {"format": 1}
    elif name == "tensor-entry":
        hdr["a"]["extra"] = 1
    return corpus.safetensors_bytes(hdr, data)


@pytest.mark.parametrize(("case", "check_id"), [
    ("header-length-beyond-file", "safetensors.header-length"),
    ("duplicate-key", "safetensors.duplicate-key"),
    ("header-start", "safetensors.header-start"),
    ("unknown-dtype", "safetensors.unknown-dtype"),
    ("size-mismatch", "safetensors.size-mismatch"),
    ("overlap", "safetensors.overlap"),
    ("offset-range", "safetensors.offset-range"),
    ("trailing-bytes", "safetensors.trailing-bytes"),
    ("tensor-name", "safetensors.tensor-name"),
    ("gap", "safetensors.gap"),
    ("header-json", "safetensors.header-json"),
    ("metadata", "safetensors.metadata"),
    ("tensor-entry", "safetensors.tensor-entry"),
])
def test_malformed(scan_one: Scan, case: str, check_id: str) -> None:
    rep = scan_one("model.safetensors", _case(case))
    assert check_id in ids(rep), [f.to_json() for f in rep.findings]
    assert rep.blocked


@pytest.mark.parametrize("entry", [
    {"dtype": ["F16"], "shape": [1], "data_offsets": [0, 2]},
    {"dtype": "F16", "shape": 5, "data_offsets": [0, 2]},
    {"dtype": "F16", "shape": [True], "data_offsets": [0, 2]},
    {"dtype": "F16", "shape": [1], "data_offsets": [2, 0]},
    {"dtype": "F16", "shape": [1], "data_offsets": "0-2"},
    ["dtype", "shape"],
])
def test_odd_entries_are_findings_not_crashes(scan_one: Scan, entry: object) -> None:
    rep = scan_one("model.safetensors", corpus.safetensors_bytes({"a": entry}, b"\x00\x00"))
    assert rep.crashed_checks == ()
    assert ids(rep) & {"safetensors.tensor-entry", "safetensors.unknown-dtype"}


def test_header_above_limit(scan_one: Scan) -> None:
    hdr, data = _valid()
    rep = scan_one("model.safetensors", corpus.safetensors_bytes(hdr, data),
                   options=ScanOptions(second_opinions=False, max_safetensors_header=32))
    assert "safetensors.header-length" in ids(rep)


def test_deeply_nested_header_is_a_finding_not_a_crash(scan_one: Scan) -> None:
    rep = scan_one("model.safetensors", corpus.safetensors_bytes(b"[" * 100_000, b""))
    assert "safetensors.header-json" in ids(rep)
    assert rep.crashed_checks == ()


def _shards(d: Path) -> dict[str, Any]:
    corpus.st_tensors(d / "model-00001-of-00002.safetensors", {"a": np.zeros(4, np.float16)})
    corpus.st_tensors(d / "model-00002-of-00002.safetensors", {"b": np.zeros(2, np.float16)})
    return {"metadata": {"total_size": 12},
            "weight_map": {"a": "model-00001-of-00002.safetensors",
                           "b": "model-00002-of-00002.safetensors"}}


def test_index_consistent(tmp_path: Path) -> None:
    idx = _shards(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(idx))
    assert ids(scan_tree(tmp_path, options=FAST)) == set()


@pytest.mark.parametrize(("mutate", "check_id"), [
    (lambda i, d: i["weight_map"].update(c="model-00003-of-00003.safetensors"),
     "safetensors.index-missing-shard"),
    (lambda i, d: i["weight_map"].update(c="model-00001-of-00002.safetensors"),
     "safetensors.index-tensor-missing"),
    (lambda i, d: corpus.st_tensors(d / "model-00001-of-00002.safetensors", {
        "a": np.zeros(4, np.float16), "x": np.zeros(1, np.float16)}),
     "safetensors.index-unlisted-tensor"),
    (lambda i, d: corpus.st_tensors(d / "extra.safetensors", {"z": np.zeros(1, np.float16)}),
     "safetensors.index-extra-shard"),
    (lambda i, d: corpus.st_tensors(d / "model-00002-of-00002.safetensors", {
        "a": np.zeros(4, np.float16), "b": np.zeros(2, np.float16)}),
     "safetensors.index-duplicate-tensor"),
    (lambda i, d: i["metadata"].update(total_size=999), "safetensors.index-total-size"),
])
def test_index_inconsistent(tmp_path: Path, mutate: Callable[[dict[str, Any], Path], object],
                            check_id: str) -> None:
    idx = _shards(tmp_path)
    mutate(idx, tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(idx))
    rep = scan_tree(tmp_path, options=FAST)
    assert check_id in ids(rep, at_least=Severity.MEDIUM)


def test_index_with_duplicate_keys(tmp_path: Path) -> None:
    _shards(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text(
        '{"weight_map": {"a": "model-00001-of-00002.safetensors", '
        '"a": "model-00002-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}')
    assert "safetensors.index-json" in ids(scan_tree(tmp_path, options=FAST))
