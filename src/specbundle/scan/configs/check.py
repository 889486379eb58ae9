"""Every JSON/YAML file in an artifact, parsed once, and searched at any depth in every reading.

transformers and the engines read configs by many names (``processor_config.json``,
``video_preprocessor_config.json``, sub-configs nested under ``text_config``...), and the list
grows with each release, so a name list is always behind: every ``*.json``/``*.yaml``/``*.yml``
file is a config here, and ``auto_map`` / ``chat_template`` are searched for at any nesting
depth. A config too large to analyse is a HIGH finding, never "absent" (a padded
``tokenizer_config.json`` would otherwise hide its template).

Readers disagree on what a JSON file says (Python's ``json`` keeps the last of two duplicate
keys, others the first; Python reads ``NaN``, a UTF-16 file read as bytes or a byte-order mark,
lenient readers skip comments and trailing commas), so a config that is not plain strict JSON
is never "unparsable, hence empty": every reading some reader may make is kept
(:attr:`ConfigDoc.views`, transformers' own first, as :attr:`ConfigDoc.doc`) and searched, and
the disagreement itself is a finding (HIGH; ``NaN``/``Infinity``, which Python's own writer
emits, MEDIUM). Unpaired surrogate escapes (the tokenizers library refuses them) and a
searched key followed by a NUL (C-string readers cut it there) are readings Python does not
make: HIGH as well. A YAML file whose aliases expand past a node budget is refused before any
walk, and one with a tag other than the plain value types (``!!omap``, ``!!set``, local tags)
is HIGH: readers build other structures from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import yaml

from specbundle.scan.findings import CheckOutcome, Finding, Severity, finding
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.inventory import TreeFile
from specbundle.scan.jsonfile import DuplicateKeys, loads_strict
from specbundle.strict import MalformedDocument, loads_yaml, read_bounded

__all__ = ["CONFIG_SUFFIXES", "SEARCHED_KEYS", "ConfigCheck", "ConfigDoc", "find_key", "is_config",
           "load_config"]

CONFIG_SUFFIXES = (".json", ".yaml", ".yml")
_MAX_DEPTH = 64
_LEAVES = frozenset({str, int, float, bool, type(None)})  # what a JSON/YAML scalar parses to
_MAX_INT_DIGITS = 4000  # Python refuses int("1" * 4301): transformers cannot load such a file
MAX_YAML_NODES = 1_000_000  # nodes a YAML document may expand to through its aliases
# JSON text that is only strings and comments/trailing commas, for the lenient reading
_STRING_OR_COMMENT = re.compile(r'("(?:[^"\\]|\\.)*")|//[^\n]*|/\*.*?\*/|#[^\n]*', re.S)
_STRING_OR_TRAILING_COMMA = re.compile(r'("(?:[^"\\]|\\.)*")|,(\s*[\]}])', re.S)
# a \uD800-\uDFFF escape (paired ones decode to one character and are fine)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")

Problem = tuple[str, Severity, str]
# keys the remote-code and template checks look up (any depth): a key that other readers may
# take for one of them must not hide from Python's reading
SEARCHED_KEYS = frozenset({
    "auto_map", "auto_mapping", "chat_template", "custom_pipelines", "trust_remote_code",
    "tokenizer_class", "processor_class", "feature_extractor_type", "image_processor_type",
    "video_processor_type", "attn_implementation", "_attn_implementation",
    "_attn_implementation_internal", "kernel_mapping"})


@dataclass(frozen=True)
class ConfigDoc:
    """A parsed config and what is wrong with it.

    ``doc`` is what transformers reads (Python's ``json``: the last duplicate key wins, ``NaN``
    accepted), or ``None`` when nothing could be read; ``views`` is every distinct reading
    (``doc`` first) that a check searching for code or templates must search; ``problem`` is
    the worst of ``problems`` (check id, severity, text).
    """

    doc: Any = None
    problem: Problem | None = None
    views: tuple[Any, ...] = ()
    problems: tuple[Problem, ...] = ()

    @classmethod
    def of(cls, views: list[Any], problems: list[Problem]) -> ConfigDoc:
        """A result from its readings and problems (worst problem first)."""
        ordered = tuple(sorted(problems, key=lambda p: -p[1].rank))
        return cls(doc=views[0] if views else None, problem=ordered[0] if ordered else None,
                   views=tuple(views), problems=ordered)


def is_config(rel: str) -> bool:
    """Whether a file is a JSON/YAML config (by name; content is checked by the files check)."""
    return rel.lower().endswith(CONFIG_SUFFIXES)


# -- JSON ---------------------------------------------------------------------------------------
def _decode(data: bytes) -> tuple[str, Problem | None]:
    """The text readers see, and why readers would disagree on it (encoding)."""
    enc = json.detect_encoding(data)
    if enc == "utf-8-sig":
        return data[3:].decode("utf-8", "replace"), (
            "config.encoding", Severity.HIGH,
            "UTF-8 byte-order mark: Python's bytes reader skips it, transformers and the "
            "tokenizers library refuse the file (readers disagree)")
    if enc != "utf-8":
        return data.decode(enc, "replace"), (
            "config.encoding", Severity.HIGH,
            f"{enc.upper()} encoded: Python's bytes reader decodes it, transformers and the "
            "tokenizers library refuse the file (readers disagree)")
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as err:
        return data.decode("utf-8", "replace"), (
            "config.encoding", Severity.HIGH,
            f"not valid UTF-8 (byte {err.start}): lenient readers substitute characters, "
            "strict ones refuse the file")


def _lenient(text: str, *, strict: bool = True) -> tuple[list[Any], set[str]]:
    """Python's own reading (last duplicate wins) and, if keys repeat, the first-wins one.

    Raises:
        ValueError: the text is not JSON even to Python's lenient defaults.
        RecursionError: nested beyond the interpreter's limit.
    """
    flags: set[str] = set()

    def last(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        d = dict(pairs)
        if len(d) != len(pairs):
            flags.add("duplicate")
        return d

    def first(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for k, v in pairs:
            d.setdefault(k, v)
        return d

    def constant(name: str) -> float:
        flags.add("constant")
        return float(name)

    def integer(s: str) -> int | float:
        if len(s) > _MAX_INT_DIGITS:
            flags.add("integer")
            return float(s)
        return int(s)

    def read(hook: Callable[[list[tuple[str, Any]]], dict[str, Any]]) -> Any:
        return json.loads(text, object_pairs_hook=hook, parse_constant=constant,
                          parse_int=integer, strict=strict)

    views = [read(last)]
    if "duplicate" in flags:
        views.append(read(first))
    return views, flags


def _uncomment(text: str) -> str:
    """``text`` without ``//``, ``/* */`` and ``#`` comments and trailing commas (JSON5-ish)."""
    text = _STRING_OR_COMMENT.sub(lambda m: m.group(1) or " ", text)
    return _STRING_OR_TRAILING_COMMA.sub(lambda m: m.group(1) or m.group(2), text)


