"""scan/ reads by noun: each sub-package is used through its ``__init__`` only, and no module
reaches into another package's private names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import specbundle.scan

ROOT = Path(specbundle.scan.__file__).parent
PACKAGES = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file())
# the pickle checks stay out of their package's face (see specbundle.scan.pickles): the runner,
# which lists every check, imports them from their modules
BESIDE_THE_FACE = {("runner.py", "specbundle.scan.pickles.check"),
                   ("runner.py", "specbundle.scan.pickles.second_opinion")}


def _imports() -> list[tuple[str, str | None, str, list[str]]]:
    """(file, its package or None at the root, imported module, names) for every import."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        own = rel.parts[0] if len(rel.parts) > 1 else None
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module \
                    and node.module.startswith("specbundle.scan."):
                out.append((str(rel), own, node.module, [a.name for a in node.names]))
    return out


def test_the_sub_packages_are_the_nouns() -> None:
    assert PACKAGES == ["compat", "configs", "formats", "names", "pickles", "templates"]


def test_other_packages_use_a_package_through_its_face_only() -> None:
    crossing = []
    for rel, own, module, names in _imports():
        parts = module.split(".")
        target = parts[2] if parts[2] in PACKAGES else None
        if target is None or target == own:
            continue
        if any(n.startswith("_") for n in names) or (
                len(parts) > 3 and (rel, module) not in BESIDE_THE_FACE):
            crossing.append((rel, module, names))
    assert crossing == []


def test_each_face_lists_what_it_exports() -> None:
    for name in PACKAGES:
        face = importlib.import_module(f"specbundle.scan.{name}")
        exported = face.__all__
        assert len(set(exported)) == len(exported), name  # ruff keeps the order
        assert exported and all(not n.startswith("_") for n in exported), name
        assert all(hasattr(face, n) for n in exported), name
