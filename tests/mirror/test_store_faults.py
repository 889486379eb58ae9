"""Store reliability without a hub: framed log (torn tails, full disk), leases vs gc, corrupt
records, tmp reclamation. Crashes are real ``os._exit`` at named commit points in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specbundle import _faults
from specbundle.digest import sha256_bytes
from specbundle.errors import CorruptMirror, DiskError
from specbundle.mirror import Mirror
from specbundle.mirror.eventlog import REPAIR_EVENT
from tests.lib.cli import run_cli
from tests.lib.fs import fill
from tests.mirror.test_mirror import _pull


def _chain_ok(m: Mirror) -> list[dict[str, object]]:
    raw = [ln for ln in m.events_path.read_bytes().split(b"\n") if ln]
    events = [json.loads(x) for x in raw]
    for i, ev in enumerate(events):
        assert ev["seq"] == i
        assert ev["prev"] == ("0" * 64 if i == 0 else sha256_bytes(raw[i - 1]))
    assert m.events_path.read_bytes().endswith(b"\n")
    return events


def _in_subprocess(root: Path, code: str, crash_at: str | None) -> int:
    env = {**os.environ}
    env.pop(_faults.ENV, None)
    if crash_at:
        env[_faults.ENV] = crash_at
    prog = "from pathlib import Path\nfrom specbundle.mirror import Mirror\n" \
           f"m = Mirror.open(Path({str(root)!r}), create=True)\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", prog], env=env, check=False,
                          capture_output=True, timeout=60).returncode


@pytest.mark.parametrize("point", ["log.half-written", "log.written"])
def test_crash_mid_append_is_repaired_by_the_next_writer(tmp_path: Path, point: str) -> None:
    assert point in _faults.REGISTERED
    m = Mirror.open(tmp_path / "m", create=True)
    with m.lock():
        m.append_event("first", None, {"n": 1})
    code = "with m.lock():\n    m.append_event('second', None, {'n': 2})\n"
    assert _in_subprocess(m.root, code, point) == 137
    torn = not m.events_path.read_bytes().endswith(b"\n")
    assert torn == (point == "log.half-written")
    # readers skip a torn tail; the next writer repairs it under the lock, with an event
    assert [e["type"] for e in m.read_events()] == ["first"] + ([] if torn else ["second"])
    assert _in_subprocess(m.root, "with m.lock():\n    m.append_event('third', None, {})\n",
                          None) == 0
    events = _chain_ok(m)
    kinds = [e["type"] for e in events]
    if torn:
        assert kinds == ["first", REPAIR_EVENT, "third"]
        assert events[1]["data"]["removed_bytes"] > 0  # type: ignore[index]
    else:
        assert kinds == ["first", "second", "third"]


def test_a_torn_line_glued_to_a_later_append_is_repaired(tmp_path: Path) -> None:
    """What the old appender left behind: half a line with the next event stuck to it."""
    m = Mirror.open(tmp_path / "m", create=True)
    with m.lock():
        m.append_event("first", None, {})
    with m.events_path.open("ab") as fh:
        fh.write(b'{"seq":1,"ti' + b'{"seq":1,"type":"x"}\n')
    with m.lock():
        m.append_event("next", None, {})
    assert [e["type"] for e in _chain_ok(m)] == ["first", REPAIR_EVENT, "next"]


def test_damage_before_the_last_line_is_corruption_not_a_torn_tail(tmp_path: Path) -> None:
    m = Mirror.open(tmp_path / "m", create=True)
    with m.lock():
        m.append_event("first", None, {})
    with m.events_path.open("ab") as fh:
        fh.write(b"garbage\nmore garbage\n")
    with pytest.raises(CorruptMirror, match="corrupt before its last line"), m.lock():
        m.append_event("next", None, {})
    with pytest.raises(CorruptMirror):
        m.read_events()


def test_full_disk_during_a_log_append_keeps_the_log(small_fs: Path) -> None:
    m = Mirror.open(small_fs / "m", create=True)
    with m.lock():
        m.append_event("first", None, {})
    before = m.events_path.read_bytes()
    filler = fill(small_fs)
    big = {"blob": "x" * 200_000}  # more than any slack left in the log's last page
    with pytest.raises(DiskError) as exc, m.lock():
        m.append_event("second", None, big)
    msg = exc.value.message
    assert "no space left" in msg and str(m.events_path) in msg and "bytes needed" in msg
    assert "\n" not in msg
    assert m.events_path.read_bytes() == before
    filler.unlink()
    with m.lock():
        m.append_event("second", None, big)
    assert [e["type"] for e in _chain_ok(m)] == ["first", "second"]


def test_a_lease_keeps_pinned_objects_from_gc_until_it_ends(tmp_path: Path) -> None:
    m = Mirror.open(tmp_path / "m", create=True)
    digest = m.put_bytes(b"verified by a running pull, not committed yet")
    lease = m.lease("pull")
    lease.pin(digest)
    res = m.gc()
    assert res.live_writers == 1 and digest not in res.removed_objects
    assert m.has_object(digest)
    lease.close()
    assert digest in m.gc().removed_objects
    assert not m.has_object(digest)


def test_a_killed_writers_lease_is_reaped(tmp_path: Path) -> None:
    m = Mirror.open(tmp_path / "m", create=True)
    digest = m.put_bytes(b"pinned by a writer that dies")
    code = f"l = m.lease('pull')\nl.pin({digest!r})\nimport os\nos._exit(137)\n"
    assert _in_subprocess(m.root, code, None) == 137
    assert list((m.root / "leases").glob("*.lease"))
    res = m.gc()
    assert res.live_writers == 0 and digest in res.removed_objects
    assert not list((m.root / "leases").glob("*.lease"))


def test_planted_lease_entries_are_never_read_through(tmp_path: Path) -> None:
    """A FIFO would hang gc's open and a link would make it read (and pin by) another file:
    both are dropped unread; a live writer's lease still protects what it pins."""
    m = Mirror.open(tmp_path / "m", create=True)
    kept = m.put_bytes(b"pinned by a live writer")
    loose = m.put_bytes(b"named only by a planted link")
    outside = tmp_path / "outside.lease"
    outside.write_text(f"{loose}\n")
    lease = m.lease("pull")
    lease.pin(kept)
    leases = m.root / "leases"
    os.mkfifo(leases / "fifo.lease")
    (leases / "link.lease").symlink_to(outside)
    res = m.gc()
    assert res.live_writers == 1
    assert m.has_object(kept) and loose in res.removed_objects
    assert sorted(p.name for p in leases.iterdir()) == [lease.path.name]
    assert outside.read_text() == f"{loose}\n"
    lease.close()