def _has_lone_surrogate(doc: Any) -> bool:
    """Whether any key or string in ``doc`` holds an unpaired UTF-16 surrogate."""
    stack: list[Any] = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            items = [*node, *node.values()]
        elif isinstance(node, list):
            items = node
        else:
            continue
        if any(_SURROGATE.search(v) for v in items if type(v) is str):
            return True
        stack.extend(v for v in items if isinstance(v, (dict, list)))
    return False


def _nul_aliases(doc: Any) -> list[str]:
    """Keys holding a NUL whose text before it is a key the scan searches for: a reader that
    keeps keys as C strings (cJSON, strlen lookups) reads ``chat_template\\u0000x`` as
    ``chat_template``, which Python's reading (and so this scan) never looks up."""
    found: list[str] = []
    stack: list[Any] = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.extend(k for k in node if type(k) is str and "\x00" in k and (
                (head := k.split("\x00", 1)[0]) in SEARCHED_KEYS or head.endswith("_file")))
            items: Any = node.values()
        elif isinstance(node, list):
            items = node
        else:
            continue
        stack.extend(v for v in items if isinstance(v, (dict, list)))
    return found


def _surrogates(text: str, views: list[Any]) -> list[Problem]:
    out: list[Problem] = []
    if _SURROGATE_ESCAPE.search(text) and any(map(_has_lone_surrogate, views)):
        out.append(("config.encoding", Severity.HIGH,
                    "an unpaired surrogate escape (\\ud800-\\udfff): Python reads it, the "
                    "tokenizers library and other strict readers refuse the file (readers "
                    "disagree)"))
    if "\\u0000" in text:
        aliases = sorted({k for view in views for k in _nul_aliases(view)})
        if aliases:
            out.append(("config.duplicate-key", Severity.HIGH,
                        f"key {aliases[0].split(chr(0))[0]!r} followed by a NUL: readers that "
                        "cut keys at NUL read it as that key, Python does not"))
    return out


