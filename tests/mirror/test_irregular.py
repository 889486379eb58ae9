"""Every mirror read opens regular files only, bounded (issue 22 item 8), with twins."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specbundle.attest import read_attestations
from specbundle.errors import CorruptMirror, VerificationError
from specbundle.mirror import Mirror, versions
from specbundle.strict import MalformedDocument, read_mirror_file


@pytest.fixture
def mirror(tmp_path: Path) -> Mirror:
    m = Mirror.open(tmp_path / "m", create=True)
    m.bundle_dir("b").mkdir(parents=True)
    return m


def test_a_regular_current_ref_reads(mirror: Mirror) -> None:
    (mirror.bundle_dir("b") / "current").write_text("3\n")
    assert versions.current_version(mirror, "b") == 3


@pytest.mark.parametrize("rel", ["current", "attestations.jsonl"])
def test_a_link_to_dev_zero_is_a_corrupt_mirror_not_a_memory_error(mirror: Mirror,
                                                                   rel: str) -> None:
    (mirror.bundle_dir("b") / rel).symlink_to("/dev/zero")
    def read() -> object:
        if rel == "current":
            return versions.current_version(mirror, "b")
        return read_attestations(mirror, "b")

    with pytest.raises((CorruptMirror, VerificationError), match="symbolic link") as err:
        read()
    assert err.value.exit_code == 3


def test_the_event_log_as_a_link_to_dev_zero(mirror: Mirror) -> None:
    mirror.events_path.symlink_to("/dev/zero")
    with pytest.raises(CorruptMirror, match="symbolic link"):
        mirror.read_events()
    with pytest.raises(CorruptMirror, match="symbolic link"):
        mirror.append_event("x", None, {})


def test_a_fifo_manifest_is_refused_at_once(mirror: Mirror) -> None:
    d = mirror.bundle_dir("b") / versions.version_rel(1)
    d.mkdir(parents=True)
    os.mkfifo(d / "manifest.json")  # nobody writes it: a blocking open would hang
    (mirror.bundle_dir("b") / "current").write_text("1\n")
    with pytest.raises(CorruptMirror, match="not a regular file"):
        versions.read_current_manifest(mirror, "b")


def test_sizes_are_bounded_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2048)
    assert read_mirror_file(big, max_bytes=4096) == b"x" * 2048  # twin
    with pytest.raises(MalformedDocument, match="larger than 1024"):
        read_mirror_file(big, max_bytes=1024)
