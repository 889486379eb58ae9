"""Mirror store: atomic objects, snapshots, event chain, gc and the mirror CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbundle.digest import sha256_bytes
from specbundle.errors import BundleNotFound, MirrorError
from specbundle.mirror import GENESIS, Mirror
from specbundle.pull import pull_bundle
from specbundle.spec import load_spec
from tests.lib.cli import run_cli
from tests.lib.models import make_model_dir
from tests.lib.specs import spec_text


def _pull(tmp_path: Path, name: str, tseed: int, dseed: int) -> None:
    make_model_dir(tmp_path / f"{name}-t", seed=tseed)
    make_model_dir(tmp_path / f"{name}-d", seed=dseed)
    text = spec_text(name, f"local/{name}-t", "local/shared-draft", source="dir:X")
    text = text.replace('source: "dir:X"}\ndraft', f'source: "dir:{name}-t"}}\ndraft', 1)
    text = text.replace('source: "dir:X"}', f'source: "dir:{name}-d"}}')
    (tmp_path / f"{name}.yaml").write_text(text)
    pull_bundle(load_spec(tmp_path / f"{name}.yaml"), Mirror(tmp_path / "m"))


def test_put_object_is_idempotent_and_readonly(tmp_path: Path) -> None:
    m = Mirror.open(tmp_path / "m", create=True)
    d = m.put_bytes(b"hello")
    assert d == sha256_bytes(b"hello")
    assert m.put_bytes(b"hello") == d
    p = m.object_path(d)
    assert p.read_bytes() == b"hello"
    assert p.stat().st_mode & 0o222 == 0
    assert not list(m.tmp_dir.glob("*.tmp"))
    with pytest.raises(MirrorError):
        m.object_path("../../etc/passwd")


def test_open_refuses_non_mirror(tmp_path: Path) -> None:
    with pytest.raises(MirrorError, match="not a specbundle mirror"):
        Mirror.open(tmp_path)


def test_shared_draft_stored_once_and_gc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _pull(tmp_path, "one", 1, 9)
    _pull(tmp_path, "two", 2, 9)
    m = Mirror.open(tmp_path / "m")
    a, b = m.load_bundle("one"), m.load_bundle("two")
    assert a.draft is not None and b.draft is not None
    assert a.draft.files == b.draft.files
    objects = {p.name for p in (m.root / "objects").rglob("*") if p.is_file()}
    assert objects == a.referenced_blobs() | b.referenced_blobs()
    # removing bundle "one" and collecting keeps the shared draft and bundle two intact
    for f in sorted(m.bundle_dir("one").rglob("*"), reverse=True):
        f.unlink() if f.is_file() else f.rmdir()
    m.bundle_dir("one").rmdir()
    code, out, _ = run_cli(capsys, "mirror", "gc", "--mirror", str(m.root), "--json")
    assert code == 0
    res = json.loads(out)
    assert set(res["removed_objects"]) == a.referenced_blobs() - b.referenced_blobs()
    assert any("local--one-t" in s for s in res["removed_snapshots"])
    left = {p.name for p in (m.root / "objects").rglob("*") if p.is_file()}
    assert left == b.referenced_blobs()
    assert (m.snapshot_dir("local/shared-draft", b.draft.commit) / "config.json").exists()
    assert not m.model_dir("local/one-t").exists()
    assert m.read_events()[-1]["type"] == "gc"


def test_event_log_is_hash_chained(tmp_path: Path) -> None:
    _pull(tmp_path, "one", 1, 2)
    _pull(tmp_path, "two", 3, 2)
    m = Mirror.open(tmp_path / "m")
    lines = m.events_path.read_bytes().splitlines()
    events = [json.loads(x) for x in lines]
    assert events[0]["prev"] == GENESIS
    assert events[1]["prev"] == sha256_bytes(lines[0])
    assert [e["seq"] for e in events] == [0, 1]


def test_ls_show_and_unknown_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _pull(tmp_path, "one", 1, 2)
    code, out, _ = run_cli(capsys, "mirror", "ls", "--mirror", str(tmp_path / "m"), "--json")
    assert code == 0
    assert [b["name"] for b in json.loads(out)["bundles"]] == ["one"]
    code, out, _ = run_cli(capsys, "mirror", "show", "one", "--mirror", str(tmp_path / "m"))
    assert code == 0 and "local/one-t" in out and "skipped pytorch_model.bin" in out
    code, _, err = run_cli(capsys, "mirror", "show", "nope", "--mirror", str(tmp_path / "m"))
    assert code == 2 and "no bundle named 'nope'" in err
    with pytest.raises(BundleNotFound):
        Mirror.open(tmp_path / "m").load_bundle("nope")


def test_snapshot_rebuilt_when_incomplete(tmp_path: Path) -> None:
    _pull(tmp_path, "one", 1, 2)
    m = Mirror.open(tmp_path / "m")
    rec = m.load_bundle("one")
    snap = m.snapshot_dir(rec.target.repo, rec.target.commit)
    (snap / "config.json").unlink()
    with m.lock():
        m.link_snapshot(rec.target)
    assert (snap / "config.json").read_bytes()
