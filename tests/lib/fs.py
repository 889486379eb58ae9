"""A small real filesystem to fill: what a full disk or medium looks like to the code."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``4m``) mounted on a new folder ``mnt`` for the block; the test
    is skipped where mounting is not permitted."""
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                          capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@contextlib.contextmanager
def read_only_view(src: Path, at: Path) -> Iterator[Path]:
    """``src`` bind-mounted read-only on a new folder ``at`` (a deployment node's mirror) for
    the block; the test is skipped where mounting is not permitted."""
    at.mkdir()
    done = subprocess.run(["mount", "--bind", str(src), str(at)], capture_output=True,
                          check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.decode().strip()}")
    try:
        done = subprocess.run(["mount", "-o", "remount,bind,ro", str(at)], capture_output=True,
                              check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot remount read-only: {done.stderr.decode().strip()}")
        yield at
    finally:
        subprocess.run(["umount", "-l", str(at)], check=False)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (skipped where mounting is not permitted)."""
    with tmpfs(tmp_path / "small", "4m") as mnt:
        yield mnt


def fill(path: Path) -> Path:
    """Write a filler file under ``path`` until the filesystem refuses even one byte."""
    filler = path / "filler"
    with filler.open("wb", buffering=0) as fh:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                continue
    return filler
