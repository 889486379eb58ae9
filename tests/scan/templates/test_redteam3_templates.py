"""Chat-template bypasses, round 3 (issue 11, class 2): each passed the scanner before its fix.

Two kinds. Static bypasses (a key built from a Python object's text, a function called under
another name) must block as written and hidden behind a condition no sample meets, padded past
the every-branch render's size gate (only the static check stands there). Engine
differentials render one prompt in Jinja (transformers, vLLM, SGLang) and another in
llama.cpp's own engine (a hidden instruction only one engine shows); each must block, and its
benign twin, rendering the same in both, must pass. The ``engine`` tests confirm each
differential on the real llama-server (skipped without the binary).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specbundle.scan.findings import Severity
from specbundle.scan.templates.check import analyse_template
from tests.scan.templates.test_template_engines import MESSAGES, _llama_render, jinja_render
from tests.scan.templates.test_template_engines import tiny_gguf as tiny_gguf

HIDE = "{%% if messages|length > 99 %%}%s{%% endif %%}"
PAD = "{# " + "x" * 70_000 + " #}"
# "<generator object select_or_reject at 0x...>": the characters of "__class__"
_GEN = "|".join(f"s[{'<generator object select_or_reject at 0x'.index(c)}]" for c in "__class__")

STATIC = {
    # a key spelled from the text of a Python object the template made (data to the old
    # provenance analysis: no literal was changed)
    "generator-text-key": "{% set s = messages|selectattr('role')|string %}"
                          f"{{{{ messages[0][{_GEN.replace('|', ' ~ ')}] }}}}",
    "items-view-text-key": "{% set s = messages[0].items()|string %}{{ messages[0][s[4]] }}",
    "bound-method-text-key": "{{ messages[0][(messages[0].get|string)[1:4]] }}",
    # a function called under a name the call checks trust: a macro's, a method's
    "macro-name-set-to-range": "{% macro r() %}{% endmacro %}{% set r = range %}"
                               "{% for i in r(messages|length * 99999) %}x{% endfor %}",
    "macro-name-as-parameter": "{% macro r() %}{% endmacro %}{% macro b(r) %}"
                               "{% for i in r(999999999) %}x{% endfor %}{% endmacro %}"
                               "{{ b(range) }}",
    "macro-name-as-loop-variable": "{% macro r() %}{% endmacro %}{% for r in [range] %}"
                                   "{% for i in r(999999999) %}x{% endfor %}{% endfor %}",
    "range-in-namespace-as-get": "{% set ns = namespace(get=range) %}"
                                 "{% for i in ns.get(999999999) %}{% endfor %}",
    "macro-in-namespace-recursion": "{% macro f(n) %}{{ ns.get(n) }}{% endmacro %}"
                                    "{% set ns = namespace(get=f) %}{{ f(1) }}",
    "macro-set-into-namespace": "{% set ns = namespace() %}{% macro f(n) %}{{ ns.split(n) }}"
                                "{% endmacro %}{% set ns.split = f %}{{ f(1) }}",
    "strftime-as-strip": "{% set ns = namespace() %}{% set ns.strip = strftime_now %}"
                         "{{ ns.strip('%Y' * 9999) }}",
    # a loop variable's scope ends with its loop: after it, the name is the global again
    "global-after-loop-variable": "{% for range in [1] %}{% endfor %}"
                                  "{% set ns = namespace(get=range) %}"
                                  "{% for i in ns.get(999999999) %}{% endfor %}",
    "gadget-after-loop-variable": "{% for cycler in [1] %}{% endfor %}{{ cycler }}",
    # each character or line of a message made thousands: a 1 MB message becomes gigabytes
    # (the sample conversations are too short for the output budget to see it)
    "indent-amplifies": "{% for m in messages %}{{ m.content|indent(9999) }}{% endfor %}",
    "indent-by-string-amplifies": "{% for m in messages %}{{ m.content|indent('" + "y" * 9000
                                  + "') }}{% endfor %}",
    "replace-amplifies": "{% for m in messages %}{{ m.content|replace('', '" + "y" * 9000
                         + "') }}{% endfor %}",
    "replace-method-amplifies": "{% for m in messages %}{{ m.content.replace(' ', '"
                                + "y" * 9000 + "') }}{% endfor %}",
    "join-amplifies": "{% for m in messages %}{{ m.content|list|join(d='" + "y" * 9000
                      + "') }}{% endfor %}",
    "repeat-amplifies": "{% for m in messages %}{{ m.content * 9999 }}{% endfor %}",
    "repeat-by-namespace-number": "{% set ns = namespace(k=1) %}{% set ns.k = 9999 %}"
                                  "{% for m in messages %}{{ m.content * ns.k }}{% endfor %}",
    "repeat-by-parsed-number": "{% for m in messages %}{{ m.content * ('9999'|int) }}"
                               "{% endfor %}",
    "replace-by-namespace-string": "{% set ns = namespace(s='y' * 250 ~ 'y' * 250) %}"
                                   "{% for m in messages %}{{ m.content|replace(' ', ns.s) }}"
                                   "{% endfor %}",
}

# hostile (renders differently in llama.cpp's engine: checked by the engine tests), twin
DIFFERENTIALS = {
    "non-ascii-length": ("{% if 'é'|length == 2 %}only llama.cpp{% endif %}ok",
                         "{% if 'e'|length == 1 %}same{% endif %}ok"),
    "non-ascii-upper": ("{% if 'é'|upper == 'é' %}only llama.cpp{% endif %}ok",
                        "{% if 'e'|upper == 'E' %}same{% endif %}ok"),
    "non-ascii-index": ("{% if 'éa'[1] == 'a' %}only jinja{% endif %}ok",
                        "{% if 'ea'[1] == 'a' %}same{% endif %}ok"),
    "non-ascii-slice": ("{% if 'éa'[1:] == 'a' %}only jinja{% endif %}ok",
                        "{% if 'ea'[1:] == 'a' %}same{% endif %}ok"),
    "unicode-blank-trim": ("{% if '\u00a0'|trim == '' %}only jinja{% endif %}ok",
                           "{% if ' x '|trim == 'x' %}same{% endif %}ok"),
    "split-on-runs-of-blanks": ("{% if ' a  b '.split()|length == 5 %}only llama.cpp{% endif %}ok",
                                "{% if 'a b'.split()|length == 2 %}same{% endif %}ok"),
    "float-text": ("{% set x %}{{ 0.1 + 0.2 }}{% endset %}"
                   "{% if x|length == 3 %}only llama.cpp{% endif %}ok",
                   "{% set x %}{{ 0.5 + 0.25 }}{% endset %}{% if x == '0.75' %}same{% endif %}ok"),
    "tojson-integral-float": ("{% if (1.0|tojson) == '1' %}only llama.cpp{% endif %}ok",
                              "{% if (1.5|tojson) == '1.5' %}same{% endif %}ok"),
    "none-concatenated": ("{% if (none ~ '') == 'None' %}only jinja{% endif %}ok",
                          "{% if ('' ~ '') == '' %}same{% endif %}ok"),
    "int-of-text": ("{% if '12abc'|int == 12 %}only llama.cpp{% endif %}ok",
                    "{% if '12'|int == 12 %}same{% endif %}ok"),
    "int-past-2-53": ("{% if 9007199254740992 + 1 == 9007199254740992 %}only llama.cpp"
                      "{% endif %}ok",
                      "{% if 9007199254740 + 1 == 9007199254741 %}same{% endif %}ok"),
    "namespace-is-mapping": ("{% set ns = namespace() %}{% if ns is mapping %}only llama.cpp"
                             "{% endif %}ok",
                             "{% set ns = namespace(a=1) %}{% if ns.a is number %}same"
                             "{% endif %}ok"),
    "namespace-truth": ("{% set ns = namespace() %}{% if not ns %}only llama.cpp{% endif %}ok",
                        "{% set ns = namespace(found=false) %}{% if not ns.found %}same"
                        "{% endif %}ok"),
    "generator-truth": ("{% if messages|selectattr('role', 'equalto', 'zz') %}only jinja"
                        "{% endif %}ok",
                        "{% if messages|selectattr('role', 'equalto', 'zz')|list %}x"
                        "{% endif %}ok"),
    "generator-is-sequence": ("{% if messages|map(attribute='role') is sequence %}"
                              "only llama.cpp{% endif %}ok",
                              "{% if messages|map(attribute='role')|list is sequence %}same"
                              "{% endif %}ok"),
    "range-text": ("{% if (range(2)|string)[0] == '[' %}only llama.cpp{% endif %}ok",
                   "{% if (range(2)|list|length) == 2 %}same{% endif %}ok"),
    "none-printed": ("{% set x %}{{ none }}{% endset %}{% if x == '' %}only llama.cpp"
                     "{% endif %}ok",
                     "{% set x %}{{ '' }}{% endset %}{% if x == '' %}same{% endif %}ok"),
    "list-printed": ("{% set x %}{{ ['a'] }}{% endset %}{% if x == 'a' %}only llama.cpp"
                     "{% endif %}ok",
                     "{% set x %}{{ ['a']|join }}{% endset %}{% if x == 'a' %}same{% endif %}ok"),
    # llama.cpp's |reject and |select run no test but equalto the same (this one keeps both)
    "reject-by-unary-test": ("{% if ([none, 1]|reject('none')|list|length) == 2 %}"
                             "only llama.cpp{% endif %}ok",
                             "{% if ([1, 2]|reject('equalto', 1)|list|length) == 1 %}same"
                             "{% endif %}ok"),
    "mutating-method-defined": ("{% if messages.append is defined %}only llama.cpp"
                                "{% endif %}ok",
                                "{% if messages[0].get is defined %}same{% endif %}ok"),
}
# the differentials the static check refuses on its own (the rest: the trial render)
STATIC_DIFFERENTIALS = ("namespace-truth", "generator-truth", "none-printed", "list-printed",
                        "reject-by-unary-test", "mutating-method-defined")

BENIGN = {
    "generator-elements-as-keys": "{% for m in messages|selectattr('role') %}"
                                  "{{ messages[0][m.role] }}{% endfor %}",
    "items-of-data": "{% for k, v in messages[0].items() %}{{ k }}={{ v }}{% endfor %}",
    "macro-called": "{% macro r(x) %}{{ x }}{% endmacro %}{{ r(messages|length) }}",
    "macro-parameter-named-like-a-global": "{% macro f(namespace='x') %}{{ namespace }}"
                                           "{% endmacro %}{{ f() }}",
    "strftime-tested-then-called": "{% if strftime_now is defined %}"
                                   "{{ strftime_now('%d %B %Y') }}{% endif %}",
    "namespace-flag": "{% set ns = namespace(found=false) %}{% for m in messages %}"
                      "{% if m.role == 'system' %}{% set ns.found = true %}{% endif %}"
                      "{% endfor %}{% if ns.found %}x{% endif %}",
    "image-tokens-and-indents": "{% for m in messages %}{{ '<image>' * 576 }}"
                                "{{ '  ' * (m.content|length) }}{{ m.content|indent(4) }}"
                                "{{ m.content|replace('\\n', '\\\\n') }}{% endfor %}",
    "tool-definitions-inserted": "{% set defs %}{{ tools|tojson }}{% endset %}"
                                 "{{ messages[0].content.replace('<sep>', defs) }}",
    "selected-list-truth": "{% set sys = messages|selectattr('role', 'equalto', 'system')|list %}"
                           "{% if sys %}{{ sys[0].content }}{% endif %}",
}


def _blocks(problems: list[tuple[str, Severity, str]]) -> bool:
    return any(sev.rank >= Severity.HIGH.rank for _c, sev, _m in problems)


@pytest.mark.parametrize("tpl", STATIC.values(), ids=STATIC.keys())
def test_static_bypass_blocks(tpl: str) -> None:
    assert _blocks(analyse_template(tpl))


@pytest.mark.parametrize("tpl", [*STATIC.values(), *(DIFFERENTIALS[k][0]
                                                     for k in STATIC_DIFFERENTIALS)],
                         ids=[*STATIC, *STATIC_DIFFERENTIALS])
def test_static_bypass_blocks_hidden_and_padded(tpl: str) -> None:
    problems = analyse_template(HIDE % tpl + PAD)
    assert _blocks(problems), problems


@pytest.mark.parametrize("case", DIFFERENTIALS, ids=list(DIFFERENTIALS))
def test_engine_differential_blocks_and_twin_passes(case: str) -> None:
    hostile, twin = DIFFERENTIALS[case]
    problems = analyse_template(hostile)
    expected = "template.filter-arg" if case == "reject-by-unary-test" else (
        "template.engine-differs")
    assert [c for c, s, _m in problems if s.rank >= Severity.HIGH.rank] == [expected], problems
    assert analyse_template(twin) == []


@pytest.mark.parametrize("tpl", BENIGN.values(), ids=BENIGN.keys())
def test_benign_twin_passes(tpl: str) -> None:
    assert analyse_template(tpl) == []


@pytest.mark.engine
@pytest.mark.parametrize("case", DIFFERENTIALS, ids=list(DIFFERENTIALS))
def test_llama_server_renders_the_differential(case: str, llama_server_bin: Path,
                                               tiny_gguf: Path, tmp_path: Path) -> None:
    hostile, twin = DIFFERENTIALS[case]
    jinja = jinja_render(hostile, MESSAGES)
    llama = _llama_render(llama_server_bin, tiny_gguf, hostile, tmp_path, MESSAGES)
    assert jinja != llama, (jinja, llama)
    assert jinja_render(twin, MESSAGES) == _llama_render(
        llama_server_bin, tiny_gguf, twin, tmp_path, MESSAGES)
