"""Chat templates: checked against allow-lists, trial-rendered in a sandbox, pinned by sha256.

Templates are code the serving engine executes for every request (CVE-2024-34359 in a GGUF
template; sandbox escapes such as CVE-2025-27516 go through ``|attr``), so a template may only
use what real chat templates use (:mod:`.policy`: node types, filters, tests, globals,
methods, constant keys) and must then render a set of sample conversations in a stricter
sandbox without touching a private attribute or a string-formatting path, within a time and
output budget (:mod:`.render`). Each template's digest is recorded so that any later
change (an inference-time backdoor) is visible in the signed report. Templates are found in
every JSON/YAML config at any depth, in every ``*.jinja`` file and in GGUF metadata.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, ClassVar

from jinja2 import nodes
from jinja2.exceptions import TemplateSyntaxError

from specbundle.digest import hash_file, sha256_bytes
from specbundle.scan.configs import find_key, is_config, load_config
from specbundle.scan.findings import CheckOutcome, Finding, Severity, TemplateDigest, finding
from specbundle.scan.formats import load_gguf
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.inventory import ArtifactTree
from specbundle.scan.sniff import FileKind
from specbundle.scan.templates.policy import lexical_problems, policy_problems
from specbundle.scan.templates.render import TrialEnvironment, force_branches, trial_render
from specbundle.scan.templates.walk import Tree
from specbundle.strict import read_bounded

__all__ = ["EVERY_BRANCH_MAX_BYTES", "TemplateCheck", "analyse_template", "template_changes"]

_SUSPICIOUS = re.compile(
    r"__\w+__|\bpopen\b|\bos\.(system|popen|exec)|\bsubprocess\b|\bimport_module\b|"
    r"\beval\s*\(|\bexec\s*\(|\bgetattr\s*\("
)
_TEMPLATE_SUFFIXES = (".jinja", ".jinja2", ".j2")
# The every-branch render compiles the template a second time (~5 s per MB): real templates are
# at most 18 kB, so a larger one gets the static check and the sample render only.
EVERY_BRANCH_MAX_BYTES = 64 * 1024


def _utf8(text: str) -> bytes:
    """The bytes of a template: a file's undecodable bytes as they were (surrogateescape), a
    lone surrogate a JSON escape made (``"\\ud800"``, which surrogateescape cannot encode) as
    its three-byte form, so the digest and the size budget never crash on hostile text."""
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="surrogatepass")


def analyse_template(source: str, *, render: bool = True) -> list[tuple[str, Severity, str]]:
    """Problems in one template source: ``(check id, severity, message)``.

    The trial render runs only when the static check found nothing blocking; the second one,
    with every branch taken, only on templates up to :data:`EVERY_BRANCH_MAX_BYTES` (the
    static check is the guarantee, that render a second look).
    """
    env = TrialEnvironment()
    try:
        ast = env.parse(source)
        tree = Tree(ast)
        out = lexical_problems(env.lex(source), source) + policy_problems(ast, tree)
        seen = set(out)
        for const in tree.find_all(nodes.Const):
            if isinstance(const.value, str) and (m := _SUSPICIOUS.search(const.value)):
                p = ("template.suspicious-string", Severity.HIGH, f"string spells {m.group(0)!r}")
                if p not in seen:
                    seen.add(p)
                    out.append(p)
    except TemplateSyntaxError as err:
        return [("template.syntax", Severity.HIGH, f"does not parse: {err.message} "
                 f"(line {err.lineno})")]
    except RecursionError:
        return [("template.syntax", Severity.HIGH, "nested too deeply to analyse")]
    if render and not any(sev.rank >= Severity.HIGH.rank for _c, sev, _m in out):
        out.extend(trial_render(ast, env))
    if render and not any(sev.rank >= Severity.HIGH.rank for _c, sev, _m in out) and (
            len(_utf8(source)) <= EVERY_BRANCH_MAX_BYTES):
        # again with every branch of every ``if`` taken: what no sample reaches still runs
        # (the tree is compiled already; it is rewritten in place rather than parsed again)
        forced = TrialEnvironment(every_branch=True)
        ast.set_environment(forced)
        out.extend(trial_render(force_branches(ast), forced))
    return out


@dataclass(frozen=True)
class _Oversize:
    """A template file too large to read: recorded by digest, reported, never analysed."""

    size: int
    sha256: str


def _json_templates(doc: Any) -> Iterator[tuple[str, Any]]:
    """Every ``chat_template`` at any depth: a string, a list of named templates (tokenizers)
    or a mapping of name to template (processors)."""
    for path, tpl in find_key(doc, "chat_template"):
        where = "" if path == "chat_template" else path.removesuffix(".chat_template") + ":"
        if isinstance(tpl, list):
            for i, item in enumerate(tpl):
                if isinstance(item, dict):
                    yield where + str(item.get("name", i)), item.get("template")
                else:
                    yield f"{where}{i}", item
        elif isinstance(tpl, dict):
            for name, item in tpl.items():
                yield where + str(name), item
        elif tpl is not None:
            yield where + "default", tpl


def _config_templates(views: tuple[Any, ...]) -> Iterator[tuple[str, Any]]:
    """The templates of every reading of a config (transformers' first, then what a reader
    taking the first duplicate key, or one skipping comments, sees), each distinct one once:
    a template only another reader sees is analysed all the same."""
    seen: set[tuple[str, str]] = set()
    for i, view in enumerate(views):
        for name, tpl in _json_templates(view):
            key = (name, tpl if isinstance(tpl, str) else repr(tpl))
            if key in seen:
                continue
            seen.add(key)
            yield (name if i == 0 else f"{name} (reading {i + 1})"), tpl


class TemplateCheck(Check):
    """Every chat template in tokenizer configs, .jinja files and GGUF metadata."""

    family = "template"
    rules: ClassVar[dict[str, str]] = {
        "template.syntax": "Template does not parse",
        "template.dunder-access": "Dunder or private attribute/item access",
        "template.gadget": "cycler/joiner/lipsum/self/config globals (sandbox-escape gadgets)",
        "template.attr-filter": "|attr filter (attribute indirection)",
        "template.format": "format indirection on a non-literal string",
        "template.import": "import/include/extends statement",
        "template.suspicious-string": "A string that spells an escape primitive",
        "template.construct": "A Jinja construct real chat templates never use",
        "template.attribute": "A Python attribute real chat templates never use",
        "template.computed-key": "A subscript whose key is built from strings",
        "template.filter": "A filter real chat templates never use",
        "template.filter-arg": "A filter/test argument naming an attribute, filter or test "
                               "that is not a listed constant",
        "template.test": "A test real chat templates never use",
        "template.call": "A call of something that is not a macro, allowed global or method",
        "template.sandbox": "The trial render touched something the sandbox denies",
        "template.engine-differs": "A construct llama.cpp's engine evaluates differently "
                                   "from Jinja (another branch, other text)",
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
        # a pair's trees (and a GGUF beside its tokenizer_config) mostly carry one template:
        # analysed once per scan (parse, policy, compile and trial render: ~1 ms); keyed by the
        # text itself, not its digest, which two texts differing only in escaped bytes share
        verdicts: dict[str, list[tuple[str, Severity, str]]] = {}
        spent = 0  # bytes of distinct templates analysed (max_template_total_bytes)
        for tree in ctx.trees:
            for file, name, src in self._sources(ctx, tree):
                if isinstance(src, _Oversize):
                    digests.append(TemplateDigest(tree.role, file, name, src.sha256))
                    findings.append(finding("template.size", Severity.HIGH,
                                            f"template {name!r} is {src.size} bytes; too large "
                                            "to analyse", file,
                                            template=name).with_role(tree.role))
                    continue
                if not isinstance(src, str):
                    findings.append(finding("template.not-text", Severity.HIGH,
                                            f"template {name!r} is not a string",
                                            file).with_role(tree.role))
                    continue
                data = _utf8(src)
                digests.append(TemplateDigest(tree.role, file, name, sha256_bytes(data)))
                if len(data) > ctx.options.max_template_bytes:
                    findings.append(finding("template.size", Severity.HIGH,
                                            f"template {name!r} is {len(data)} bytes; too large "
                                            "to analyse", file,
                                            template=name).with_role(tree.role))
                    continue
                if src not in verdicts:
                    if spent + len(data) > ctx.options.max_template_total_bytes:
                        findings.append(finding(
                            "template.size", Severity.HIGH,
                            f"template {name!r} ({len(data)} bytes) not analysed: the scan's "
                            f"templates already total {spent} bytes (limit "
                            f"{ctx.options.max_template_total_bytes})", file,
                            template=name).with_role(tree.role))
                        continue
                    spent += len(data)
                    verdicts[src] = analyse_template(src)
                for cid, sev, msg in verdicts[src]:
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
            if is_config(f.rel):
                for name, tpl in _config_templates(load_config(ctx, f).views):
                    yield f.rel, name, tpl
            elif p.suffix.lower() in _TEMPLATE_SUFFIXES:
                if not ctx.readable(f.path):
                    continue  # the files check reports it
                name = "default" if p.name == "chat_template.jinja" else p.stem
                if f.size > ctx.options.max_template_bytes:
                    yield f.rel, name, _Oversize(f.size, hash_file(f.path))
                    continue
                data = read_bounded(f.path, max_bytes=ctx.options.max_template_bytes)
                yield f.rel, name, data.decode("utf-8", errors="surrogateescape")
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
