"""Writes into the mirror go through no-follow directory fds only (issue 22 item 1, the class).

A writer that builds a path and calls ``Path.replace``/``rename``/``symlink_to``/``mkdir``/
``write_bytes``/``write_text``, ``os.replace``/``rename``/``symlink``/``link``/``mkdir``
without a ``dir_fd``, ``shutil.rmtree`` without one, ``open(..., "w")``, ``atomic_write_*``
or ``tempfile.mkstemp``/``mkdtemp`` follows a link planted on the way. Mirror writers use
``_fsutil`` (``open_dir``, ``write_at``, ``rename_at``, ``link_at``, ``remove_at``,
``open_file_at``, ``Mirror.write_file``/``write_bundle_file``). This gate reads every module's
syntax tree and fails on such a call outside the allow-list below, each entry saying why the
path it writes is not in the mirror (or is the mirror root the operator named).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "specbundle"

_PATH_METHODS = {"replace", "rename", "symlink_to", "hardlink_to", "mkdir", "write_bytes",
                 "write_text", "touch"}
_OS_CALLS = {"replace", "rename", "renames", "symlink", "link", "mkdir", "makedirs"}
_FD_KWARGS = {"dir_fd", "src_dir_fd", "dst_dir_fd"}
_WRITE_HELPERS = {"atomic_open", "atomic_write_bytes", "atomic_write_json"}

# (module, enclosing function): why its by-path write may stay. Keep it short and specific.
ALLOWED: dict[tuple[str, str], str] = {
    # the primitives themselves, and the by-path writer for files outside any mirror
    ("_fsutil.py", "atomic_open"): "writes a path the operator named (reports, keys)",
    ("_fsutil.py", "atomic_write_bytes"): "as atomic_open",
    ("_fsutil.py", "atomic_write_json"): "as atomic_open",
    # the mirror root itself is the operator's (--mirror); what is below it is checked
    ("mirror/store.py", "open"): "creates the root the operator named, subfolders via real_dir",
    ("mirror/store.py", "lock"): "creates the root the operator named (before .lock)",
    # outputs at a path the operator gave, outside the mirror
    ("render/api.py", "_write_folder"): "creates the parent of a --out folder outside the mirror",
    ("cli/audit.py", "*"): "--output/--html file the operator named",
    ("cli/scan.py", "*"): "--output file the operator named",
    ("cli/review.py", "*"): "--html file the operator named",
    ("cli/oci.py", "*"): "oci render --out folder the operator named",
    ("cli/demo.py", "*"): "the demo's own work folder the operator named",
    ("transfer/export.py", "*"): "the export folder (removable medium) the operator named",
    ("transfer/chunks.py", "*"): "chunks inside the export folder the operator named",
    ("oci/layout.py", "*"): "an oci:DIR image layout the operator named",
    ("sign/__init__.py", "sign_model"): "model.sig inside the model folder the operator signs",
    ("attest/keys.py", "*"): "key files at the path the operator named",
    ("verify/floors.py", "*"): "the operator-owned trust state beside the policy, not the mirror",
    ("localhub.py", "*"): "a loopback test hub's own folder",
    ("synth/", "*"): "writes test models into a folder the caller names",
    # private folders outside the mirror
    ("bench/api.py", "run_bench"): "removes bench's private temp folder outside the mirror",
    ("bench/tune.py", "run_tune"): "removes tune's private temp folder outside the mirror",
    ("oci/stage.py", "_look_room"): "removes diff's private staging folder in the system's "
                                    "temp folder (a read-only mirror)",
    # creates its file O_EXCL through a /proc/self/fd path the caller opened no-follow
    ("verify/hashed.py", "write_hashed"): "dest is fd_path(<checked folder>, <new name>)",
}


def _name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else \
        node.attr if isinstance(node, ast.Attribute) else ""


def _mode(node: ast.Call, pos: int) -> str | None:
    args = [*node.args[pos:pos + 1], *(k.value for k in node.keywords if k.arg == "mode")]
    for a in args:
        if isinstance(a, ast.Constant) and isinstance(a.value, str):
            return a.value
    return None


def _writes(node: ast.Call) -> str | None:
    """What a call writes by path, if it is one of the forms the gate refuses."""
    f, kws = node.func, {k.arg for k in node.keywords}
    if isinstance(f, ast.Attribute):
        base = _name(f.value)
        if base == "os" and f.attr in _OS_CALLS and not kws & _FD_KWARGS:
            return f"os.{f.attr}"
        if base == "shutil" and f.attr == "rmtree" and "dir_fd" not in kws:
            return "shutil.rmtree"
        if base == "tempfile" and f.attr in {"mkstemp", "mkdtemp"} \
                and any(k == "dir" for k in kws):
            return f"tempfile.{f.attr}"
        if base in {"os", "shutil", "tempfile", "dataclasses"}:
            return None
        if f.attr in {"replace", "rename"}:  # str.replace takes 2 args, datetime's keywords
            return f".{f.attr}" if len(node.args) == 1 and not node.keywords else None
        if f.attr in _PATH_METHODS:
            return f".{f.attr}"
        if f.attr == "open" and (_mode(node, 0) or "r")[0] in "wax":
            return ".open(w)"
    elif isinstance(f, ast.Name):
        if f.id in _WRITE_HELPERS:
            return f.id
        if f.id == "open" and (_mode(node, 1) or "r")[0] in "wax":
            return "open(w)"
    return None


def _offenders(tree: ast.AST, rel: str,
               allow: dict[tuple[str, str], str] = ALLOWED) -> list[str]:
    out: list[str] = []

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) \
                else func
            if isinstance(child, ast.Call):
                what = _writes(child)
                allowed = any(rel.startswith(m) and f in {"*", inner} for m, f in allow)
                if what and not allowed:
                    out.append(f"{rel}:{child.lineno} {inner}: {what}")
            visit(child, inner)

    visit(tree, "<module>")
    return out


@functools.cache
def _modules() -> tuple[tuple[str, ast.AST], ...]:
    return tuple((p.relative_to(SRC).as_posix(), ast.parse(p.read_text()))
                 for p in sorted(SRC.rglob("*.py")))


def test_mirror_writers_never_write_by_path() -> None:
    offenders = [o for rel, tree in _modules() for o in _offenders(tree, rel)]
    assert offenders == [], "write through _fsutil's fd primitives (or justify in ALLOWED)"


def test_every_allow_list_entry_still_names_a_writer() -> None:
    """A stale entry would silently widen the gate: each must still match a flagged call."""
    flagged = {(rel, o.split(" ")[1].rstrip(":"))
               for rel, tree in _modules() for o in _offenders(tree, rel, {})}
    stale = [k for k in ALLOWED
             if not any(m.startswith(k[0]) and k[1] in {"*", f} for m, f in flagged)]
    assert stale == []


def test_the_gate_sees_the_old_forms() -> None:
    old = '''
def _flip_link(link, target):
    tmp.symlink_to(target, target_is_directory=True)
    tmp.replace(link)
    staging.replace(final)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(old, ignore_errors=True)
    os.replace(a, b)
    atomic_write_bytes(ref, b"x")
    with part.open("ab") as fh: pass
    with open(p, "w") as fh: pass
    Path(tempfile.mkdtemp(prefix=".x.", dir=parent))
'''
    assert len(_offenders(ast.parse(old), "mirror/x.py")) == 10
    fine = '''
def ok(dfd):
    os.rename(a, b, src_dir_fd=dfd, dst_dir_fd=dfd)
    shutil.rmtree(n, dir_fd=dfd, ignore_errors=True)
    text.replace(":", "")
    dataclasses.replace(rec, files=())
    now.replace(microsecond=0)
    with p.open("rb") as fh: pass
'''
    assert _offenders(ast.parse(fine), "mirror/x.py") == []
