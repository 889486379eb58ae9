"""Every JSON/YAML file in an artifact, parsed once, strictly, and searched at any depth.

transformers and the engines read configs by many names (``processor_config.json``,
``video_preprocessor_config.json``, sub-configs nested under ``text_config``...), and the list
grows with each release, so a name list is always behind: every ``*.json``/``*.yaml``/``*.yml``
file is a config here, and ``auto_map`` / ``chat_template`` are searched for at any nesting
depth. A config too large to analyse is a HIGH finding, never "absent" (a padded
``tokenizer_config.json`` would otherwise hide its template); duplicate keys are a HIGH finding
(Python's json keeps the last, other readers the first).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from specbundle.scan.findings import CheckOutcome, Finding, Severity, finding
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.inventory import TreeFile
from specbundle.scan.jsonfile import DuplicateKeys, loads_strict
from specbundle.strict import MalformedDocument, loads_yaml, read_bounded

__all__ = ["CONFIG_SUFFIXES", "ConfigCheck", "ConfigDoc", "find_key", "load_config"]

CONFIG_SUFFIXES = (".json", ".yaml", ".yml")
_MAX_DEPTH = 64
_LEAVES = frozenset({str, int, float, bool, type(None)})  # what a JSON/YAML scalar parses to


@dataclass(frozen=True)
class ConfigDoc:
    """A parsed config (``doc``), or why there is none (``problem``: check id, severity, text)."""

    doc: Any = None
    problem: tuple[str, Severity, str] | None = None


def is_config(rel: str) -> bool:
    """Whether a file is a JSON/YAML config (by name; content is checked by the files check)."""
    return rel.lower().endswith(CONFIG_SUFFIXES)


def _parse(f: TreeFile, limit: int) -> ConfigDoc:
    if f.size > limit:
        return ConfigDoc(problem=("config.too-large", Severity.HIGH,
                                  f"{f.size} bytes: too large to analyse (limit {limit})"))
    try:
        data = read_bounded(f.path, max_bytes=limit)
        if f.rel.lower().endswith(".json"):
            # the scanner's own strict JSON (C scanner, duplicate keys refused): strict.loads_json
            # pre-scans nesting in Python, seconds for a 30 MB tokenizer.json
            return ConfigDoc(loads_strict(data))
        return ConfigDoc(loads_yaml(data, max_bytes=limit, max_depth=_MAX_DEPTH, what=f.rel))
    except DuplicateKeys as err:
        return ConfigDoc(problem=("config.duplicate-key", Severity.HIGH,
                                  f"duplicate key {err}"))
    except (MalformedDocument, ValueError) as err:
        dup = "duplicate key" in str(err)
        return ConfigDoc(problem=("config.duplicate-key" if dup else "config.malformed",
                                  Severity.HIGH if dup else Severity.MEDIUM, str(err)[:300]))
    except OSError as err:
        return ConfigDoc(problem=("config.malformed", Severity.MEDIUM, f"unreadable: {err}"))


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
                if isinstance(v, (dict, list)):
                    stack.append(((f"{path}.{k}" if path else str(k)), v))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(node)))
                         if isinstance(v, (dict, list)))


class ConfigCheck(Check):
    """Every JSON/YAML file parses strictly and within the size limit."""

    family = "config"
    rules: ClassVar[dict[str, str]] = {
        "config.too-large": "A JSON/YAML config too large to analyse (never treated as absent)",
        "config.duplicate-key": "A config with a duplicate key (readers disagree on the value)",
        "config.malformed": "A JSON/YAML file that does not parse strictly",
    }

    def run(self, ctx: CheckContext) -> CheckOutcome:
        """Parse every config once (cached for the remote-code and template checks)."""
        out: list[Finding] = []
        for tree in ctx.trees:
            for f in tree.files:
                if not is_config(f.rel):
                    continue
                problem = load_config(ctx, f).problem
                if problem:
                    cid, sev, msg = problem
                    out.append(finding(cid, sev, msg, f.rel).with_role(tree.role))
        return CheckOutcome.of(out)
