"""Signed checkpoints: they protect the tail, and only trusted ones count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbundle.attest import generate_key
from specbundle.audit import read_checkpoints, verify_events, write_checkpoint
from specbundle.errors import UsageError, VerificationError
from specbundle.mirror import Mirror


@pytest.fixture
def mirror(tmp_path: Path) -> Mirror:
    m = Mirror.open(tmp_path / "m", create=True)
    with m.lock():
        for i in range(4):
            m.append_event("pull", f"b{i}", {"n": i})
    return m


def _edit_last_real_entry(m: Mirror, seq: int) -> None:
    lines = m.events_path.read_bytes().splitlines(keepends=True)
    ev = json.loads(lines[seq])
    ev["data"] = {"n": 99}
    lines[seq] = json.dumps(ev, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    m.events_path.write_bytes(b"".join(lines))


def test_checkpoint_covers_the_tail_and_forged_ones_do_not_count(mirror: Mirror) -> None:
    key, attacker = generate_key("ecdsa-p256"), generate_key("ed25519")
    cp = write_checkpoint(mirror, [key])
    assert (cp.seq, cp.signers) == (3, frozenset({key.fingerprint}))
    assert mirror.read_events()[-1]["type"] == "checkpoint"
    assert verify_events(mirror, [key.public]).ok
    _edit_last_real_entry(mirror, 3)  # seq 3's successor is the checkpoint event: caught anyway
    with pytest.raises(VerificationError, match="refusing to checkpoint a broken event log"):
        write_checkpoint(mirror, [attacker])  # the attacker cannot bless the edit either...
    lines = mirror.events_path.read_bytes().splitlines(keepends=True)
    mirror.events_path.write_bytes(b"".join(lines[:-1]))  # ...so drop the checkpoint event
    with mirror.lock():
        mirror.append_event("gc", None, {})
    forged = write_checkpoint(mirror, [attacker])  # chain now "intact" for the attacker
    res = verify_events(mirror, [key.public])
    assert not res.ok
    assert [(i.kind, i.seq) for i in res.chain.issues] == [("edited", 3)]
    assert any(f"line {forged.line}" in p and "not used" in p for p in res.problems)
    cps = read_checkpoints(mirror, [key.public])
    assert [c.trusted for c in cps] == [True, False]


def test_without_policy_checkpoints_are_reported_unverified(mirror: Mirror) -> None:
    assert verify_events(mirror, []).ok  # no checkpoints: the chain alone is intact
    write_checkpoint(mirror, [generate_key("ecdsa-p256")])
    res = verify_events(mirror, [])
    assert not res.ok
    assert res.problems == ("1 signed checkpoint(s) could not be verified: no trust policy "
                            "given (--trust)",)


def test_checkpoint_needs_a_key_and_entries(tmp_path: Path) -> None:
    m = Mirror.open(tmp_path / "empty", create=True)
    with pytest.raises(UsageError, match="empty"):
        write_checkpoint(m, [generate_key("ecdsa-p256")])
    with pytest.raises(UsageError, match="no signing key"):
        write_checkpoint(m, [])


def test_garbage_in_checkpoint_file_is_a_problem(mirror: Mirror) -> None:
    key = generate_key("ecdsa-p256")
    write_checkpoint(mirror, [key])
    path = mirror.root / "audit" / "checkpoints.jsonl"
    path.write_bytes(path.read_bytes() + b"{not json\n")
    res = verify_events(mirror, [key.public])
    assert res.chain.ok
    assert any("line 2 is not a checkpoint" in p for p in res.problems)


def test_deleting_the_newest_checkpoint_and_the_tail_fails_after_an_export(
        tmp_path: Path) -> None:
    """Item 6: an exported index carried the log head away; a truncated log falls below it."""
    from specbundle.audit.checkpoint import verify_events, write_checkpoint
    from specbundle.transfer import export_bundle
    from tests.lib.bundles import make_signed

    s = make_signed(tmp_path)
    keys = [s.key.public]
    write_checkpoint(s.mirror, [s.key])
    cut = len(s.mirror.events_path.read_bytes().splitlines())
    export_bundle(s.mirror, "pair", tmp_path / "set", [s.key])
    write_checkpoint(s.mirror, [s.key])
    assert verify_events(s.mirror, keys).ok
    cps = (s.mirror.root / "audit" / "checkpoints.jsonl")
    cps.write_bytes(b"\n".join(cps.read_bytes().splitlines()[:1]) + b"\n")
    lines = s.mirror.events_path.read_bytes().splitlines()
    s.mirror.events_path.write_bytes(b"\n".join(lines[:cut]) + b"\n")
    check = verify_events(s.mirror, keys)
    assert not check.ok
    assert any("truncated" in i.message for i in check.chain.issues)


def test_checkpoints_chain_to_their_predecessor(tmp_path: Path) -> None:
    from specbundle.audit.checkpoint import verify_events, write_checkpoint
    from tests.lib.bundles import make_signed

    s = make_signed(tmp_path)
    for _ in range(3):
        write_checkpoint(s.mirror, [s.key])
    cps = s.mirror.root / "audit" / "checkpoints.jsonl"
    lines = cps.read_bytes().splitlines()
    cps.write_bytes(b"\n".join([lines[0], lines[2]]) + b"\n")  # the middle one deleted
    check = verify_events(s.mirror, [s.key.public])
    assert any("does not chain to line" in p for p in check.problems)


@pytest.mark.parametrize("what", ["file-link", "fifo", "folder", "dir-link"])
def test_a_checkpoint_file_planted_as_a_link_fifo_or_folder_is_refused(
        mirror: Mirror, tmp_path: Path, what: str) -> None:
    """Issue 22 item 1: the append goes through ``audit/``'s no-follow fd to a regular file
    only; a FIFO would hang it, a link would append to a file outside the mirror."""
    import os

    from specbundle.audit.checkpoint import CHECKPOINTS_FILE
    from specbundle.errors import CorruptMirror

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    path = mirror.root / CHECKPOINTS_FILE
    path.parent.mkdir()
    if what == "dir-link":
        path.parent.rmdir()
        path.parent.symlink_to(victim, target_is_directory=True)
    elif what == "file-link":
        path.symlink_to(victim / "keep")
    elif what == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    with pytest.raises(CorruptMirror) as err:
        write_checkpoint(mirror, [generate_key("ed25519")])
    assert err.value.exit_code == 3 and "\n" not in err.value.message
    assert ("symbolic link" if "link" in what else "not a regular file") in err.value.message
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]
    assert (victim / "keep").read_text() == "precious"
