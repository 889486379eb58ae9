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

from specbundle.scan.configs.check import find_key, is_config, load_config
from specbundle.scan.findings import CheckOutcome, Finding, Severity, finding
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.inventory import ArtifactTree

__all__ = ["RemoteCodeCheck", "auto_map_refs", "class_refs", "cross_repo_strings"]

# compared lower-cased: an import on a case-insensitive file system finds MODELING.PY too
_CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyd", ".pyw", ".pyz", ".so", ".dylib", ".dll",
                  ".ipynb")
# transformers' dynamic_module_utils reference to code in another repository:
# "[org/]repo--module.Class" (a hub repo name never contains "--")
# (the module is a file name: transformers imports 'my-module.py' by path as well)
_CROSS_REPO = re.compile(r"[\w.\-]+(?:/[\w.\-]+)?--[\w\-][\w/\-]*\.[A-Za-z_]\w*")
_LEAVES = frozenset({str, int, float, bool, type(None)})
# keys a loader turns into a class by name: transformers' *_class_from_name falls back to
# getattr(transformers, name), so 'AutoModelForCausalLM' as a tokenizer_class runs that
# class's from_pretrained; real values are plain tokenizer/processor class names
_CLASS_KEYS = ("tokenizer_class", "processor_class", "feature_extractor_type",
               "image_processor_type", "video_processor_type")
_CLASS_NAME = re.compile(
    r"[A-Za-z_]\w*(?:Tokenizer|Processor|FeatureExtractor|Extractor|Backend)(?:Fast|Pil|PIL)?",
    re.ASCII)
# init arguments a tokenizer opens as files (vocab_file, merges_file, tokenizer_file, spm_file
# ...): transformers keeps the config's value over the repository's file, so a path outside
# the snapshot loads a tokenizer (or reads a file) the scan never saw
_FILE_ARG = re.compile(r"[A-Za-z_]\w*_file")
# recorded by old tokenizer_configs with the saver's own paths, never opened from there
_NOT_OPENED = frozenset({"special_tokens_map_file", "added_tokens_file"})
_OUTSIDE = re.compile(r"^(?:[/\\~]|[A-Za-z]:|[a-z][a-z0-9+.\-]*://)|(?:^|[/\\])\.\.(?:[/\\]|$)")
# transformers loads an attention (or layer) implementation named "org/repo[@rev][:name]" as a
# compiled kernel from that hub repository (kernels library): code outside the snapshot
_KERNEL_KEYS = ("attn_implementation", "_attn_implementation", "_attn_implementation_internal",
                "kernel_mapping")
_HUB_KERNEL = re.compile(r"[^/:]+/[^/:]+(?:@[^/:]+)?(?::[^/:]+)?")
_TRANSFORMERS_MODULE = re.compile(r"transformers(?:\.[A-Za-z_]\w*)*")
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
    pipeline()); PEFT's ``auto_mapping`` (``import_module(parent_library)``) unless it names
    a transformers class; the module ``type`` of a sentence-transformers ``modules.json`` and
    the ``types`` of its ``router_config.json`` that are not ``sentence_transformers.*``
    (loaded with ``get_class_from_dynamic_module``); diffusers ``model_index.json``
    components from a library other than diffusers/transformers (imported by name).
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
    for path, amap in find_key(doc, "auto_mapping"):  # PEFT: import_module(parent_library)
        if isinstance(amap, dict):
            lib, cls = amap.get("parent_library"), amap.get("base_model_class")
            if lib is None and cls is None:
                continue
            if isinstance(lib, str) and _TRANSFORMERS_MODULE.fullmatch(lib) and isinstance(
                    cls, str) and cls.isidentifier():
                continue
            out.append((path, f"{lib}.{cls}"))
        elif isinstance(amap, (str, list)):  # not a vocabulary's token id
            out.append((path, repr(amap)[:200]))
    base = name.rsplit("/", 1)[-1].lower()
    items: list[tuple[str, Any]] = []
    if base == "model_index.json" and isinstance(doc, dict):
        # diffusers: [library, class] per component; another library is imported by name
        items = [(k, f"{v[0]}.{v[1]}") for k, v in doc.items()
                 if isinstance(v, list) and len(v) == 2 and v[0] is not None
                 and v[0] not in ("diffusers", "transformers")]
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


