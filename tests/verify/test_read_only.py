"""A deployment node mounts the mirror read-only: verify, audit and render --out elsewhere
work there and write nothing to the mirror; a write into it fails with one clear line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from specbundle.mirror import Mirror
from tests.lib.bundles import Signed
from tests.lib.cli import run_cli
from tests.lib.fs import read_only_view


def _tree(root: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime)
            for p in root.rglob("*")}


@pytest.fixture
def ro_mirror(signed: Signed, capsys: pytest.CaptureFixture[str]) -> Iterator[Path]:
    """The signed mirror (aliases rendered once while writable) bind-mounted read-only."""
    code, _, err = run_cli(capsys, "render", "pair", "--mirror", str(signed.mirror.root),
                           "--trust", str(signed.policy_path), "--engine", "vllm",
                           "--target", "shell")
    assert code == 0, err
    with read_only_view(signed.mirror.root, signed.tmp / "ro") as ro:
        yield ro

def test_verify_audit_and_render_elsewhere_on_a_read_only_mirror(
        signed: Signed, ro_mirror: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _tree(signed.mirror.root)
    trust = str(signed.policy_path)
    code, _, err = run_cli(capsys, "verify", "pair", "--mirror", str(ro_mirror), "--trust", trust)
    assert code == 0, err
    assert "not logged" in err  # skipped with a note, not a failure
    code, _, err = run_cli(capsys, "audit", "pair", "--mirror", str(ro_mirror), "--trust", trust,
                           "--json")
    assert code in (0, 3) and "Traceback" not in err and "Read-only" not in err, err
    out = signed.tmp / "deploy"
    code, _, err = run_cli(capsys, "render", "pair", "--mirror", str(ro_mirror), "--trust",
                           trust, "--engine", "vllm", "--target", "shell", "--out", str(out))
    assert code == 0, err
    assert "nothing written" in err
    assert (out / "serve.sh").is_file()
    assert _tree(signed.mirror.root) == before  # not one byte, lock or event


def test_a_render_into_a_read_only_mirror_is_one_clear_line(
        signed: Signed, ro_mirror: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "render", "pair", "--mirror", str(ro_mirror), "--trust",
                           str(signed.policy_path), "--engine", "vllm", "--target", "compose",
                           "--allow-unpinned-image")
    assert code == 6, err
    assert "Read-only file system" in err and "Traceback" not in err


def test_a_read_only_mirror_can_still_be_locked(signed: Signed, ro_mirror: Path) -> None:
    """The lock file opens read-only where it cannot be opened for writing (``flock`` needs
    no write access): a reader that locks is not refused on a deployment node."""
    assert (ro_mirror / ".lock").is_file()
    with Mirror.open(ro_mirror).lock():
        pass
