"""No test patches what it tests: a patched module constant or function is a configuration the
shipped tool never runs (issue 28).

A test reaches a condition through real inputs (a file that really is too big, really
unreadable) or through a seam the code offers (an option of the entry function, a plug-in of
an interface). Every ``monkeypatch.setattr``/``delattr``/``setitem``/``delitem``, every
``mock.patch`` and every assignment to an attribute of an imported ``specbundle`` name is
found statically here; only the hooks listed below stand, each with why it is not the system
under test. Environment hooks (``setenv``, ``delenv``, ``syspath_prepend``, ``chdir``) are the
real interface of what they set and need no entry.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
_PATCHERS = {"setattr", "delattr", "setitem", "delitem"}

# (test file, what it patches): each a hook into the machine or a fault, not the tool's logic
ALLOWED = {
    # a slow disk: os.symlink sleeps after linking, so two renders' staging windows overlap
    # (the race the temp-name rule closes); the tool's own code runs unchanged
    ("render/test_planted_links.py", "os.symlink"),
    # a fault hook: a command registered beside the real ones raises each foreign exception,
    # so the real top-level handler maps it (the mapping under test runs unchanged)
    ("test_cli_foreign_errors.py", "sys.modules[module.__name__]"),
    ("test_cli_foreign_errors.py", "cli.COMMANDS['raise-test']"),
}


def _specbundle_names(tree: ast.Module) -> set[str]:
    """Names a test module binds to ``specbundle`` modules or objects by importing them."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names
                         if a.name.split(".")[0] == "specbundle")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] \
                == "specbundle":
            names.update(a.asname or a.name for a in node.names)
    return names


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _patches(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, target) of every patch in a test module."""
    ours = _specbundle_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            call, receiver = node.func.attr, ast.unparse(node.func.value)
            target = node.args[0]
            if call in _PATCHERS and "monkeypatch" in receiver:
                if isinstance(target, ast.Constant) and isinstance(target.value, str):
                    what = target.value  # the dotted-string form: setattr("pkg.mod.name", v)
                elif call.endswith("item") and len(node.args) > 1:
                    what = f"{ast.unparse(target)}[{ast.unparse(node.args[1])}]"
                elif len(node.args) > 1:
                    name = node.args[1]
                    what = f"{ast.unparse(target)}." + (
                        name.value if isinstance(name, ast.Constant) else ast.unparse(name))
                else:
                    what = ast.unparse(target)
                found.append((node.lineno, what))
            elif receiver in ("mock", "unittest.mock", "patch") or call == "patch":
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) \
                else [node.target]
            found.extend((node.lineno, ast.unparse(t)) for t in targets
                         if isinstance(t, ast.Attribute) and _root(t) in ours)
    return sorted(found)


@cache
def _all_patches() -> tuple[tuple[str, int, str], ...]:
    """(test file, line, target) of every patch in the test tree."""
    return tuple((path.relative_to(TESTS).as_posix(), line, what)
                 for path in sorted(TESTS.rglob("*.py"))
                 for line, what in _patches(ast.parse(path.read_text(encoding="utf-8"))))


def test_no_test_patches_the_system_under_test() -> None:
    offenders = [f"tests/{rel}:{line}: {what}" for rel, line, what in _all_patches()
                 if (rel, what) not in ALLOWED]
    assert offenders == [], "give the code a seam or use a real input instead:\n" + "\n".join(
        offenders)


def test_every_allowed_hook_is_still_there() -> None:
    """An entry whose patch is gone is removed, so the list never holds a stale exemption."""
    assert ALLOWED - {(rel, what) for rel, _line, what in _all_patches()} == set()


def test_the_finder_sees_each_form() -> None:
    src = (
        "import specbundle.scan.formats.gguf_reader as gr\n"
        "from specbundle.scan.pickles import walker\n"
        "from unittest import mock\n"
        "def test(monkeypatch):\n"
        "    monkeypatch.setattr(gr, 'MAX_TENSORS', 2)\n"
        "    monkeypatch.setattr('specbundle.scan.sniff.sniff', None)\n"
        "    monkeypatch.setitem(walker.TABLE, 'k', 1)\n"
        "    walker._LOOP = None\n"
        "    with mock.patch('specbundle.x'):\n"
        "        pass\n"
        "    monkeypatch.setenv('COLUMNS', '80')\n"
        "    runner = object()\n"
        "    runner.t0 = 1\n"
    )
    assert [w for _line, w in _patches(ast.parse(src))] == [
        "gr.MAX_TENSORS", "specbundle.scan.sniff.sniff", "walker.TABLE['k']", "walker._LOOP",
        "mock.patch('specbundle.x')"]
