"""pull from a local folder (``dir:`` source): digests, content commits, range resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specbundle.digest import hash_file
from specbundle.errors import SpecError
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.spec import load_spec
from tests.lib.models import make_model_dir
from tests.lib.specs import spec_text


def _spec(tmp_path: Path, name: str = "local") -> Path:
    p = tmp_path / "bundle.yaml"
    p.write_text(spec_text(name, "local/target", "local/draft", source="dir:PLACEHOLDER")
                 .replace('source: "dir:PLACEHOLDER"}\ndraft', 'source: "dir:t"}\ndraft')
                 .replace('source: "dir:PLACEHOLDER"}', 'source: "dir:d"}'))
    return p


def test_dir_source_records_content_commit(tmp_path: Path) -> None:
    make_model_dir(tmp_path / "t", seed=1)
    make_model_dir(tmp_path / "d", seed=2)
    res = pull_bundle(load_spec(_spec(tmp_path)), Mirror(tmp_path / "m"))
    t = res.record.target
    assert t.commit_kind == "content" and len(t.commit) == 40
    assert t.endpoint is None
    assert t.source == f"dir:{(tmp_path / 't').resolve()}"
    # same bytes -> same commit, wherever the folder lives
    make_model_dir(tmp_path / "elsewhere" / "t", seed=1)
    make_model_dir(tmp_path / "elsewhere" / "d", seed=2)
    objects = sorted((tmp_path / "m" / "objects").rglob("*"))
    again = pull_bundle(load_spec(_spec(tmp_path / "elsewhere", "local2")), Mirror(tmp_path / "m"))
    assert again.record.target.commit == t.commit
    # a folder must be read to know its digests, but identical bytes are stored once
    assert sorted((tmp_path / "m" / "objects").rglob("*")) == objects


class _StopAfter:
    """A progress sink that interrupts the pull after some bytes of a large file."""

    def __init__(self, limit: int) -> None:
        self.limit, self.seen = limit, 0

    def add_task(self, description: str, *, total: float | None = None) -> Any:
        return description

    def advance(self, task_id: Any, advance: float = 1) -> None:
        self.seen += int(advance)
        if self.seen > self.limit:
            raise KeyboardInterrupt


def test_interrupted_dir_pull_resumes_with_a_range(tmp_path: Path) -> None:
    make_model_dir(tmp_path / "t", seed=1, big=24 << 20)
    make_model_dir(tmp_path / "d", seed=2)
    spec = load_spec(_spec(tmp_path))
    m = Mirror(tmp_path / "m")
    with pytest.raises(KeyboardInterrupt):
        pull_bundle(spec, m, workers=1, progress=_StopAfter(8 << 20))
    assert Mirror.open(m.root).bundle_names() == []
    parts = list((m.root / "tmp" / "partial").glob("*.part"))
    assert max(p.stat().st_size for p in parts) > 0
    res = pull_bundle(spec, m, workers=1)
    assert "model-big.safetensors" in res.artifacts[0].resumed
    big = res.record.target.file("model-big.safetensors")
    assert big is not None and big.size > 24 << 20
    assert hash_file(m.snapshot_dir("local/target", res.record.target.commit)
                     / "model-big.safetensors") == big.sha256


def test_prompts_file_ships_inside_the_bundle(tmp_path: Path) -> None:
    make_model_dir(tmp_path / "t", seed=1)
    make_model_dir(tmp_path / "d", seed=2)
    spec_path = _spec(tmp_path)
    spec_path.write_text(spec_path.read_text() + "bench: {prompts_file: prompts/p.jsonl}\n")
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "p.jsonl").write_text('{"prompt": "hi"}\n')
    m = Mirror(tmp_path / "m")
    pull_bundle(load_spec(spec_path), m, spec_dir=tmp_path)
    assert m.read_bundle_file("local", "prompts/p.jsonl") == b'{"prompt": "hi"}\n'
    (tmp_path / "prompts" / "p.jsonl").unlink()
    with pytest.raises(SpecError, match=r"bench\.prompts_file"):
        pull_bundle(load_spec(spec_path), m, spec_dir=tmp_path)


def test_a_resumed_pull_adopts_its_logged_event_within_the_same_second(tmp_path: Path) -> None:
    """A pull that crashed after logging its event, in the same second as the record now
    visible (``created`` has one-second resolution): the rerun saves the record under that
    event instead of logging the pull twice. The event is told from the visible record's own
    by its commits."""
    make_model_dir(tmp_path / "t", seed=1)
    make_model_dir(tmp_path / "d", seed=2)
    m = Mirror.open(tmp_path / "m", create=True)
    first = pull_bundle(load_spec(_spec(tmp_path)), m).record
    new_t = tmp_path / "new"
    new_t.mkdir()
    make_model_dir(new_t / "t", seed=3)
    make_model_dir(new_t / "d", seed=2)
    scratch = Mirror.open(tmp_path / "scratch", create=True)
    planned = pull_bundle(load_spec(_spec(new_t)), scratch).record
    # what the crashed pull left: its event, logged in the visible record's second
    art = {r: {"repo": a.repo, "commit": a.commit, "endpoint": a.endpoint,
               "files": len(a.files)} for r, a in (("target", planned.target),
                                                   ("draft", planned.draft)) if a is not None}
    with m.lock():
        m.append_event("pull", "local", {**art, "replaced": first.created,
                                         "created": first.created})
    again = pull_bundle(load_spec(_spec(new_t)), m).record
    assert again.target.commit == planned.target.commit != first.target.commit
    assert again.created == first.created
    pulls = [e for e in m.read_events() if e["type"] == "pull"]
    assert [e["data"]["target"]["commit"] for e in pulls] == [first.target.commit,
                                                              planned.target.commit]
