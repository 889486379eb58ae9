"""Chat-template gadgets found by trying the scanner as an attacker would (issue 11, class 2).

Each case is a bypass the scanner passed before its fix. Every one must block as written, and
again hidden behind a condition no sample conversation meets (so the trial render never reaches
it: the static check, or the every-branch render, must). Their benign twins, the constructs real
templates use, must pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbundle.scan import scan_tree
from specbundle.scan.findings import Severity
from specbundle.scan.templates import check as templates
from specbundle.scan.templates.check import analyse_template
from specbundle.scan.templates.render import TrialEnvironment, force_branches, trial_render
from tests.scan.conftest import FAST, ids

HIDE = "{%% if messages|length > 99 %%}%s{%% endif %%}"
S = '"_._.c.l.a.s.s._._"'  # [::2] spells __class__; the literal itself spells no dunder

BYPASSES = {
    # a key built from a literal by an operation the old check did not count as building
    "slice-of-literal": f"{{{{ messages[{S}[::2]] }}}}",
    "slice-via-set": f"{{% set k = {S}[::2] %}}{{{{ messages[k] }}}}",
    "slice-of-loop-literal": f"{{% for k in [{S}] %}}{{{{ messages[k[::2]] }}}}{{% endfor %}}",
    "slice-into-namespace": f'{{% set ns = namespace(k="") %}}{{% set ns.k = {S}[::2] %}}'
                            "{{ messages[ns.k] }}",
    "split-join": f'{{{{ messages[{S}.split(".")|join] }}}}',
    "dict-member-sliced": f'{{% set d = {{"a": {S}}} %}}{{{{ messages[d.a[::2]] }}}}',
    "dict-item-sliced": f'{{{{ messages[{{"a": {S}}}["a"][::2]] }}}}',
    "default-of-built": f"{{{{ messages[messages[0].role|default({S}[::2])] }}}}",
    "get-built-key": f"{{{{ messages[0].get({S}[::2]) }}}}",
    "repr-characters": "{% set s = strftime_now|string %}"  # "<function _compile_...>"
                       "{{ messages[s[10] ~ s[10] ~ s[3]] }}",
    "macro-output-key": "{% macro k() %}_{{ '_' }}class__{% endmacro %}{{ messages[k()] }}",
    "macro-param-key": f"{{% macro m(k) %}}{{{{ messages[k] }}}}{{% endmacro %}}"
                       f"{{{{ m({S}[::2]) }}}}",
    # an attribute named by a positional argument, or by a filter reached through |map
    "sort-positional-attr": f"{{{{ messages|sort(false, false, {S}[::2])|list }}}}",
    "unique-positional-attr": f"{{{{ messages|unique(false, {S}[::2])|list }}}}",
    "min-positional-attr": f"{{{{ messages|min(false, {S}[::2]) }}}}",
    "dictsort-computed": f"{{{{ messages[0]|dictsort(false, {S}[::2])|list }}}}",
    "map-map-attr": '{{ messages|map("map", "attr", "x")|list }}',
    "map-map-format": '{{ messages|map("map", "format", 1)|list }}',
    "map-selectattr-built": f'{{{{ messages|map("selectattr", {S}[::2])|list }}}}',
    "map-sort-built": f'{{{{ messages|map("sort", false, false, {S}[::2])|list }}}}',
    # private names written where only a data key was expected
    "namespace-dunder-set": "{% set ns = namespace() %}{% set ns.__class__ = 1 %}",
    "namespace-private-set": "{% set ns = namespace() %}{% set ns._x = 1 %}",
    # calling a variable: a global under another name, a bound method passed to a macro
    "aliased-range": "{% set r = range %}{{ r(10) }}",
    "macro-calls-param": '{% macro m(f) %}{{ f("x") }}{% endmacro %}'
                         "{{ m(messages[0].get) }}",
    # denial of service: MEDIUM before, so the report was not blocked
    "huge-range": "{% for i in range(1000000000) %}x{% endfor %}",
    "huge-repeat": '{{ "a" * 1000000000 }}',
    "folded-repeat": '{{ "a" * (100000 * 100000) }}',
    "named-repeat": '{% set n = 99999 %}{{ "a" * n * n }}',
    "constant-set-in-loop": '{% for m in messages %}{% set n = 99999 %}{{ "a" * n * n }}'
                            "{% endfor %}",
    "constant-after-data": '{% set n = messages|length %}{% set n = 99999 %}{{ "a" * n * n }}',
    "huge-strftime": '{{ strftime_now("%Y" * 10000000) }}',
    "nested-ranges": "{% for a in range(99999) %}{% for b in range(99999) %}x{% endfor %}"
                     "{% endfor %}",
    "nested-via-macro": "{% macro f() %}{% for b in range(99999) %}x{% endfor %}{% endmacro %}"
                        "{% for a in range(99999) %}{{ f() }}{% endfor %}",
    "range-of-product": "{% set n = messages|length %}{% for i in range(n*n*n*n) %}"
                        "{% endfor %}",
    "indent-width": '{{ "a\\nb"|indent(1000000000) }}',
    "doubling-over-messages": '{% set ns = namespace(x="ab") %}{% for m in messages %}'
                              "{% set ns.x = ns.x ~ ns.x %}{% endfor %}",
    "doubling-via-filter": '{% set ns = namespace(x="ab") %}{% for m in messages %}'
                           "{% set ns.x = ns.x ~ ns.x|upper %}{% endfor %}",
    "doubling-via-copy": '{% set ns = namespace(x="ab", y="") %}{% for i in range(60) %}'
                         "{% set ns.y = ns.x %}{% set ns.x = ns.x ~ ns.y %}{% endfor %}",
    "self-recursion": "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "growing-recursion": "{% macro f(n) %}{% if n > 0 %}{{ f(n + 1) }}{% endif %}{% endmacro %}"
                         "{{ f(1) }}",
    "recursion-via-copy": "{% macro f(n) %}{% set m = n %}{{ f(m) }}{% endmacro %}{{ f(1) }}",
    # a chain of copies longer than the analysis follows is refused, not guessed
    "deep-binding-chain": "{% for m in messages %}"
                          + "".join(f"{{% set a{i} = a{i + 1} %}}" for i in range(60))
                          + f"{{% set a60 = {S}[::2] %}}{{% endfor %}}{{{{ messages[a0] }}}}",
    # parser differential: text to Jinja, maybe code to another engine
    "raw-block": "{% raw %}{{ messages.__class__ }}{% endraw %}",
}
B = f"{S}[::2]"  # a built "__class__"
# round 2: a built string reaching a key through a channel the provenance analysis did not
# follow (each passed the static check; hidden and padded past the every-branch render's size
# gate, the whole scan)
BYPASSES.update({
    "loop-previtem": f"{{% for k in [{B}, 'x'] %}}{{% if not loop.first %}}"
                     "{{ messages[loop.previtem] }}{% endif %}{% endfor %}",
    "loop-nextitem": f"{{% for k in ['x', {B}] %}}{{{{ messages[loop.nextitem] }}}}{{% endfor %}}",
    "loop-previtem-format": "{% for k in ['%s', 'x'] %}{% if not loop.first %}"
                            "{{ loop.previtem % messages }}{% endif %}{% endfor %}",
    "namespace-alias": f"{{% set ns = namespace(k={B}) %}}{{% set n2 = ns %}}"
                       "{{ messages[n2.k] }}",
    "namespace-in-list": f"{{% set ns = namespace(k={B}) %}}{{% for n in [ns] %}}"
                         "{{ messages[n.k] }}{% endfor %}",
    "namespace-indexed": f"{{% set ns = namespace(k={B}) %}}{{{{ messages[[ns][0].k] }}}}",
    "namespace-conditional": f"{{% set ns = namespace(k={B}) %}}"
                             "{{ messages[(ns if true else 1).k] }}",
    "namespace-in-dict": f"{{% set ns = namespace(k={B}) %}}{{{{ messages[{{'n': ns}}.n.k] }}}}",
    "namespace-macro-default": f"{{% set ns = namespace(k={B}) %}}{{% macro m(n=ns) %}}"
                               "{{ messages[n.k] }}{% endmacro %}{{ m() }}",
    "namespace-tuple-unpack": f"{{% set ns = namespace(k={B}) %}}{{% set a, b = ns, 1 %}}"
                              "{{ messages[a.k] }}",
    "namespace-positional-dict": f"{{% set ns = namespace({{'k': {B}}}) %}}"
                                 "{{ messages[ns.k] }}",
    "namespace-repr-sliced": f"{{% set ns = namespace(k={B}) %}}"
                             "{{ messages[(ns|string)[20:29]] }}",
    "namespace-data-key": f"{{% set ns = namespace({{'0': {B}}}) %}}{{{{ messages[ns[0|string]] }}}}",
    "append-through-alias": f"{{% set a = [] %}}{{% set b = a %}}{{% set _ = b.append({B}) %}}"
                            "{{ messages[a[0]] }}",
    "append-to-element": f"{{% set a = [[]] %}}{{% set _ = a[0].append({B}) %}}"
                         "{{ messages[a[0][0]] }}",
    "append-via-loop-variable": f"{{% set a = [[]] %}}{{% for l in a %}}"
                                f"{{% set _ = l.append({B}) %}}{{% endfor %}}"
                                "{{ messages[a[0][0]] }}",
    "append-via-parameter": f"{{% macro m(l) %}}{{% set _ = l.append({B}) %}}{{% endmacro %}}"
                            "{% set a = [] %}{{ m(a) }}{{ messages[a[0]] }}",
    "strftime-key": "{{ messages[strftime_now('_x')] }}",
    "strftime-format-string": "{{ strftime_now('%%s') % messages }}",
    "join-positional-attr": f"{{{{ messages|join('', {B}) }}}}",
    "map-join-positional-attr": f"{{{{ [messages]|map('join', '', {B})|list }}}}",
    "macro-named-namespace": f"{{% macro namespace(k) %}}{{{{ messages[k] }}}}{{% endmacro %}}"
                             f"{{{{ namespace({B}) }}}}",
    "macro-named-range": "{% macro range(a) %}_{{ '_' }}class__{% endmacro %}"
                         "{{ messages[range(1)] }}",
    # llama.cpp only: mutual recursion crashes llama-server (SIGSEGV); a value multiplied
    # into itself wraps past 64 bits there; a chained comparison and the template's first
    # character mean something else there (test_template_engines confirms each)
    "mutual-recursion": "{% macro a(x) %}{{ b(x) }}{% endmacro %}"
                        "{% macro b(x) %}{{ a(x) }}{% endmacro %}{{ a(1) }}",
    "mutual-recursion-3": "{% macro a(x) %}{{ b(x) }}{% endmacro %}{% macro b(x) %}{{ c(x) }}"
                          "{% endmacro %}{% macro c(x) %}{{ a(x ~ 'y') }}{% endmacro %}"
                          "{{ a(1) }}",
    "multiplied-into-itself": "{% set ns = namespace(x=1) %}{% for m in messages %}"
                              "{% set ns.x = ns.x * 9999 %}{% endfor %}"
                              "{% if ns.x < 0 %}only llama.cpp{% endif %}",
    "chained-comparison": '{% if "a" == "a" == true %}only llama.cpp{% endif %}',
})
# what costs the analysis (or the compiler) more than linear time is refused, not analysed
TOO_LARGE = {
    "names-times-branches": "".join(f"{{% set a{i} = 1 %}}" for i in range(1001))
                            + "{% if messages %}{% endif %}" * 1000,
    "macros-nested-deep": "".join(f"{{% macro f{i}(x) %}}" for i in range(9))
                          + "{{ x }}" + "{% endmacro %}" * 9,
    "one-name-many-strings": "".join(f'{{% set k = "s{i}" %}}' for i in range(1025))
                             + "{{ messages[k] }}",
}
BYPASSES.update(TOO_LARGE)


# padded past EVERY_BRANCH_MAX_BYTES: only the static check stands between these and a pass
PADDED = ("{# " + "x" * 70_000 + " #}",)
# doubling through a copy is seen by the every-branch render only (statically still open)
_STATIC = [k for k in BYPASSES if k not in TOO_LARGE and k != "doubling-via-copy"]


@pytest.mark.parametrize("tpl", [BYPASSES[k] for k in _STATIC], ids=_STATIC)
def test_bypass_blocks_statically(tpl: str) -> None:
    problems = analyse_template(HIDE % tpl + PADDED[0])
    assert any(sev.rank >= Severity.HIGH.rank for _c, sev, _m in problems), problems


@pytest.mark.parametrize("tpl", BYPASSES.values(), ids=BYPASSES.keys())
def test_bypass_blocks(tpl: str) -> None:
    problems = analyse_template(tpl)
    assert any(sev.rank >= Severity.HIGH.rank for _c, sev, _m in problems), problems


@pytest.mark.parametrize("tpl", BYPASSES.values(), ids=BYPASSES.keys())
def test_bypass_blocks_behind_an_unmet_condition(tpl: str) -> None:
    problems = analyse_template(HIDE % tpl)
    assert any(sev.rank >= Severity.HIGH.rank for _c, sev, _m in problems), problems


BENIGN = {
    "data-key-split": "{% for t in tools %}{% set tns = t.function.name.split('.')[0] %}"
                      "{% set ns = namespace(seen=[]) %}{% set ns.seen = ns.seen + [tns] %}"
                      "{{ ns.seen[0] }}{% endfor %}",
    "loop-over-constant-keys": '{% for k, label in [("maximum", "Max"), ("minimum", "Min")] %}'
                               "{% if tools[0][k] is defined %}{{ label }}{% endif %}"
                               "{% endfor %}",
    "index-arithmetic": "{% for m in messages %}{% if not loop.first %}"
                        "{{ messages[loop.index0 - 1].role }}{% endif %}{% endfor %}",
    "accumulate": '{% set ns = namespace(s="") %}{% for m in messages %}'
                  '{% set ns.s = ns.s ~ m.role ~ ("\\n" if ns.s else "") %}{% endfor %}{{ ns.s }}',
    "defaulted-flag": "{% set enable_thinking = enable_thinking if enable_thinking is defined "
                      "else false %}{{ enable_thinking }}",
    "indent-by-depth": "{% macro r(s, depth) %}{{ '  ' * depth }}{% if s is mapping %}"
                       "{% for k, v in s|items %}{{ r(v, depth + 1) }}{% endfor %}{% endif %}"
                       "{% endmacro %}{{ r(tools[0] if tools else {}, 0) }}",
    "recursion-into-member": "{% macro t(spec) %}{% if spec.items is defined %}"
                             "{{ t(spec['items']) }}{% endif %}{% endmacro %}{{ t({}) }}",
    "range-over-messages": "{% for i in range(messages|length - 1, -1, -1) %}"
                           "{{ messages[i].role }}{% endfor %}",
    # the round-2 bypasses' benign twins
    "loop-previtem-of-data": "{% for m in messages %}{% if not loop.first %}"
                             "{{ loop.previtem.role }}{{ messages[loop.index0].role }}"
                             "{% endif %}{% endfor %}",
    "namespace-to-macro": "{% set ns = namespace(k='role') %}{% macro m(n) %}"
                          "{{ messages[0][n.k] }}{% endmacro %}{{ m(ns) }}",
    "append-data-read-back": "{% set ns = namespace(ids=[]) %}{% for m in messages %}"
                             "{% set _ = ns.ids.append(m.role) %}{% endfor %}"
                             "{% for k in ns.ids %}{{ messages[0].get(k) }}{% endfor %}",
    "strftime-printed": '{{ strftime_now("%d %B %Y") }}',
    "join-separator": "{{ messages|map(attribute='role')|join(', ') }}",
    "mutual-recursion-into-data": "{% macro a(x) %}{% for y in x %}{{ b(y) }}{% endfor %}"
                                  "{% endmacro %}{% macro b(x) %}{% if x is mapping %}"
                                  "{{ a(x|items) }}{% endif %}{% endmacro %}{{ a(tools or []) }}",
    "accumulated-text": '{% set ns = namespace(x="") %}{% for m in messages %}'
                        '{% set ns.x = ns.x ~ ("-" * 3) ~ m.role %}{% endfor %}{{ ns.x }}',
    "counter": "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
               "{% endfor %}{{ ns.n * 2 }}",
    "one-comparison": "{% if messages|length == 1 and 0 < messages|length %}x{% endif %}",
    "first-line-then-block": "X\n{% if true %}y{% endif %}",
}


@pytest.mark.parametrize("tpl", BENIGN.values(), ids=BENIGN.keys())
def test_benign_twin_passes(tpl: str) -> None:
    assert analyse_template(tpl) == []


def test_every_branch_render_reaches_what_no_sample_does() -> None:
    """Doubling through a copy passes the static check; only a render that takes the
    untaken branch sees it."""
    tpl = HIDE % BYPASSES["doubling-via-copy"]
    env = TrialEnvironment()
    assert trial_render(env.parse(tpl), env) == []
    forced = TrialEnvironment(every_branch=True)
    [(check_id, _sev, _msg)] = trial_render(force_branches(forced.parse(tpl)), forced)
    assert check_id == "template.resource"


def test_sandbox_range_limit_is_a_finding() -> None:
    """The sandbox's range cap raises OverflowError; an engine without one (llama.cpp) loops."""
    env = TrialEnvironment()
    ast = env.parse("{% set n = messages|length * 100000 %}{% for i in range(n) %}{% endfor %}")
    assert [c for c, _s, _m in trial_render(ast, env)] == ["template.resource"]


