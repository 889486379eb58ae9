"""Prompts: the built-in varied set, bundle prompt files, and the concurrency sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbundle.bench import sweep_levels
from specbundle.bench.workload import default_workload, load_prompts_file
from specbundle.errors import SpecError


def test_default_set_is_varied_and_warmup_is_held_out() -> None:
    w = default_workload()
    assert {p.category for p in w.prompts} == {"chat", "code", "summarisation"}
    assert not {p.text for p in w.warmup} & {p.text for p in w.prompts}
    assert w.sha256 == default_workload().sha256 and len(w.sha256) == 64
    assert [p.id for p in w.cycle(3, len(w.prompts) - 1)] == [
        w.prompts[-1].id, w.prompts[0].id, w.prompts[1].id]


def test_jsonl_with_prompt_or_turns(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"question_id": 81, "category": "writing", "turns": ["a", "b"]})
                 + "\n" + json.dumps({"id": "x", "prompt": "hello"}) + "\n")
    w = load_prompts_file(f)
    assert [(p.id, p.category, p.text) for p in w.prompts] == [
        ("81", "writing", "a"), ("x", "custom", "hello")]
    assert w.source == "p.jsonl"


def test_plain_text_one_prompt_per_line(tmp_path: Path) -> None:
    f = tmp_path / "p.txt"
    f.write_text("first\n\nsecond\n")
    assert [p.text for p in load_prompts_file(f).prompts] == ["first", "second"]


@pytest.mark.parametrize(("content", "match"), [
    ('{"prompt": "a"}\nnot json\n', "line 2: not valid JSON"),
    ('{"prompt": "a", "prompt": "b"}\n{"prompt": "c"}\n', "line 1: duplicate key 'prompt'"),
    ('{"prompt": ""}\n{"prompt": "b"}\n', "line 1: needs a non-empty"),
    ('{"id": 1, "prompt": "a"}\n{"id": 1, "prompt": "b"}\n', "unique"),
    ('{"prompt": "a"}\n', "at least two"),
])
def test_bad_prompt_files_name_the_problem(tmp_path: Path, content: str, match: str) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(content)
    with pytest.raises(SpecError, match=match):
        load_prompts_file(f)


def test_sweep_doubles_to_twice_p95_and_includes_p95() -> None:
    assert sweep_levels(1) == (1, 2)
    assert sweep_levels(24) == (1, 2, 4, 8, 16, 24, 32, 48)
    assert sweep_levels(32) == (1, 2, 4, 8, 16, 32, 64)
