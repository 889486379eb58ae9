"""Every public name is exported on purpose: ``__all__`` lists it, or a leading underscore hides it.

A name defined at module top level without an underscore and missing from ``__all__`` is an
accident waiting to become API: another module imports it, and then nobody can change it.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import specbundle

_SRC = Path(specbundle.__file__).parent

#: Modules that need no ``__all__``, each with why: scripts are run, never imported.
_EXEMPT = {
    "__main__.py": "the `python -m specbundle` script",
    "render/_vllm_oracle_script.py": "a script run by vLLM's own interpreter, never imported",
    "scan/pickles/loop.py": "the walker's compiled twin, reached only through pickle_walker",
}

_MODULES = sorted(p.relative_to(_SRC).as_posix() for p in _SRC.rglob("*.py"))


def _exports(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
            names = ast.literal_eval(node.value)
            assert isinstance(names, list)
            return names
    return None


def _module_name(rel: str) -> str:
    parts = ["specbundle", *rel.removesuffix(".py").split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_exempt_list_names_real_modules() -> None:
    assert set(_EXEMPT) <= set(_MODULES)


@pytest.mark.parametrize("rel", [m for m in _MODULES if m not in _EXEMPT])
def test_public_names_are_exported_on_purpose(rel: str) -> None:
    tree = ast.parse((_SRC / rel).read_text(encoding="utf-8"))
    exports = _exports(tree)
    assert exports is not None, f"{rel} has no __all__ (add one, or list it in _EXEMPT with why)"
    assert len(exports) == len(set(exports)), f"{rel}: __all__ lists a name twice"
    defined = [n.name for n in tree.body
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    stray = [name for name in defined if not name.startswith("_") and name not in exports]
    assert not stray, f"{rel}: public but not in __all__ (export it or prefix _): {stray}"
    module = importlib.import_module(_module_name(rel))
    missing = [name for name in exports if not hasattr(module, name)]
    assert not missing, f"{rel}: __all__ names what the module does not define: {missing}"
