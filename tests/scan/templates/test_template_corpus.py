"""The real chat-template corpus passes with zero findings; every gadget class blocks.

The allow-lists in ``template_policy`` are derived from ``tests/scan/templates/`` (real templates,
sources in its SOURCES.md): every entry must be used by at least one of them, so the lists never
grow past what real templates need.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from jinja2 import nodes

from specbundle.scan import scan_tree
from specbundle.scan.templates import policy
from specbundle.scan.templates.check import analyse_template
from specbundle.scan.templates.render import TrialEnvironment
from tests.scan.conftest import FAST, ids

CORPUS = Path(__file__).parent  # the real templates live beside these tests
TEMPLATES = sorted(CORPUS.glob("*.jinja"))


@cache
def _asts() -> dict[str, nodes.Template]:
    env = TrialEnvironment()
    return {p.name: env.parse(p.read_text(encoding="utf-8")) for p in TEMPLATES}


def test_corpus_is_large_and_sourced() -> None:
    sources = (CORPUS / "SOURCES.md").read_text(encoding="utf-8")
    assert len(TEMPLATES) >= 60
    for family in ("Llama-3", "Qwen2.5", "Qwen3", "Mistral", "gemma", "DeepSeek", "Phi-3",
                   "tool_use"):
        assert any(family.lower() in p.name.lower() for p in TEMPLATES), family
    assert all(f"`{p.name}`" in sources for p in TEMPLATES)


@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_real_template_has_zero_findings(path: Path) -> None:
    assert analyse_template(path.read_text(encoding="utf-8")) == []


def test_allow_lists_are_exactly_what_the_corpus_uses() -> None:
    used: dict[str, set[str]] = {"nodes": {"Template"}, "filters": set(), "tests": set(),
                                 "methods": set(), "globals": set()}
    for ast in _asts().values():
        for n in ast.find_all(nodes.Node):
            used["nodes"].add(type(n).__name__)
            if isinstance(n, nodes.Filter):
                used["filters"].add(n.name)
                used["tests"].update(a.value for a in n.args[:2] if isinstance(a, nodes.Const)
                                     and n.name in ("selectattr", "rejectattr", "reject")
                                     and a.value in policy.ALLOWED_TESTS)
            elif isinstance(n, nodes.Test):
                used["tests"].add(n.name)
            elif isinstance(n, nodes.Call) and isinstance(n.node, nodes.Getattr):
                used["methods"].add(n.node.attr)
            elif isinstance(n, nodes.Call) and isinstance(n.node, nodes.Name):
                used["globals"].add(n.node.name)
    assert used["nodes"] == policy.ALLOWED_NODES
    assert used["filters"] == policy.ALLOWED_FILTERS
    assert used["tests"] == policy.ALLOWED_TESTS
    assert used["methods"] == policy.ALLOWED_METHODS
    assert used["globals"] >= policy.ALLOWED_GLOBALS


def test_corpus_templates_in_a_tree_scan_clean(tmp_path: Path) -> None:
    picks = [p for p in TEMPLATES if any(k in p.name for k in ("Llama-3.1", "Qwen3-0.6B",
                                                               "gemma-2", "Phi-3.5"))]
    (tmp_path / "chat_template.jinja").write_text(picks[0].read_text(encoding="utf-8"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [
        {"name": p.stem, "template": p.read_text(encoding="utf-8")} for p in picks[1:]]}))
    rep = scan_tree(tmp_path, options=FAST)
    assert ids(rep) == set() and len(rep.templates) == len(picks)


GADGETS = [
    # the gadgets
    '{{ x["__in" ~ "it__"] }}',
    "{{ dict(__init__=1)|first }}",
    '{{ "%c%cinit%c%c"|format(95, 95, 95, 95) }}',
    '{{ messages|map(attribute="__class__")|list }}',
    '{{ messages|map("attr", "__class__")|list }}',
    # their classes: built keys, keyword keys, formatting, filter/attribute indirection
    '{% set k = "__in" ~ "it__" %}{{ messages[k] }}',
    '{{ messages[["__cla", "ss__"]|join] }}',
    '{% set ns = namespace(k="__cla" ~ "ss__") %}{{ messages[ns.k] }}',
    '{% for k in ["_" ~ "_class__"] %}{{ messages[k] }}{% endfor %}',
    '{{ messages[0]["role"|replace("role", "__class__")] }}',
    '{{ messages["%sclass%s" % ("__", "__")] }}',
    '{{ ("%c%cclass%c%c" % (95, 95, 95, 95)) }}',
    '{{ "{0.__class__}".format(messages) }}',
    '{{ "{}".format_map(messages) }}',
    "{{ namespace(__init__=1) }}",
    '{{ messages|map(attribute="role.__class__")|list }}',
    '{{ messages|map(attribute=name)|list }}',
    '{{ messages|selectattr("__class__")|list }}',
    '{{ messages|select("attr", "x")|list }}',
    '{{ messages|attr("__class__") }}',
    "{{ messages.__class__ }}",
    "{{ messages.pop.__self__ }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ lipsum }}", "{{ joiner() }}", "{{ self }}",
    "{{ messages.mro }}",
    "{{ (messages|first).keys.__func__ }}",
    "{{ messages[0].items()[0] }}{{ loop.cycle('a') }}",
    '{% import "x" as y %}', '{% include "x" %}', '{% extends "x" %}',
    '{{ x|xmlattr }}',
    # a key that also holds data on another path: any binding counts, so it is static now
    '{% set k = messages[0].role %}{% set k = "__cla" ~ "ss__" %}{{ messages[k] }}',
    # only the trial render can see this one: '%' on a string that is data, not a literal
    "{{ messages[0].content % messages }}",
]


@pytest.mark.parametrize("tpl", GADGETS)
def test_every_gadget_class_blocks(tpl: str) -> None:
    problems = analyse_template(tpl)
    assert problems and any(sev.rank >= 3 for _c, sev, _m in problems), problems


def test_runtime_only_gadget_is_caught_by_the_trial_render() -> None:
    [(check_id, _sev, msg)] = analyse_template(GADGETS[-1])
    assert check_id == "template.sandbox" and "'%'" in msg


@pytest.mark.parametrize("tpl", [
    "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}",
    "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
    '{{ "x" * 100000000 }}',
    "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
])
def test_trial_render_budget(tpl: str) -> None:
    problems = analyse_template(tpl)
    assert any(c == "template.resource" for c, _s, _m in problems), problems


@pytest.mark.parametrize("tpl", [
    '{% set ns = namespace(x="ab") %}{% for i in range(60) %}{% set ns.x = ns.x ~ ns.x %}'
    "{% endfor %}",
    '{% set ns = namespace(x="ab") %}{% for i in range(60) %}{% set ns.x = ns.x + ns.x %}'
    "{% endfor %}",
    '{% set ns = namespace(x="ab") %}{% for i in range(40) %}'
    '{% set ns.x = ns.x|replace("", "zz") %}{% endfor %}',
    '{% set ns = namespace(x="ab") %}{% for i in range(40) %}'
    '{% set ns.x = ns.x.replace("a", "aaaa") %}{% endfor %}',
    '{{ "a\\nb"|indent(1000000000) }}',
    '{% macro f(s, n) %}{% if n %}{{ f(s ~ s, n - 1) }}{% endif %}{% endmacro %}{{ f("ab", 60) }}',
])
def test_trial_render_memory_budget(tpl: str) -> None:
    """Values that double in a loop or a recursion are stopped before they exhaust memory."""
    problems = analyse_template(tpl)
    assert any(c == "template.resource" for c, _s, _m in problems), problems