def _parse_json(data: bytes) -> ConfigDoc:
    text, enc_problem = _decode(data)
    problems = [enc_problem] if enc_problem else []
    try:
        doc = loads_strict(text)  # the common case: one C parse
        return ConfigDoc.of([doc], problems + _surrogates(text, [doc]))
    except DuplicateKeys as err:
        problems.append(("config.duplicate-key", Severity.HIGH,
                         f"duplicate key {err} (readers disagree on which value wins)"))
    except ValueError as err:
        if "nested too deeply" in str(err):
            problems.append(("config.malformed", Severity.HIGH,
                             "nested too deeply to analyse (readers differ on their limits)"))
            return ConfigDoc.of([], problems)
    try:
        views, flags = _lenient(text)
    except RecursionError:
        problems.append(("config.malformed", Severity.HIGH, "nested too deeply to analyse"))
        return ConfigDoc.of([], problems)
    except ValueError as err:
        return _unparsable(text, str(err), problems)
    if "constant" in flags:
        problems.append(("config.non-standard", Severity.MEDIUM,
                         "NaN/Infinity: Python reads it, strict JSON readers refuse the file"))
    if "integer" in flags:
        problems.append(("config.malformed", Severity.HIGH,
                         f"an integer longer than {_MAX_INT_DIGITS} digits: Python refuses "
                         "the file, other readers do not"))
    if "duplicate" in flags and not any(p[0] == "config.duplicate-key" for p in problems):
        problems.append(("config.duplicate-key", Severity.HIGH,
                         "duplicate key (readers disagree on which value wins)"))
    if not flags & {"constant", "integer", "duplicate"}:
        problems.append(("config.malformed", Severity.HIGH,
                         "refused by the strict reader, read by Python's (readers disagree)"))
    return ConfigDoc.of(views, problems + _surrogates(text, views))


def _unparsable(text: str, why: str, problems: list[Problem]) -> ConfigDoc:
    """Not JSON even to Python: what lenient readers (control characters in strings,
    comments, trailing commas) would still read is kept and searched; HIGH either way."""
    problems.append(("config.malformed", Severity.HIGH,
                     f"not strict JSON ({why[:200]}); lenient readers may still read it"))
    for candidate in (text, _uncomment(text)):
        try:
            views, _flags = _lenient(candidate, strict=False)
        except (ValueError, RecursionError):
            continue
        return ConfigDoc.of(views, problems)
    return ConfigDoc.of([], problems)


# -- YAML ---------------------------------------------------------------------------------------
# the tags plain YAML values resolve to; any other (!!omap, !!pairs, !!set, !!binary, local
# and application tags) builds a structure readers disagree on: ruamel reads !!omap as a
# mapping, PyYAML as a list of pairs (where no key search finds its auto_map)
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in (
    "str", "int", "float", "bool", "null", "map", "seq", "timestamp"))


