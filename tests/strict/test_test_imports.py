"""The tests build what they need one way: shared builders live in tests/lib/ (by noun) and in
top-level ``tests/_*.py`` helpers, never in another test package's conftest or modules.

A builder found by reaching into ``tests/<other>/conftest.py`` grows a second copy the next
time someone needs it slightly differently; one library keeps one copy.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]



def _targets(tree: ast.Module) -> set[str]:
    """Every ``tests.*`` module a file imports, anywhere in it (local imports included)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "tests":
                out.update(f"tests.{a.name}" for a in node.names)
            elif node.module.startswith("tests."):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("tests."))
    return out


def _allowed(rel: str, module: str) -> bool:
    """May the file ``rel`` (relative to tests/) import ``module``?"""
    parts = rel.split("/")
    own = parts[0] if len(parts) > 1 else ""
    top = module.split(".")[1]
    return top == "lib" or top.startswith("_") or top == own


def _offenders(files: dict[str, str]) -> list[str]:
    return sorted(f"{rel}: {mod}" for rel, text in files.items()
                  for mod in _targets(ast.parse(text))
                  if not _allowed(rel, mod))


def test_no_test_module_imports_another_packages_helpers() -> None:
    files = {p.relative_to(TESTS).as_posix(): p.read_text(encoding="utf-8")
             for p in sorted(TESTS.rglob("*.py"))}
    assert _offenders(files) == []


def test_the_gate_sees_the_old_forms() -> None:
    old = {
        "verify/test_x.py": "from tests.sign.helpers import policy_doc\n",
        "bench/test_x.py": "def f():\n    from tests.admit.test_decision import _report\n",
        "oci/test_x.py": "from tests import clihelp\n",
        "audit/test_x.py": "import tests.render.conftest\n",
    }
    assert len(_offenders(old)) == 4
    fine = {
        "verify/test_x.py": "from tests.lib.policy import policy_doc\nfrom tests._engine import x\n",
        "oci/test_x.py": "from tests.oci.conftest import backend\n",
        "test_x.py": "from tests.lib.cli import run_cli\n",
        "lib/x.py": "from tests.lib.models import make_model\n",
    }
    assert _offenders(fine) == []
