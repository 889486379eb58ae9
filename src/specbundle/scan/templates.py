"""Chat templates: parsed to a Jinja AST in the sandbox, never rendered, and pinned by sha256.

Templates are code the serving engine executes for every request (CVE-2024-34359 in a GGUF
template; sandbox escapes such as CVE-2025-27516 go through ``|attr``), so the AST is searched
for the shapes every known escape needs: dunder or private attribute access, ``attr``/``format``
indirection, the ``cycler``/``joiner``/``lipsum`` globals whose ``__init__.__globals__`` reach
``os``, template imports, and strings that spell those names. Each template's digest is
recorded so that any later change (an inference-time backdoor) is visible in the signed report.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any, ClassVar

from jinja2 import nodes
from jinja2.exceptions import TemplateSyntaxError
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specbundle.digest import sha256_bytes
from specbundle.scan.findings import CheckOutcome, Finding, Severity, TemplateDigest, finding
from specbundle.scan.gguf_header import load_gguf
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.inventory import ArtifactTree
from specbundle.scan.jsonfile import load_json
from specbundle.scan.sniff import FileKind

__all__ = ["TemplateCheck", "analyse_template", "template_changes"]

_GADGET_GLOBALS = frozenset({"cycler", "joiner", "lipsum", "self", "config", "request",
                             "url_for", "get_flashed_messages", "g", "session"})
# Attributes that only an escape needs; names (free variables) likewise. Kept apart because
# templates legitimately use variables such as ``system``.
_DANGEROUS_ATTRS = frozenset({"os", "sys", "subprocess", "popen", "system", "builtins",
                              "import_module", "eval", "exec", "compile", "getattr", "globals",
                              "locals", "mro", "spawn", "func_globals", "f_globals", "gi_frame",
                              "cr_frame", "modules"})
_DANGEROUS_NAMES = frozenset({"os", "sys", "subprocess", "popen", "builtins", "import_module",
                              "eval", "exec", "getattr", "globals", "locals"})
_SUSPICIOUS = re.compile(
    r"__\w+__|\bpopen\b|\bos\.(system|popen|exec)|\bsubprocess\b|\bimport_module\b|"
    r"\beval\s*\(|\bexec\s*\(|\bgetattr\s*\("
)
_RANGE_LIMIT = 100_000


class _GenerationTag(Extension):
    """transformers' ``{% generation %}`` block (AssistantTracker), parsed as a plain block."""

    tags: ClassVar[set[str]] = {"generation"}  # type: ignore[misc]

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


_ENV = ImmutableSandboxedEnvironment(extensions=["jinja2.ext.loopcontrols", _GenerationTag])


def _attr_problem(attr: str, how: str) -> tuple[str, Severity, str] | None:
    if attr.startswith("__") or attr in ("mro", "func_globals"):
        return "template.dunder-access", Severity.CRITICAL, f"{how} of {attr!r}"
    if attr.startswith("_"):
        return "template.dunder-access", Severity.HIGH, f"{how} of private {attr!r}"
    if attr in _DANGEROUS_ATTRS:
        return "template.dangerous-name", Severity.CRITICAL, f"{how} of {attr!r}"
    return None


def _node_problems(node: nodes.Node) -> Iterator[tuple[str, Severity, str]]:
    if isinstance(node, nodes.Getattr):
        p = _attr_problem(node.attr, "attribute access")
        if p:
            yield p
        # A literal format string is inspected as a string constant; any other is opaque.
        if node.attr in ("format", "format_map") and not isinstance(node.node, nodes.Const):
            yield "template.format", Severity.HIGH, f"str.{node.attr} on a non-literal string"
    elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and isinstance(
            node.arg.value, str):
        p = _attr_problem(node.arg.value, "item access")
        if p:
            yield p
    elif isinstance(node, nodes.Name):
        if node.name in _GADGET_GLOBALS:
            yield "template.gadget", Severity.CRITICAL, f"global {node.name!r} (sandbox gadget)"
        elif node.name in _DANGEROUS_NAMES or node.name.startswith("__"):
            yield "template.dangerous-name", Severity.CRITICAL, f"name {node.name!r}"
    elif isinstance(node, nodes.Filter):
        if node.name == "attr":
            yield "template.attr-filter", Severity.HIGH, "|attr filter (attribute indirection)"
        elif node.name == "format" and not isinstance(node.node, nodes.Const):
            yield "template.format", Severity.HIGH, "|format on a non-literal format string"
    elif isinstance(node, (nodes.Import, nodes.FromImport, nodes.Include, nodes.Extends)):
        yield "template.import", Severity.CRITICAL, f"{type(node).__name__.lower()} statement"
    elif isinstance(node, nodes.Const) and isinstance(node.value, str):
        m = _SUSPICIOUS.search(node.value)
        if m:
            yield "template.suspicious-string", Severity.HIGH, f"string spells {m.group(0)!r}"
    elif (isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name)
          and node.node.name == "range"):
        big = [a.value for a in node.args if isinstance(a, nodes.Const)
               and isinstance(a.value, int) and a.value > _RANGE_LIMIT]
        if big:
            yield "template.resource", Severity.MEDIUM, f"range({big[0]}) (denial of service)"