def _yaml_expansion(text: str, limit: int, tags: set[str] | None = None) -> int:
    """Nodes the document expands to with every alias followed (beyond ``limit``: ``limit+1``).

    Counted on the composed node graph with one memo per node, so a billion-laughs document
    costs its own size, not its expansion; a cyclic alias counts as unbounded. The tags of
    nodes that are not plain values are added to ``tags``.
    """
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
    finally:
        loader.dispose()
    if root is None:
        return 0
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    active: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            kids: list[yaml.Node] = []
            if isinstance(node, yaml.SequenceNode):
                kids = list(node.value)
            elif isinstance(node, yaml.MappingNode):
                kids = [n for pair in node.value for n in pair]
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(k)] for k in kids))
            continue
        if key in sizes:
            continue
        if key in active:
            return limit + 1  # a cycle: an alias inside its own anchor
        if tags is not None and node.tag not in _PLAIN_TAGS:
            tags.add(str(node.tag)[:100])
        active.add(key)
        stack.append((node, True))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((n, False) for n in node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend((n, False) for pair in node.value for n in pair)
    return sizes[id(root)]


def _parse_yaml(data: bytes, limit: int, rel: str) -> ConfigDoc:
    try:
        text = data.decode("utf-8")
        tags: set[str] = set()
        if _yaml_expansion(text, MAX_YAML_NODES, tags) > MAX_YAML_NODES:
            return ConfigDoc.of([], [("config.too-large", Severity.HIGH,
                                      f"YAML aliases expand to more than {MAX_YAML_NODES} "
                                      "nodes (an alias bomb): not analysed")])
        problems: list[Problem] = [] if not tags else [(
            "config.malformed", Severity.HIGH,
            f"YAML tag {sorted(tags)[0]}: readers build different structures from it")]
        doc = loads_yaml(data, max_bytes=limit, max_depth=_MAX_DEPTH, what=rel)
        # YAML spells NUL and surrogates as \\0, \\x00, \\ud800: checked on the document
        return ConfigDoc.of([doc], problems + _surrogates("\\u0000 \\ud800", [doc]))
    except UnicodeDecodeError as err:
        return ConfigDoc.of([], [("config.encoding", Severity.HIGH,
                                  f"not valid UTF-8 (byte {err.start})")])
    except (yaml.YAMLError, RecursionError) as err:
        return ConfigDoc.of([], [("config.malformed", Severity.HIGH,
                                  f"not valid YAML ({type(err).__name__})")])
    except MalformedDocument as err:
        dup = "duplicate key" in str(err)
        return ConfigDoc.of([], [("config.duplicate-key" if dup else "config.malformed",
                                  Severity.HIGH, str(err)[:300])])


# -- the check ----------------------------------------------------------------------------------
def _parse(f: TreeFile, limit: int) -> ConfigDoc:
    if f.size > limit:
        return ConfigDoc.of([], [("config.too-large", Severity.HIGH,
                                  f"{f.size} bytes: too large to analyse (limit {limit})")])
    try:
        data = read_bounded(f.path, max_bytes=limit)
    except MalformedDocument as err:  # grew since the inventory
        return ConfigDoc.of([], [("config.too-large", Severity.HIGH, str(err)[:300])])
    except OSError as err:
        return ConfigDoc.of([], [("config.malformed", Severity.HIGH,
                                  f"unreadable: {err.strerror or err}")])
    if f.rel.lower().endswith(".json"):
        # the scanner's own strict JSON first (C scanner, duplicate keys refused):
        # strict.loads_json pre-scans nesting in Python, seconds for a 30 MB tokenizer.json
        return _parse_json(data)
    return _parse_yaml(data, limit, f.rel)


def load_config(ctx: CheckContext, f: TreeFile) -> ConfigDoc:
    """The config's parse, once per scan."""
    doc: ConfigDoc = ctx.cached("config", f.path,
                                lambda _p: _parse(f, ctx.options.max_config_bytes))
    return doc


def find_key(doc: Any, key: str) -> Iterator[tuple[str, Any]]:
    """``(path, value)`` of every ``key`` in nested objects and lists (iterative, ordered)."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            if key in node:  # at most one per object
                yield (f"{path}.{key}" if path else key), node[key]
            if set(map(type, node.values())) <= _LEAVES:
                continue  # a weight map's thousands of strings: no Python loop, no path
            for k, v in reversed(node.items()):  # file order (the stack pops the last first)
                if isinstance(v, (dict, list, tuple)):
                    stack.append(((f"{path}.{k}" if path else str(k)), v))
        elif isinstance(node, (list, tuple)):
            if set(map(type, node)) <= _LEAVES:
                continue  # a merges list's 10^5 strings: no Python loop
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(node)))
                         if isinstance(v, (dict, list, tuple)))


class ConfigCheck(Check):
    """Every JSON/YAML file parses strictly and within the size limit."""

    family = "config"
    rules: ClassVar[dict[str, str]] = {
        "config.too-large": "A JSON/YAML config too large to analyse (never treated as absent)",
        "config.duplicate-key": "A config with a duplicate key (readers disagree on the value)",
        "config.malformed": "A JSON/YAML file that does not parse strictly",
        "config.encoding": "A config that is not plain UTF-8 (readers disagree on whether it "
                           "is a config at all)",
        "config.non-standard": "NaN/Infinity in a JSON config (Python reads it, others refuse)",
    }

    def run(self, ctx: CheckContext) -> CheckOutcome:
        """Parse every config once (cached for the remote-code and template checks)."""
        out: list[Finding] = []
        for tree in ctx.trees:
            for f in tree.files:
                if not is_config(f.rel):
                    continue
                for cid, sev, msg in load_config(ctx, f).problems:
                    out.append(finding(cid, sev, msg, f.rel).with_role(tree.role))
        return CheckOutcome.of(out)
