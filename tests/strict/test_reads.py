"""Every file the library reads is opened by ``specbundle.strict``, except where listed.

The mirror, a transfer set and a staged registry are hostile in their shape as well as their
bytes: a file may have become a FIFO (a plain ``open`` waits forever for a writer), a link to
``/dev/zero`` (a plain ``read_bytes`` never ends) or a folder. ``strict.open_regular`` (and
``read_bounded`` / ``read_mirror_file`` on top of it) opens without blocking and refuses
anything but a regular file before a byte is read. This test finds every bare read in
``src/`` (``read_bytes``, ``read_text``, ``Path.open``/``open`` for reading, ``tarfile.open``
of a name, ``os.open`` for reading without ``O_NONBLOCK``) and fails on one whose function is
not in the list below with the reason it may stay; a new reader then has to use the strict one.
"""

from __future__ import annotations

import ast
import fcntl
import os
from pathlib import Path

import pytest

import specbundle
from specbundle.digest import hash_file, hash_files, sha256_bytes
from specbundle.errors import VerificationError
from specbundle.strict import MalformedDocument, open_regular

SRC = Path(specbundle.__file__).parent

# "file::function" -> why a bare read is safe there. Write-side opens ("wb", "ab", "xb",
# O_WRONLY/O_RDWR/O_CREAT) and directory opens are not reads and need no entry.
ALLOWED: dict[str, str] = {
    "strict.py::_open_fd": "the strict opener itself (O_NONBLOCK, then fstat S_ISREG)",
    "_native.py::_source_digest": "hashes a module's own source file inside the installed package",
    "render/argrules.py::_vllm_table": "a resource shipped inside the package",
    "attest/keys.py::write_private_key": "write side: its flags (O_WRONLY | O_CREAT | O_EXCL) "
                                         "are a variable the scan cannot read",
    "_fsutil.py::fsync_dir": "opens a folder this process just wrote into, to fsync it "
                             "(write side, converted with the other fd-relative writes)",
}

_READ_METHODS = {"read_bytes", "read_text"}
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_DIRECTORY", "O_NONBLOCK", "_DIR_FLAGS")


def _mode(call: ast.Call, pos: int) -> str | None:
    """The literal mode argument of an ``open`` call (None when absent or not a literal)."""
    node = call.args[pos] if len(call.args) > pos else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _reads(mode: str | None) -> bool:
    return not any(c in (mode or "r") for c in "wax+")


def _bare_read(call: ast.Call) -> str | None:
    """A short description of the bare read ``call`` makes, or None."""
    f = call.func
    if isinstance(f, ast.Name) and f.id == "open" and _reads(_mode(call, 1)):
        return "open()"
    if not isinstance(f, ast.Attribute):
        return None
    owner = f.value.id if isinstance(f.value, ast.Name) else None
    if f.attr in _READ_METHODS:
        return f".{f.attr}()"
    if f.attr != "open" or owner in {"Mirror", "cls", "self", "io"}:
        return None
    if owner == "os":
        flags = ast.unparse(call.args[1]) if len(call.args) > 1 else ""
        return None if any(w in flags for w in _WRITE_FLAGS) else "os.open() without O_NONBLOCK"
    if owner == "tarfile":
        return "tarfile.open(name)" if call.args else None
    return ".open()" if _reads(_mode(call, 0)) else None


def _scan(tree: ast.Module) -> list[tuple[str, int, str]]:
    """(enclosing function, line, what) for every bare read in one module."""
    out: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = f"{scope}.{child.name}" if scope else child.name
            if isinstance(child, ast.Call) and (what := _bare_read(child)):
                out.append((scope or "<module>", child.lineno, what))
            visit(child, inner)

    visit(tree, "")
    return out


def _found() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("synth/"):  # builds synthetic models in the operator's own folder
            continue
        for scope, line, what in _scan(ast.parse(path.read_text(encoding="utf-8"))):
            found.setdefault(f"{rel}::{scope}", []).append(f"{line}: {what}")
    return found


def test_every_read_goes_through_the_strict_opener() -> None:
    found = _found()
    unlisted = {k: v for k, v in found.items() if k not in ALLOWED}
    assert not unlisted, (
        "bare file reads outside specbundle.strict (use read_mirror_file / read_bounded / "
        f"open_regular, or list the function with its reason): {unlisted}")
    stale = set(ALLOWED) - set(found)
    assert not stale, f"listed but read nothing bare any more: {stale}"


def test_the_scanner_sees_each_form_and_passes_writes() -> None:
    src = (
        "def f(p, fd):\n"
        "    p.read_bytes(); p.read_text(); p.open('rb'); p.open(); open(p)\n"
        "    os.open(p, os.O_RDONLY); tarfile.open(p, mode='r:')\n"
        "    p.open('wb'); p.open('ab'); p.open('xb'); open(p, 'w')\n"
        "    os.open(p, os.O_WRONLY | os.O_CREAT); os.open(p, os.O_RDONLY | os.O_NONBLOCK)\n"
        "    tarfile.open(fileobj=fd); Mirror.open(p)\n"
    )
    whats = [w for _s, _n, w in _scan(ast.parse(src))]
    assert whats == [".read_bytes()", ".read_text()", ".open()", ".open()", "open()",
                     "os.open() without O_NONBLOCK", "tarfile.open(name)"]


def _shapes(tmp_path: Path) -> dict[str, Path]:
    fifo, link, folder = tmp_path / "fifo", tmp_path / "zero", tmp_path / "folder"
    os.mkfifo(fifo)  # nobody writes it: a blocking open would hang the test
    link.symlink_to("/dev/zero")
    folder.mkdir()
    return {"fifo": fifo, "dev-zero-link": link, "folder": folder}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("follow", [True, False])
def test_open_regular_refuses_every_other_shape_at_once(tmp_path: Path, follow: bool) -> None:
    for shape, path in _shapes(tmp_path).items():
        with pytest.raises(MalformedDocument, match="not a regular file|symbolic link") as err:
            open_regular(path, follow=follow)
        assert str(path) in str(err.value), shape


@pytest.mark.timeout(30)
def test_open_regular_reads_a_regular_file_in_blocking_mode(tmp_path: Path) -> None:
    """The twin: a regular file (or, with follow, a link to one) opens and reads normally."""
    real = tmp_path / "real"
    real.write_bytes(b"x" * 100)
    (tmp_path / "link").symlink_to(real)
    with open_regular(real) as fh:
        assert not fcntl.fcntl(fh.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK
        assert fh.read() == b"x" * 100
    with open_regular(tmp_path / "link", follow=True) as fh:
        assert fh.read(3) == b"xxx"
    with pytest.raises(MalformedDocument, match="symbolic link"):
        open_regular(tmp_path / "link")


@pytest.mark.timeout(30)
def test_hashing_a_planted_fifo_or_device_is_a_verification_error(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_bytes(b"abc")
    assert hash_file(real) == sha256_bytes(b"abc")
    for path in _shapes(tmp_path).values():
        with pytest.raises(VerificationError, match="not a regular file") as err:
            hash_files([real, path])
        assert err.value.exit_code == 3
