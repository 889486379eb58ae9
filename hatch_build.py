"""Build hook: compile the scanner's hot pure-Python loops with mypyc, as verified twins.

Why mypyc and not hand-written C: the loops parse hostile bytes, and mypyc compiles the very
typed source the tests and reviewers read (bounds and types still checked at run time), ~3x
faster than the interpreter. Each module ``m`` in :data:`NATIVE` is copied to ``m_native`` with
the SHA-256 of its source appended as ``SOURCE_DIGEST``, then compiled;
``specbundle._native.twin`` uses the twin only while that digest matches the source beside it.
A failed compile is not a failed install: the pure modules do the same work, slower (set
``SPECBUNDLE_REQUIRE_NATIVE=1`` to make it one, as CI does).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# module to compile, and the sibling sources its types come from (read by mypy, not compiled)
NATIVE: dict[str, tuple[str, ...]] = {
    "specbundle/scan/pickles/loop.py": ("specbundle/scan/pickles/ops.py",
                                        "specbundle/scan/pickles/semantics.py"),
}


def _stage(src: Path, tree: Path, module: str, deps: tuple[str, ...]) -> str:
    """Lay out the twin's source and its type sources in ``tree``; the twin's relative path."""
    for pkg in {Path(module).parent, *(Path(d).parent for d in deps)}:
        for part in (pkg, *pkg.parents):
            if str(part) != ".":
                (tree / part).mkdir(parents=True, exist_ok=True)
                (tree / part / "__init__.py").touch()
    for dep in deps:
        shutil.copyfile(src / dep, tree / dep)
    body = (src / module).read_bytes()
    twin = module[:-3] + "_native.py"
    digest = hashlib.sha256(body).hexdigest()
    (tree / twin).write_bytes(body + f'\n\nSOURCE_DIGEST = "{digest}"\n'.encode())
    return twin


def _compile(tree: Path, twin: str) -> list[Path]:
    from mypyc.build import mypycify
    from setuptools import Distribution

    here = Path.cwd()
    os.chdir(tree)
    (tree / "mypy.ini").write_text("[mypy]\nstrict = True\n")  # not the project's: no plugins
    try:
        dist = Distribution({"name": "specbundle-native", "ext_modules": mypycify(
            ["--config-file", "mypy.ini", twin], opt_level="3")})
        cmd = dist.get_command_obj("build_ext")
        cmd.inplace = True  # type: ignore[attr-defined]
        dist.run_command("build_ext")
    finally:
        os.chdir(here)
    # in place: the modules sit beside the twin's source (build/ holds the intermediates)
    pkg = tree / Path(twin).parent
    built = sorted(p for p in pkg.iterdir() if p.suffix in (".so", ".pyd") and p.is_file())
    if not built:
        raise RuntimeError("mypyc produced no extension module")
    return built


class NativeBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Compile :data:`NATIVE` for wheels (into the wheel) and editable installs (into src/)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        src = Path(self.root) / "src"
        self._out = out = Path(tempfile.mkdtemp(prefix="specbundle-native-"))
        try:
            built: list[tuple[Path, Path]] = []
            for module, deps in NATIVE.items():
                tree = Path(tempfile.mkdtemp(dir=out))
                twin = _stage(src, tree, module, deps)
                built += [(p, p.relative_to(tree)) for p in _compile(tree, twin)]
        except Exception as err:  # any failure leaves the pure modules in charge
            shutil.rmtree(out, ignore_errors=True)
            if os.environ.get("SPECBUNDLE_REQUIRE_NATIVE", "") not in ("", "0"):
                raise
            print(f"specbundle: compiled twins not built ({type(err).__name__}: {err}); "  # noqa: T201 - the build log is a hook's only channel
                  "the pure-Python modules will be used", file=sys.stderr)
            return
        for path, rel in built:
            if version == "editable":  # the editable install imports from src/: swap whole
                tmp = (src / rel).with_name(f".{rel.name}.tmp")
                shutil.copyfile(path, tmp)
                tmp.replace(src / rel)
            else:
                build_data["force_include"][str(path)] = str(rel)
        if version != "editable":
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """The wheel holds its copies now: drop the build tree."""
        out = getattr(self, "_out", None)
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)
