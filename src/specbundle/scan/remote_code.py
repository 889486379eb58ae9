"""Remote code: ``auto_map`` references, Python files and ``custom_generate/``.

Serving stacks import ``auto_map`` modules when ``trust_remote_code`` is set, so each of these
is code, blocked unless the spec allows remote code for that artifact, and recorded when it
does. A cross-repository reference (``org/repo--module.Class``) names code that is not in the
pinned snapshot at all and is blocked either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any, ClassVar

from specbundle.scan.configs import find_key, is_config, load_config
from specbundle.scan.findings import CheckOutcome, Finding, Severity, finding
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.inventory import ArtifactTree

__all__ = ["RemoteCodeCheck", "auto_map_refs"]

_CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyd", ".so", ".dylib", ".dll", ".ipynb")


def auto_map_refs(doc: Any) -> list[tuple[str, str]]:
    """``(auto class, reference)`` pairs of every ``auto_map`` at any depth (lists flattened).

    A nested map is named by its path (``text_config.auto_map.AutoModel``); a value that is
    not a string is reported as a reference too (an engine may still try to resolve it).
    """
    out: list[tuple[str, str]] = []
    for path, amap in find_key(doc, "auto_map"):
        prefix = "" if path == "auto_map" else path.removesuffix("auto_map")
        if not isinstance(amap, dict):
            out.append((path, repr(amap)[:200]))
            continue
        for key, val in sorted(amap.items()):
            for v in (val if isinstance(val, list) else [val]):
                if v is None:
                    continue  # transformers' own "no class for this slot"
                out.append((prefix + str(key), v if isinstance(v, str) else repr(v)[:200]))
    return out


class RemoteCodeCheck(Check):
    """auto_map, code files and custom_generate/, against the spec's allow_remote_code."""

    family = "remote-code"
    rules: ClassVar[dict[str, str]] = {
        "remote-code.auto-map": "auto_map makes the engine import code from the repository",
        "remote-code.cross-repo": "auto_map references code in another repository",
        "remote-code.missing-module": "auto_map names a module that is not in the artifact",
        "remote-code.code-file": "A code file (*.py, compiled module, notebook)",
        "remote-code.custom-generate": "custom_generate/ replaces the generation loop",
        "remote-code.allowed": "Remote code the spec explicitly allows (recorded)",
    }

    def run(self, ctx: CheckContext) -> CheckOutcome:
        """Find every code trigger; severity depends on the artifact's policy."""
        out: list[Finding] = []
        for tree in ctx.trees:
            out.extend(x.with_role(tree.role) for x in self._tree(ctx, tree))
        return CheckOutcome.of(out)

    def _tree(self, ctx: CheckContext, tree: ArtifactTree) -> Iterator[Finding]:
        allowed = tree.allow_remote_code
        sev = Severity.INFO if allowed else Severity.HIGH
        names = {f.rel for f in tree.files} | {s.path for s in tree.skipped}
        for f in tree.files:
            if not is_config(f.rel):
                continue
            doc = load_config(ctx, f).doc  # an unparsable config is the config check's finding
            base = PurePosixPath(f.rel).parent
            for key, ref in auto_map_refs(doc):
                yield from self._ref(f.rel, key, ref, base, names, sev, allowed)
        for f in tree.files:
            parts = PurePosixPath(f.rel).parts
            if parts and parts[0] == "custom_generate":
                yield finding("remote-code.custom-generate", sev,
                              "custom generation code" + (" (allowed)" if allowed else ""),
                              f.rel)
            elif f.rel.endswith(_CODE_SUFFIXES):
                yield finding("remote-code.code-file", sev,
                              "code file" + (" (allowed by the spec)" if allowed else ""), f.rel)

    @staticmethod
    def _ref(rel: str, key: str, ref: str, base: PurePosixPath, names: set[str],
             sev: Severity, allowed: bool) -> Iterator[Finding]:
        if "--" in ref:
            repo, _, target = ref.partition("--")
            yield finding("remote-code.cross-repo", Severity.CRITICAL,
                          f"auto_map[{key}] loads code from repository {repo}", rel,
                          auto_class=key, reference=ref, target=target)
            return
        module = ref.rsplit(".", 1)[0]
        yield finding("remote-code.auto-map", sev,
                      f"auto_map[{key}] -> {ref}" + (" (allowed by the spec)" if allowed else ""),
                      rel, auto_class=key, reference=ref)
        path = (base / (module.replace(".", "/") + ".py")).as_posix()
        if path not in names:
            yield finding("remote-code.missing-module", Severity.HIGH,
                          f"auto_map[{key}] names {path}, which is not in the artifact", rel,
                          module=path)