def test_hidden_gadget_in_named_template_variant_blocks(tmp_path: Path) -> None:
    """A gadget in a non-default named template (tokenizer_config list form) blocks the tree."""
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [
        {"name": "default", "template": "{{ messages[0]['content'] }}"},
        {"name": "tool_use", "template": HIDE % BYPASSES["slice-of-literal"]}]}))
    rep = scan_tree(tmp_path, options=FAST)
    assert rep.blocked and "template.computed-key" in ids(rep)


@pytest.mark.parametrize("tpl", TOO_LARGE.values(), ids=TOO_LARGE.keys())
def test_superlinear_analysis_is_refused_as_too_large(tpl: str) -> None:
    [(check_id, sev, msg)] = analyse_template(tpl)
    assert (check_id, sev) == ("template.resource", Severity.HIGH)
    assert "too large to analyse" in msg or "too deep to analyse" in msg


def test_every_branch_render_runs_only_up_to_the_size_gate() -> None:
    """The every-branch render compiles the template a second time: a template past
    EVERY_BRANCH_MAX_BYTES (real ones are at most 18 kB) gets the static check and the sample
    render only. Whether it ran shows in what it alone finds: doubling through a copy behind
    an unmet condition (test_every_branch_render_reaches_what_no_sample_does)."""
    tpl = HIDE % BYPASSES["doubling-via-copy"]
    forced = ["template.resource"]  # the every-branch render's finding, and nothing else
    pad = "{# " + "x" * (templates.EVERY_BRANCH_MAX_BYTES - len(tpl) - 6) + " #}"
    assert len((tpl + pad).encode()) == templates.EVERY_BRANCH_MAX_BYTES
    assert [c for c, _s, _m in analyse_template(tpl + pad)] == forced
    assert analyse_template(tpl + pad + "x") == []
    assert [c for c, _s, _m in analyse_template(tpl)] == forced
