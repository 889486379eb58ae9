"""A mirror folder swapped for a link between the check and the use never redirects a write.

Every writer holds a no-follow directory fd (``_fsutil.open_dir``) and acts on the final
component through it. The swap happens at the worst moment: right after the folder was opened
and checked (the ``fs.dir-opened`` point), before the write, rename or delete it guards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from specbundle import _faults, attest
from specbundle.errors import CorruptMirror
from specbundle.mirror import Mirror, versions
from specbundle.mirror.gc import collect


def _swapper(target: Path, outside: Path) -> tuple[Callable[[object], None], list[Path]]:
    """A hook that, when ``target`` has just been opened, moves it aside (still inside the
    mirror) and puts a link to ``outside`` in its place."""
    moved: list[Path] = []

    def swap(opened: object) -> None:
        if opened == target and not moved and not target.is_symlink():
            aside = target.with_name(target.name + ".aside")
            target.rename(aside)
            target.symlink_to(outside, target_is_directory=True)
            moved.append(aside)
    return swap, moved


@pytest.fixture
def mirror(tmp_path: Path) -> Mirror:
    return Mirror.open(tmp_path / "m", create=True)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "keep").write_bytes(b"not the mirror's")
    return out


def _untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["keep"]
    assert (outside / "keep").read_bytes() == b"not the mirror's"


def test_a_bundle_file_write_lands_in_the_folder_checked(mirror: Mirror, outside: Path) -> None:
    mirror.write_bundle_file("pair", "render/old.txt", b"old")
    swap, moved = _swapper(mirror.root / "bundles/pair/render", outside)
    with _faults.hook("fs.dir-opened", swap):
        mirror.write_bundle_file("pair", "render/serve.sh", b"#!/bin/sh\n")
    assert moved, "the swap did not happen"
    _untouched(outside)
    assert (moved[0] / "serve.sh").read_bytes() == b"#!/bin/sh\n"  # inside the mirror
    assert not list(moved[0].glob(".*.tmp"))


def test_flipping_current_lands_in_the_folder_checked(mirror: Mirror, outside: Path) -> None:
    mirror.write_bundle_file("pair", "x", b"")
    swap, moved = _swapper(mirror.root / "bundles/pair", outside)
    with _faults.hook("fs.dir-opened", swap):
        versions.flip_current(mirror, "pair", 7)
    assert moved
    _untouched(outside)
    assert (moved[0] / versions.CURRENT_REF).read_bytes() == b"7\n"


def test_an_attestation_append_lands_in_the_folder_checked(mirror: Mirror,
                                                           outside: Path) -> None:
    mirror.write_bundle_file("pair", "x", b"")
    key = attest.generate_key("ed25519")
    st = attest.Statement.build(attest.artifact_subjects("org/t", "cd" * 32, "a" * 40),
                                attest.BENCH_EVIDENCE_V1,
                                {"timeCreated": "2026-01-01T00:00:00Z", "runId": "r1",
                                 "engine": "llamacpp", "figures": {},
                                 "report": {"uri": "bench/r1.json",
                                            "digest": {"sha256": "ab" * 32}}})
    line = attest.sign_statement(st, [key]).to_line()
    swap, moved = _swapper(mirror.root / "bundles/pair", outside)
    with _faults.hook("fs.dir-opened", swap):
        attest.append_lines(mirror, "pair", [line])
    assert moved
    _untouched(outside)
    assert (moved[0] / attest.ATTESTATIONS_FILE).read_bytes() == line + b"\n"


def test_an_object_lands_in_the_folder_checked(mirror: Mirror, outside: Path) -> None:
    second = b"b" * 10
    digest = hashlib.sha256(second).hexdigest()
    prefix = mirror.root / "objects/sha256" / digest[:2]
    tmp = mirror.new_temp_path()
    tmp.write_bytes(second)
    prefix.mkdir(parents=True, exist_ok=True)
    swap, moved = _swapper(prefix, outside)
    with _faults.hook("fs.dir-opened", swap):
        mirror.put_object(tmp, digest)
    assert moved
    _untouched(outside)
    assert (moved[0] / digest).read_bytes() == second


def test_gc_never_deletes_through_a_swapped_folder(mirror: Mirror, outside: Path) -> None:
    digest = mirror.put_bytes(b"nothing references this")  # garbage: gc removes it
    prefix = mirror.root / "objects/sha256" / digest[:2]
    (outside / digest).write_bytes(b"a file outside with the same name")
    swap, moved = _swapper(prefix, outside)
    with _faults.hook("fs.dir-opened", swap):
        res = collect(mirror)
    assert moved and digest in res.removed_objects
    assert (outside / digest).read_bytes() == b"a file outside with the same name"
    assert not (moved[0] / digest).exists()  # the mirror's own copy went


def test_a_link_planted_before_the_write_is_refused(mirror: Mirror, outside: Path) -> None:
    mirror.bundle_dir("pair")
    (mirror.root / "bundles").mkdir(exist_ok=True)
    (mirror.root / "bundles/pair").symlink_to(outside, target_is_directory=True)
    for write in (lambda: mirror.write_bundle_file("pair", "render/a", b"x"),
                  lambda: versions.flip_current(mirror, "pair", 2),
                  lambda: attest.append_lines(mirror, "pair", [b"{}"])):
        with pytest.raises(CorruptMirror, match="symbolic link"):
            write()
    _untouched(outside)
