"""Engine differentials: templates Jinja (transformers, the scanner) and llama.cpp read differently.

A template the scanner accepts must mean the same in every engine that renders it. Each case
here renders one way in Jinja and another in llama-server's own C++ engine (checked on the
real binary: another branch taken, text dropped, a crash); the scanner must refuse each, and
pass its benign twin, which renders the same in both. The scanner's verdicts need no engine;
the confirmations on llama-server are marked ``engine`` and skip without the binary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specbundle.scan.findings import Severity
from specbundle.scan.templates.check import analyse_template
from tests._engine import EngineStartError, llama_server

# name -> (hostile template, benign twin); the hostile one renders "only llama.cpp" (or
# other text) in llama-server, not in Jinja
DIFFERENTIALS = {
    "chained-comparison": ('{% if "a" == "a" == true %}only llama.cpp{% endif %}ok',
                           '{% if "a" == "a" and true %}same{% endif %}ok'),
    "string-negative-index": ("{% set c %}{{ messages[0].content[-1] }}{% endset %}"
                              '{% if c == "" %}only llama.cpp{% endif %}ok',
                              "{% set c %}{{ messages[0].content[-1:] }}{% endset %}"
                              '{% if c == "" %}x{% endif %}ok'),
    "case-folding-sort": ('{% if (["a", "B"]|sort)[0] == "B" %}only llama.cpp{% endif %}ok',
                          '{% if (["a", "b"]|sort)[0] == "a" %}same{% endif %}ok'),
    "boolean-is-number": ("{% if true is number %}{% else %}only llama.cpp{% endif %}ok",
                          "{% if 1 is number %}same{% endif %}ok"),
    "negative-modulo": ("{% set r = messages|length % -3 %}{% if r > 0 %}only llama.cpp{% endif %}ok",
                        "{% set r = messages|length % 3 %}{% if r > 0 %}same{% endif %}ok"),
    "int64-overflow": ("{% set ns = namespace(x=1) %}{% for i in range(5) %}"
                       "{% set ns.x = ns.x * 9999 %}{% endfor %}"
                       "{% if ns.x < 0 %}only llama.cpp{% endif %}ok",
                       "{% set ns = namespace(x=1) %}{% for i in range(5) %}"
                       "{% set ns.x = ns.x + 9999 %}{% endfor %}{% if ns.x < 0 %}x{% endif %}ok"),
    "first-character-dropped": ("X {% if true %}ok{% endif %}", "X\n{% if true %}ok{% endif %}"),
}
# recursion that never descends into data: a RecursionError in Jinja, SIGSEGV in llama-server
MUTUAL = ("{% macro a(x) %}{{ b(x) }}{% endmacro %}{% macro b(x) %}{{ a(x) }}{% endmacro %}"
          "{% if messages|length > 20 %}{{ a(1) }}{% endif %}ok")
MUTUAL_TWIN = ("{% macro a(x) %}{% for y in x %}{{ b(y) }}{% endfor %}{% endmacro %}"
               "{% macro b(x) %}{% if x is mapping %}{{ a(x|items) }}{% else %}{{ x }}"
               "{% endif %}{% endmacro %}{% if messages|length > 20 %}{{ a(tools or []) }}"
               "{% endif %}ok")
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]


@pytest.mark.parametrize("case", DIFFERENTIALS, ids=list(DIFFERENTIALS))
def test_scanner_refuses_an_engine_differential(case: str) -> None:
    hostile, twin = DIFFERENTIALS[case]
    problems = analyse_template(hostile)
    assert [c for c, s, _m in problems if s.rank >= Severity.HIGH.rank] == [
        "template.engine-differs"], problems
    assert analyse_template(twin) == []


def test_scanner_refuses_recursion_that_never_descends() -> None:
    [(check_id, sev, msg)] = analyse_template(MUTUAL)
    assert (check_id, sev) == ("template.resource", Severity.HIGH) and "each other" in msg
    assert analyse_template(MUTUAL_TWIN) == []


def jinja_render(template: str, messages: list[dict[str, Any]]) -> str:
    """What transformers renders: the immutable sandbox, trim_blocks and lstrip_blocks."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda v, **_k: json.dumps(v, ensure_ascii=False)
    return env.from_string(template).render(messages=messages, add_generation_prompt=True,
                                            bos_token="", eos_token="")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specbundle.synth.pair import make_model

    model = make_model(tmp_path_factory.mktemp("engine") / "m", vocab_size=512, hidden_size=64,
                       num_hidden_layers=1, num_attention_heads=2)
    return model.gguf


def _llama_render(binary: Path, gguf: Path, template: str, tmp: Path,
                  messages: list[dict[str, Any]]) -> str:
    """The prompt llama-server's own engine renders (``--jinja``, ``/apply-template``)."""
    path = tmp / "t.jinja"
    path.write_text(template, encoding="utf-8")
    with llama_server(binary, gguf, ["--jinja", "--chat-template-file", str(path)],
                      log=tmp / "server.log", ctx=512, timeout=60.0) as url:
        r = httpx.post(url + "/apply-template", json={"messages": messages}, timeout=30.0,
                       trust_env=False)
        r.raise_for_status()
        prompt: str = r.json()["prompt"]
        return prompt


@pytest.mark.engine
@pytest.mark.parametrize("case", DIFFERENTIALS, ids=list(DIFFERENTIALS))
def test_llama_server_renders_the_differential(case: str, llama_server_bin: Path,
                                               tiny_gguf: Path, tmp_path: Path) -> None:
    hostile, twin = DIFFERENTIALS[case]
    jinja, llama = (jinja_render(hostile, MESSAGES),
                    _llama_render(llama_server_bin, tiny_gguf, hostile, tmp_path, MESSAGES))
    assert jinja != llama, (jinja, llama)
    assert "only llama.cpp" not in jinja
    assert jinja_render(twin, MESSAGES) == _llama_render(
        llama_server_bin, tiny_gguf, twin, tmp_path, MESSAGES)


@pytest.mark.engine
def test_llama_server_dies_on_recursion_that_never_descends(
        llama_server_bin: Path, tiny_gguf: Path, tmp_path: Path) -> None:
    long = MESSAGES + [{"role": "user", "content": f"m{i}"} for i in range(20)]
    with pytest.raises(RecursionError):
        jinja_render(MUTUAL, long)
    try:
        _llama_render(llama_server_bin, tiny_gguf, MUTUAL, tmp_path, long)
    except (httpx.HTTPError, EngineStartError):
        pass  # the request killed the server (SIGSEGV), or its start-up check did
    else:
        pytest.fail("llama-server rendered an endless recursion")
    assert _llama_render(llama_server_bin, tiny_gguf, MUTUAL_TWIN, tmp_path, long) == (
        jinja_render(MUTUAL_TWIN, long))
