"""Gates on the shape of custody: the signer stays on the connected side, proofs are required.

* ``specbundle.sign`` (the connected-side signer) is imported by ``cli/`` alone: the layout and
  statements both sides need live below it (``attest/``, ``mirror/``), so the isolated side
  cannot reach the signer, not even through a helper;
* no isolated-side function takes an *optional* proof (``VerifiedBundle | None``,
  ``Bundle | None``): a stage either has the value the verifier returned or does not run.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import specbundle

SRC = Path(specbundle.__file__).parent
ISOLATED = ("verify", "render", "bench", "admit", "audit", "images", "transfer")
_PROOF = re.compile(r"\b(VerifiedBundle|Bundle)\b")


def _modules() -> list[tuple[str, ast.Module]]:
    return [(p.relative_to(SRC).as_posix(), ast.parse(p.read_text(encoding="utf-8")))
            for p in sorted(SRC.rglob("*.py"))]


def _imports(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_only_the_cli_imports_the_signer() -> None:
    offenders = sorted(rel for rel, tree in _modules()
                       if not rel.startswith(("cli/", "sign/"))
                       and any(m == "specbundle.sign" or m.startswith("specbundle.sign.")
                               for m in _imports(tree)))
    assert offenders == []


def test_no_isolated_side_function_takes_an_optional_proof() -> None:
    found = []
    for rel, tree in _modules():
        if rel.split("/")[0] not in ISOLATED:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                ann = ast.unparse(arg.annotation) if arg.annotation else ""
                if _PROOF.search(ann) and "None" in ann:
                    found.append(f"{rel}:{node.lineno} {node.name}({arg.arg}: {ann})")
    assert found == []


def test_the_gates_see_what_they_guard() -> None:
    """The scan is not vacuous: the CLI does import the signer, and verify takes proofs."""
    mods = dict(_modules())
    assert any(m.startswith("specbundle.sign") for m in _imports(mods["cli/sign.py"]))
    assert "transfer/importer.py" in mods and "verify/__init__.py" in mods
