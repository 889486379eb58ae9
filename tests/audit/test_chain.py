"""The event log's hash chain: every deletion, reordering or edit is named exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbundle.audit.chain import verify_chain, verify_log
from specbundle.digest import sha256_bytes
from specbundle.mirror import Mirror

N = 6


@pytest.fixture
def log_lines(tmp_path: Path) -> list[bytes]:
    """A real log of N events written by the mirror."""
    m = Mirror.open(tmp_path / "m", create=True)
    with m.lock():
        for i in range(N):
            m.append_event("pull" if i % 2 else "scan", f"b{i % 3}", {"n": i})
    return m.events_path.read_bytes().splitlines()


def head(lines: list[bytes]) -> dict[int, str]:
    """A checkpoint over the last entry, as the signed checkpoint records it."""
    return {N - 1: sha256_bytes(lines[-1])}


def test_intact_chain_verifies(log_lines: list[bytes], tmp_path: Path) -> None:
    rep = verify_chain(log_lines, head(log_lines))
    assert rep.ok, rep.issues
    assert (rep.entries, rep.head_seq, rep.head_digest) == (N, N - 1, sha256_bytes(log_lines[-1]))
    assert verify_log(tmp_path / "absent.jsonl").ok


@pytest.mark.parametrize("k", range(N))
def test_deleted_line_is_named(log_lines: list[bytes], k: int) -> None:
    lines = log_lines[:k] + log_lines[k + 1:]
    rep = verify_chain(lines, head(log_lines))
    assert [(i.kind, i.seq) for i in rep.issues] == [("deleted", k)], rep.issues
    assert f"seq {k}" in rep.issues[0].message


def test_deleted_tail_without_checkpoint_is_undetectable_but_with_one_is_named(
    log_lines: list[bytes],
) -> None:
    assert verify_chain(log_lines[:-2]).ok  # documented limit: sign checkpoints
    rep = verify_chain(log_lines[:-2], head(log_lines))
    assert [(i.kind, i.seq) for i in rep.issues] == [("deleted", N - 2)]
    assert f"{N - 2}..{N - 1}" in rep.issues[0].message


@pytest.mark.parametrize("k", range(N))
def test_edited_line_is_named(log_lines: list[bytes], k: int) -> None:
    ev = json.loads(log_lines[k])
    ev["data"]["n"] = 1000 + k
    lines = [*log_lines]
    lines[k] = json.dumps(ev, sort_keys=True, separators=(",", ":")).encode()
    rep = verify_chain(lines, head(log_lines))
    assert [(i.kind, i.seq, i.line) for i in rep.issues] == [("edited", k, k + 1)], rep.issues


@pytest.mark.parametrize("k", range(N))
def test_edited_prev_field_is_named(log_lines: list[bytes], k: int) -> None:
    ev = json.loads(log_lines[k])
    ev["prev"] = "f" * 64
    lines = [*log_lines]
    lines[k] = json.dumps(ev, sort_keys=True, separators=(",", ":")).encode()
    rep = verify_chain(lines, head(log_lines))
    assert {(i.kind, i.seq) for i in rep.issues} == {("edited", k)}, rep.issues


@pytest.mark.parametrize("k", range(N))
def test_garbled_line_is_named(log_lines: list[bytes], k: int) -> None:
    lines = [*log_lines]
    lines[k] = lines[k][:-7]
    rep = verify_chain(lines, head(log_lines))
    assert [(i.kind, i.seq, i.line) for i in rep.issues] == [("malformed", k, k + 1)], rep.issues


@pytest.mark.parametrize("k", range(N - 1))
def test_swapped_lines_are_named(log_lines: list[bytes], k: int) -> None:
    lines = [*log_lines]
    lines[k], lines[k + 1] = lines[k + 1], lines[k]
    rep = verify_chain(lines, head(log_lines))
    assert [(i.kind, i.seq, i.line) for i in rep.issues] == [("reordered", k, k + 2)], rep.issues
    assert f"seq {k + 1}" in rep.issues[0].message


def test_moved_and_duplicated_lines(log_lines: list[bytes]) -> None:
    moved = [*log_lines[1:], log_lines[0]]
    rep = verify_chain(moved, head(log_lines))
    assert [(i.kind, i.seq, i.line) for i in rep.issues] == [("reordered", 0, N)]
    dup = [*log_lines, log_lines[2]]
    rep = verify_chain(dup, head(log_lines))
    assert [(i.kind, i.seq, i.line) for i in rep.issues] == [("forked", 2, N + 1)]


def test_inserted_forged_entry(log_lines: list[bytes]) -> None:
    """A forged entry claiming seq 3's predecessor is reported as a fork at its line."""
    forged = json.loads(log_lines[3])
    forged["data"] = {"forged": True}
    lines = [*log_lines, json.dumps(forged).encode()]
    rep = verify_chain(lines, head(log_lines))
    assert [(i.kind, i.line) for i in rep.issues] == [("forked", N + 1)]
