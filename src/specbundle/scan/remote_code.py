"""Remote code: ``auto_map`` references, Python files and ``custom_generate/``.

Serving stacks import ``auto_map`` modules when ``trust_remote_code`` is set, so each of these
is code, blocked unless the spec allows remote code for that artifact, and recorded when it
does. A cross-repository reference (``org/repo--module.Class``) names code that is not in the
pinned snapshot at all and is blocked either way.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any, ClassVar

from specbundle.scan.configs import find_key, is_config, load_config
from specbundle.scan.findings import CheckOutcome, Finding, Severity, finding
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.inventory import ArtifactTree

__all__ = ["RemoteCodeCheck", "auto_map_refs", "class_refs", "cross_repo_strings"]

# compared lower-cased: an import on a case-insensitive file system finds MODELING.PY too
_CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyd", ".pyw", ".pyz", ".so", ".dylib", ".dll",
                  ".ipynb")
# transformers' dynamic_module_utils reference to code in another repository:
# "[org/]repo--module.Class" (a hub repo name never contains "--")
_CROSS_REPO = re.compile(r"[\w.\-]+(?:/[\w.\-]+)?--[A-Za-z_][\w/]*\.[A-Za-z_]\w*")
_LEAVES = frozenset({str, int, float, bool, type(None)})
_TRUTHY = (True, 1, "true", "True", "TRUE", "1", "yes")


def _values(amap: Any) -> list[tuple[str, Any]]:
    # None is transformers' own "no class for this slot"; keys sorted as text (YAML keys
    # may be numbers and strings in one map)
    return [(str(key), v) for key, val in sorted(amap.items(), key=lambda kv: str(kv[0]))
            for v in (val if isinstance(val, list) else [val]) if v is not None]


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
        out.extend((prefix + key, v if isinstance(v, str) else repr(v)[:200])
                   for key, v in _values(amap))
    return out


def class_refs(name: str, doc: Any) -> list[tuple[str, str]]:
    """``(label, reference)`` of every class a loader resolves to code in a config.

    ``auto_map`` (transformers, any depth); ``custom_pipelines.<task>.impl`` (transformers'
    pipeline()); the module ``type`` of a sentence-transformers ``modules.json`` and the
    ``types`` of its ``router_config.json`` that are not ``sentence_transformers.*`` (loaded
    with ``get_class_from_dynamic_module``).
    """
    out = [(f"auto_map[{key}]", ref) for key, ref in auto_map_refs(doc)]
    for path, pipes in find_key(doc, "custom_pipelines"):
        if not isinstance(pipes, dict):
            out.append((path, repr(pipes)[:200]))
            continue
        for task, spec in sorted(pipes.items(), key=lambda kv: str(kv[0])):
            impl = spec.get("impl") if isinstance(spec, dict) else spec
            if impl is not None:
                out.append((f"{path}.{task}.impl", impl if isinstance(impl, str)
                            else repr(impl)[:200]))
    base = name.rsplit("/", 1)[-1].lower()
    items: list[tuple[str, Any]] = []
    if base == "modules.json" and isinstance(doc, list):
        items = [(f"[{i}].type", m.get("type")) for i, m in enumerate(doc) if isinstance(m, dict)]
    elif base == "router_config.json" and isinstance(doc, dict) and isinstance(
            doc.get("types"), dict):
        items = [(f"types.{k}", v) for k, v in doc["types"].items()]
    for where, ref in items:
        if not (isinstance(ref, str) and ref.startswith("sentence_transformers.")):
            out.append((where, ref if isinstance(ref, str) else repr(ref)[:200]))
    return out


def cross_repo_strings(doc: Any) -> list[str]:
    """Every string value anywhere that is shaped like a cross-repository code reference.

    Whatever key holds it: the loaders that resolve such strings keep growing, and a hub repo
    name never contains ``--``, so the shape alone is the signal. Filtered on ``--`` with
    comprehensions (a 30 MB tokenizer.json has ~10^6 strings).
    """
    found: list[str] = []
    stack: list[Any] = [doc]
    while stack:
        node = stack.pop()
        items = list(node.values()) if isinstance(node, dict) else node
        found.extend(v for v in [v for v in items if type(v) is str and "--" in v]
                     if _CROSS_REPO.fullmatch(v))
        if not set(map(type, items)) <= _LEAVES:
            stack.extend(v for v in items if isinstance(v, (dict, list, tuple)))
    return found


class RemoteCodeCheck(Check):
    """auto_map and other class references, code files and custom_generate/, against the
    spec's allow_remote_code."""

    family = "remote-code"
    rules: ClassVar[dict[str, str]] = {
        "remote-code.auto-map": "auto_map (or another class reference: custom_pipelines, "
                                "sentence-transformers modules) makes a loader import code "
                                "from the repository",
        "remote-code.cross-repo": "A class reference to code in another repository",
        "remote-code.missing-module": "A class reference names a module not in the artifact",
        "remote-code.trust-flag": "A config that turns trust_remote_code on by itself",
        "remote-code.code-file": "A code file (*.py, compiled module, notebook)",
        "remote-code.custom-generate": "custom_generate/ replaces the generation loop",
        "remote-code.allowed": "Remote code the spec explicitly allows (recorded)",
    }

    def run(self, ctx: CheckContext) -> CheckOutcome:
        """Find every code trigger; severity depends on the artifact's policy."""
        out: list[Finding] = []
        for tree in ctx.trees:
            seen: set[tuple[str, str, str | None]] = set()
            for x in self._tree(ctx, tree):
                if (x.check_id, x.message, x.file) not in seen:  # one per reading of a file
                    seen.add((x.check_id, x.message, x.file))
                    out.append(x.with_role(tree.role))
        return CheckOutcome.of(out)

    def _tree(self, ctx: CheckContext, tree: ArtifactTree) -> Iterator[Finding]:
        allowed = tree.allow_remote_code
        sev = Severity.INFO if allowed else Severity.HIGH
        names = {f.rel for f in tree.files} | {s.path for s in tree.skipped}
        for f in tree.files:
            if not is_config(f.rel):
                continue
            base = PurePosixPath(f.rel.rpartition("/")[0])
            # every reading some reader makes (duplicate keys: first and last wins)
            for doc in load_config(ctx, f).views:
                refs = class_refs(f.rel, doc)
                for key, ref in refs:
                    yield from self._ref(f.rel, key, ref, base, names, sev, allowed)
                listed = {r for _k, r in refs}
                for ref in cross_repo_strings(doc):
                    if ref not in listed:
                        yield from self._ref(f.rel, "a string value", ref, base, names, sev,
                                             allowed)
                for path, flag in find_key(doc, "trust_remote_code"):
                    if flag in _TRUTHY:
                        yield finding("remote-code.trust-flag", sev,
                                      f"{path} = {flag!r} turns remote code on for the loader"
                                      + (" (allowed by the spec)" if allowed else ""), f.rel)
        for f in tree.files:
            low = f.rel.lower()
            if low.startswith("custom_generate/"):
                yield finding("remote-code.custom-generate", sev,
                              "custom generation code" + (" (allowed)" if allowed else ""),
                              f.rel)
            elif low.endswith(_CODE_SUFFIXES):
                yield finding("remote-code.code-file", sev,
                              "code file" + (" (allowed by the spec)" if allowed else ""), f.rel)

    @staticmethod
    def _ref(rel: str, key: str, ref: str, base: PurePosixPath, names: set[str],
             sev: Severity, allowed: bool) -> Iterator[Finding]:
        if "--" in ref:
            repo, _, target = ref.partition("--")
            yield finding("remote-code.cross-repo", Severity.CRITICAL,
                          f"{key} loads code from repository {repo}", rel,
                          auto_class=key, reference=ref, target=target)
            return
        module = ref.rsplit(".", 1)[0]
        yield finding("remote-code.auto-map", sev,
                      f"{key} -> {ref}" + (" (allowed by the spec)" if allowed else ""),
                      rel, auto_class=key, reference=ref)
        path = (base / (module.replace(".", "/") + ".py")).as_posix()
        if path not in names:
            yield finding("remote-code.missing-module", Severity.HIGH,
                          f"{key} names {path}, which is not in the artifact", rel,
                          module=path)

