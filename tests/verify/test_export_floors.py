"""Export keeps floors the mirror writer cannot roll back (its own state file, outside the mirror).

A connected mirror whose event log was cut (a revocation dropped with the tail) or whose
``current`` names an older signed version than one already shipped is refused at export,
before anything reaches the medium; each attack has its benign twin (the log grew, the same
version again).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.mirror import versions
from specbundle.sign import sign_bundle
from tests.lib.bundles import Signed
from tests.lib.cli import run_cli


def _export(signed: Signed, capsys: pytest.CaptureFixture[str], out: Path) -> tuple[int, str]:
    key = signed.tmp / "key.pem"
    if not key.exists():
        attest.write_private_key(signed.key, key)
    code, _, err = run_cli(capsys, "export", "pair", "--to", str(out), "--mirror",
                           str(signed.mirror.root), "--key", str(key))
    return code, err


def _refused(signed: Signed, capsys: pytest.CaptureFixture[str], out: Path, why: str) -> None:
    code, err = _export(signed, capsys, out)
    assert code == 3, err
    assert why in err and "Traceback" not in err, err
    assert not out.exists() or not any(out.iterdir())  # nothing reached the medium


def test_the_floor_lives_outside_the_mirror(signed: Signed,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _export(signed, capsys, signed.tmp / "a")
    assert code == 0, err
    state = Path(os.environ["SPECBUNDLE_EXPORT_STATE"])
    assert state.is_file() and not state.is_relative_to(signed.mirror.root)
    assert str(signed.mirror.root) in state.read_text()


def test_a_log_cut_below_an_earlier_export_is_refused(signed: Signed,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert _export(signed, capsys, signed.tmp / "a")[0] == 0
    log = signed.mirror.events_path
    grown = log.read_bytes()
    lines = grown.splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-1]))  # the tail (with the export event) is gone
    _refused(signed, capsys, signed.tmp / "b", "rolled back")
    # deleting the mirror's own record of past exports does not help
    (signed.mirror.bundle_dir("pair") / "export").rename(signed.tmp / "export-aside")
    _refused(signed, capsys, signed.tmp / "c", "rolled back")
    log.write_bytes(grown)  # benign twin: the log as it was, then grown by a new export
    code, err = _export(signed, capsys, signed.tmp / "d")
    assert code == 0, err


def test_a_line_dropped_from_the_middle_of_the_log_is_refused(
        signed: Signed, capsys: pytest.CaptureFixture[str]) -> None:
    assert _export(signed, capsys, signed.tmp / "a")[0] == 0
    log = signed.mirror.events_path
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join([lines[0], *lines[2:]]))  # e.g. a revocation line
    _refused(signed, capsys, signed.tmp / "b", "does not chain")


def test_current_rolled_back_below_a_shipped_version_is_refused(
        signed: Signed, capsys: pytest.CaptureFixture[str]) -> None:
    sign_bundle(signed.mirror, "pair", [signed.key])  # version 2
    assert _export(signed, capsys, signed.tmp / "a")[0] == 0
    code, err = _export(signed, capsys, signed.tmp / "again")  # benign: the same version
    assert code == 0, err
    ref = signed.mirror.bundle_dir("pair") / versions.CURRENT_REF
    ref.chmod(0o644)
    ref.write_text("1\n")  # the writer points current at the older signed version
    _refused(signed, capsys, signed.tmp / "b", "rolled back: version 1 < 2")