def _class_names(rel: str, doc: Any) -> Iterator[Finding]:
    """Class-name keys (any depth) whose value is not a plain tokenizer/processor class."""
    for key in _CLASS_KEYS:
        for path, value in find_key(doc, key):
            if value is None or type(value) in (int, float, bool) or (
                    isinstance(value, str) and _CLASS_NAME.fullmatch(value)):
                continue  # a number is a vocabulary's token id, not a class
            shown = value if isinstance(value, str) else repr(value)[:200]
            yield finding("remote-code.class-name", Severity.HIGH,
                          f"{path} = {shown!r} is not a tokenizer/processor class name (a "
                          "loader resolves it by name)", rel, key=path, value=shown)


def _file_args(rel: str, doc: Any) -> Iterator[Finding]:
    """``*_file`` arguments in objects (any depth) naming a path outside the artifact."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            for k in [k for k in node if type(k) is str and k.endswith("_file")]:
                v = node[k]
                where = f"{path}.{k}" if path else k
                if (isinstance(v, str) and k not in _NOT_OPENED and _FILE_ARG.fullmatch(k)
                        and _OUTSIDE.search(v)):
                    yield finding("remote-code.outside-path", Severity.HIGH,
                                  f"{where} = {v[:200]!r} opens a file outside the artifact",
                                  rel, key=where, value=v)
            values: Any = node.values()
        elif isinstance(node, list):
            values = node
        else:
            continue
        if not set(map(type, values)) <= _LEAVES:
            items = node.items() if isinstance(node, dict) else enumerate(node)
            stack.extend(((f"{path}.{k}" if path else str(k)) if isinstance(node, dict)
                          else f"{path}[{k}]", v)
                         for k, v in items if isinstance(v, (dict, list)))


def _hub_kernels(rel: str, doc: Any, allowed: bool) -> Iterator[Finding]:
    """Attention/kernel settings (any depth, per sub-config too) naming a hub kernel repo."""
    for key in _KERNEL_KEYS:
        for path, value in find_key(doc, key):
            values = value.values() if isinstance(value, dict) else [value]
            for v in values:
                if isinstance(v, str) and _HUB_KERNEL.fullmatch(v):
                    yield finding("remote-code.cross-repo", Severity.CRITICAL,
                                  f"{path} = {v[:200]!r} loads a compiled kernel from hub "
                                  "repository " + v.split("@")[0].split(":")[0][:200]
                                  + (" (not covered by allow_remote_code)" if allowed else ""),
                                  rel, auto_class=path, reference=v)


def _module_paths(rel: str, doc: Any) -> Iterator[Finding]:
    """sentence-transformers ``modules.json`` entries whose ``path`` leaves the artifact (each
    module's config, weights and code are loaded from there)."""
    if rel.rsplit("/", 1)[-1].lower() != "modules.json" or not isinstance(doc, list):
        return
    for i, m in enumerate(doc):
        where = m.get("path") if isinstance(m, dict) else None
        if isinstance(where, str) and _OUTSIDE.search(where):
            yield finding("remote-code.outside-path", Severity.HIGH,
                          f"[{i}].path = {where[:200]!r} loads a module from outside the "
                          "artifact", rel, key=f"[{i}].path", value=where)


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
        "remote-code.class-name": "A tokenizer/processor class key naming something that is "
                                  "not a plain tokenizer or processor class",
        "remote-code.outside-path": "A file argument (vocab_file, tokenizer_file...) pointing "
                                    "outside the artifact",
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
                yield from _class_names(f.rel, doc)
                yield from _file_args(f.rel, doc)
                yield from _module_paths(f.rel, doc)
                yield from _hub_kernels(f.rel, doc, allowed)
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