def test_planted_refs_are_dropped_unread(tmp_path: Path) -> None:
    """gc reads a ref only as a small regular file: a link to ``/dev/zero`` or a FIFO in
    ``refs/`` is removed like a ref to a collected commit, and gc finishes."""
    _pull(tmp_path, "a", 1, 2)
    m = Mirror.open(tmp_path / "m")
    mdir = m.root / "models--local--a-t"
    refs = mdir / "refs"
    refs.mkdir()
    commit = next((mdir / "snapshots").iterdir()).name
    (refs / "main").write_text(f"{commit}\n")
    (refs / "gone").write_text("0" * 40)
    os.mkfifo(refs / "fifo")
    (refs / "zero").symlink_to("/dev/zero")
    m.gc()
    assert sorted(p.name for p in refs.iterdir()) == ["main"]


def test_gc_reclaims_temp_leftovers_and_refuses_on_a_corrupt_record(tmp_path: Path) -> None:
    _pull(tmp_path, "a", 1, 2)
    m = Mirror.open(tmp_path / "m")
    (m.tmp_dir / "partial").mkdir(exist_ok=True)
    (m.tmp_dir / "partial" / "x.part").write_bytes(b"half a download")
    (m.tmp_dir / ".obj.leftover.tmp").write_bytes(b"x")
    res = m.gc()
    assert set(res.removed_tmp) == {"tmp/partial", "tmp/.obj.leftover.tmp"}
    assert not list(m.tmp_dir.iterdir())
    (m.bundle_dir("a") / "bundle.json").write_text('{"schema": 1, "schema": 2}')
    with pytest.raises(CorruptMirror, match="gc refused"):
        m.gc()


def test_corrupt_record_is_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _pull(tmp_path, "a", 1, 2)
    rec = tmp_path / "m" / "bundles" / "a" / "bundle.json"
    for bad in (b"[" * 100_000, b'{"name": "a", "name": "b"}', b"\xff\xfe{}", b"{}"):
        rec.write_bytes(bad)
        code, _, err = run_cli(capsys, "mirror", "show", "a", "--mirror", str(tmp_path / "m"))
        assert code == 3, (bad[:10], err)
        assert "Traceback" not in err and "bundle.json" in err


def test_a_mirror_from_the_older_layout_is_read_then_migrated_by_gc(tmp_path: Path) -> None:
    """Old mirrors have real ``snapshots/<commit>`` folders and no per-selection trees."""
    import os
    import shutil

    _pull(tmp_path, "a", 1, 2)
    m = Mirror.open(tmp_path / "m")
    rec = m.load_bundle("a")
    for art in rec.artifacts:  # rewrite the store as the previous release laid it out
        snap = m.snapshot_dir(art.repo, art.commit)
        snap.unlink()
        shutil.rmtree(m.model_dir(art.repo) / "trees")
        for f in art.files:
            (snap / f.path).parent.mkdir(parents=True, exist_ok=True)
            (snap / f.path).symlink_to(os.path.relpath(
                m.model_dir(art.repo) / "blobs" / f.sha256, (snap / f.path).parent))
    for art in rec.artifacts:
        assert m.artifact_dir(art) == m.snapshot_dir(art.repo, art.commit)
    m.gc()
    for art in rec.artifacts:
        tree = m.artifact_dir(art)
        assert tree.parent.name == "trees" and tree.is_dir()
        assert m.snapshot_dir(art.repo, art.commit).is_symlink()
        assert {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_symlink()} \
            == {f.path for f in art.files}