def analyse_template(source: str) -> list[tuple[str, Severity, str]]:
    """Problems in one template source: ``(check id, severity, message)``."""
    out: list[tuple[str, Severity, str]] = []
    try:
        for node in _ENV.parse(source).find_all(nodes.Node):
            out.extend(p for p in _node_problems(node) if p not in out)
    except TemplateSyntaxError as err:
        return [("template.syntax", Severity.HIGH, f"does not parse: {err.message} "
                 f"(line {err.lineno})")]
    except RecursionError:
        return [("template.syntax", Severity.HIGH, "nested too deeply to analyse")]
    return out


def _json_templates(doc: Any) -> Iterator[tuple[str, Any]]:
    tpl = doc.get("chat_template") if isinstance(doc, dict) else None
    if isinstance(tpl, list):
        for i, item in enumerate(tpl):
            if isinstance(item, dict):
                yield str(item.get("name", i)), item.get("template")
    elif tpl is not None:
        yield "default", tpl


class TemplateCheck(Check):
    """Every chat template in tokenizer configs, .jinja files and GGUF metadata."""

    family = "template"
    rules: ClassVar[dict[str, str]] = {
        "template.syntax": "Template does not parse",
        "template.dunder-access": "Dunder or private attribute/item access",
        "template.dangerous-name": "Reference to os, popen, import, eval and similar",
        "template.gadget": "cycler/joiner/lipsum/self/config globals (sandbox-escape gadgets)",
        "template.attr-filter": "|attr filter (attribute indirection)",
        "template.format": "format indirection on a non-literal string",
        "template.import": "import/include/extends statement",
        "template.suspicious-string": "A string that spells an escape primitive",
        "template.resource": "Resource-exhaustion construct",
        "template.not-text": "Template field that is not a string",
        "template.size": "Template larger than the limit",
        "template.differs": "The GGUF's default template differs from the repository's",
        "template.changed": "A template differs from the bundle's previous scan",
    }

    def run(self, ctx: CheckContext) -> CheckOutcome:
        """Analyse and record every template."""
        findings: list[Finding] = []
        digests: list[TemplateDigest] = []
        for tree in ctx.trees:
            for file, name, src in self._sources(ctx, tree):
                if not isinstance(src, str):
                    findings.append(finding("template.not-text", Severity.HIGH,
                                            f"template {name!r} is not a string",
                                            file).with_role(tree.role))
                    continue
                data = src.encode("utf-8", errors="surrogateescape")
                digests.append(TemplateDigest(tree.role, file, name, sha256_bytes(data)))
                if len(data) > ctx.options.max_template_bytes:
                    findings.append(finding("template.size", Severity.HIGH,
                                            f"template {name!r} is {len(data)} bytes; too large "
                                            "to analyse", file,
                                            template=name).with_role(tree.role))
                    continue
                for cid, sev, msg in analyse_template(src):
                    findings.append(finding(cid, sev, f"template {name!r}: {msg}", file,
                                            template=name).with_role(tree.role))
        findings.extend(self._differs(digests))
        return CheckOutcome(findings=tuple(findings), templates=tuple(digests))

    @staticmethod
    def _differs(digests: list[TemplateDigest]) -> Iterator[Finding]:
        """A GGUF whose template is not the repository's: a re-packaged template to review."""
        for role in sorted({d.role for d in digests}):
            mine = [d for d in digests if d.role == role and d.name == "default"]
            hf = {d.sha256 for d in mine if "#" not in d.file}
            for d in mine:
                if "#" in d.file and hf and d.sha256 not in hf:
                    yield finding("template.differs", Severity.MEDIUM,
                                  "GGUF chat template differs from the repository's template",
                                  d.file, sha256=d.sha256).with_role(role)

    @staticmethod
    def _sources(ctx: CheckContext, tree: ArtifactTree) -> Iterator[tuple[str, str, Any]]:
        for f in tree.files:
            p = PurePosixPath(f.rel)
            if p.name in ("tokenizer_config.json", "chat_template.json"):
                doc = load_json(f.path)
                for name, tpl in _json_templates(doc):
                    yield f.rel, name, tpl
            elif p.name == "chat_template.jinja" or (
                    p.suffix == ".jinja" and "additional_chat_templates" in p.parts):
                name = "default" if p.name == "chat_template.jinja" else p.stem
                yield f.rel, name, f.path.read_bytes().decode("utf-8", errors="surrogateescape")
            elif f.rel.endswith(".gguf") or ctx.kind(f.path) is FileKind.GGUF:
                h = load_gguf(ctx, f.path)
                for key, val in sorted(h.kv.items()) if h else ():
                    if key == "tokenizer.chat_template":
                        yield f"{f.rel}#{key}", "default", val
                    elif key.startswith("tokenizer.chat_template."):
                        yield f"{f.rel}#{key}", key.rsplit(".", 1)[1], val


def template_changes(old: tuple[TemplateDigest, ...],
                     new: tuple[TemplateDigest, ...]) -> list[Finding]:
    """Templates whose digest changed (or that appeared/vanished) since the previous scan."""
    before = {(t.role, t.file, t.name): t.sha256 for t in old}
    after = {(t.role, t.file, t.name): t.sha256 for t in new}
    out = []
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            role, file, name = key
            out.append(finding("template.changed", Severity.MEDIUM,
                               f"template {name!r} changed since the previous scan", file,
                               previous=before.get(key) or "-",
                               current=after.get(key) or "-").with_role(role))
    return out
