"""The strict parsers refuse what two readers could read differently, and never crash."""

from __future__ import annotations

import pytest

from specbundle import _faults
from specbundle.strict import MalformedDocument, dumps_safe, loads_json, loads_yaml


def test_json_plain_document_parses() -> None:
    assert loads_json(b'{"a": [1, {"b": null}], "c": "x"}') == {"a": [1, {"b": None}], "c": "x"}


@pytest.mark.parametrize(("raw", "reason"), [
    (b'{"a": 1, "a": 2}', "duplicate key 'a'"),
    (b'{"a": NaN}', "non-JSON constant"),
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
    (b'{"a": "\\ud800"}', "lone surrogate"),
    (b"\xff\xfe{\x00}\x00", "UTF-16"),
    (b'{"a": "\xc3"}', "not valid UTF-8"),
    (b'{"a": ', "not valid JSON"),
], ids=["dup", "nan", "deep", "surrogate", "utf16", "utf8", "truncated"])
def test_json_refuses(raw: bytes, reason: str) -> None:
    with pytest.raises(MalformedDocument, match=reason):
        loads_json(raw)


def test_json_depth_and_size_limits_are_parameters() -> None:
    loads_json(b"[[[1]]]", max_depth=3)
    with pytest.raises(MalformedDocument, match="nested deeper than 2"):
        loads_json(b"[[[1]]]", max_depth=2)
    with pytest.raises(MalformedDocument, match="larger than 4 bytes"):
        loads_json(b"[1, 2]", max_bytes=4)


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    assert loads_json('{"t": "' + "[" * 500 + '"}') == {"t": "[" * 500}


def test_yaml_plain_document_parses() -> None:
    assert loads_yaml("a: 1\nb: [x, y]\n") == {"a": 1, "b": ["x", "y"]}
    assert loads_yaml("") is None


@pytest.mark.parametrize(("raw", "reason"), [
    ("require: 1\nother: 2\nrequire: 3\n", "line 3: duplicate key 'require'"),
    ("a:\n  b: 1\n  b: 2\n", "duplicate key 'b'"),
    ("- " * 10_000 + "x\n", "nested deeper"),
    ("[" * 10_000 + "]" * 10_000, "nested deeper"),
    ("a: &x [1]\n" + "".join(f"b{i}: *x\n" for i in range(100)), "aliases"),
    ("a: [\n", "not valid YAML"),
], ids=["dup-top", "dup-nested", "deep-block", "deep-flow", "alias-bomb", "truncated"])
def test_yaml_refuses(raw: str, reason: str) -> None:
    with pytest.raises(MalformedDocument, match=reason):
        loads_yaml(raw)


def test_yaml_encoding_and_size() -> None:
    with pytest.raises(MalformedDocument, match="UTF-16"):
        loads_yaml("a: 1\n".encode("utf-16"))
    with pytest.raises(MalformedDocument, match="not valid UTF-8"):
        loads_yaml(b"a: \xe9t\xe9\n")
    with pytest.raises(MalformedDocument, match="larger than"):
        loads_yaml(b"a: " + b"x" * (2 * 1024 * 1024))
    assert loads_yaml("\ufeffa: 1\n".encode()) == {"a": 1}


def test_dumps_safe_escapes_hostile_strings() -> None:
    out = dumps_safe({"name": "\udcff\u202e"})
    assert "\\udcff" in out and "\\u202e" in out


def test_fault_point_is_inert_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_faults.ENV, raising=False)
    _faults.point("test.nothing")  # returns: no crash
    monkeypatch.setenv(_faults.ENV, "test.other")
    _faults.point("test.nothing")
    assert _faults.ENV == "SPECBUNDLE_CRASH_AT"
