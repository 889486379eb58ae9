"""GGUF header validation and chat-template analysis (GGUF and tokenizer configs)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from specbundle.scan import ScanReport, scan_tree
from specbundle.scan.templates.check import analyse_template
from tests.lib import corpus
from tests.scan.conftest import FAST, ids

Scan = Callable[..., ScanReport]

SSTI = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"
_STR, _U32 = 8, 4


def _arch() -> tuple[str, int, bytes]:
    return ("general.architecture", _STR, struct.pack("<Q", 5) + b"llama")


def test_valid_gguf_is_clean(tmp_path: Path) -> None:
    corpus.gguf_model(tmp_path / "model.gguf", template="{{ messages[0]['content'] }}")
    rep = scan_tree(tmp_path, options=FAST)
    assert ids(rep) == set()
    [t] = rep.templates
    assert t.file == "model.gguf#tokenizer.chat_template" and len(t.sha256) == 64


def test_gguf_with_ssti_chat_template(tmp_path: Path) -> None:
    corpus.gguf_model(tmp_path / "model.gguf", template=SSTI)
    rep = scan_tree(tmp_path, options=FAST)
    assert {"template.gadget", "template.dunder-access"} <= ids(rep)
    assert rep.blocked
    assert all(f.file == "model.gguf#tokenizer.chat_template" for f in rep.findings)


def test_named_gguf_templates_are_recorded(tmp_path: Path) -> None:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    w.add_chat_template([{"name": "default", "template": "{{ 1 }}"},
                         {"name": "tool_use", "template": "{{ ''.__class__ }}"}])
    w.add_tensor("x", np.zeros(32, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    rep = scan_tree(tmp_path, options=FAST)
    assert {t.name for t in rep.templates} == {"default", "tool_use"}
    bad = [f for f in rep.findings if f.check_id == "template.dunder-access"]
    assert bad and all("tool_use" in f.file for f in bad)  # type: ignore[operator]


@pytest.mark.parametrize(("data", "check_id"), [
    (corpus.gguf_raw([_arch()], [], b"", magic=b"GGUX"), "gguf.magic"),
    (corpus.gguf_raw([_arch()], [], b"", version=1), "gguf.version"),
    (corpus.gguf_raw([_arch()], [], b"", n_kv=1 << 40), "gguf.bounds"),
    (corpus.gguf_raw([("general.architecture", _STR, struct.pack("<Q", 1 << 40) + b"x")], [],
                     b""), "gguf.bounds"),
    (corpus.gguf_raw([("k", 99, b"\x00" * 8)], [], b""), "gguf.unknown-type"),
    (corpus.gguf_raw([_arch(), _arch()], [], b""), "gguf.duplicate"),
    (corpus.gguf_raw([_arch()], [("t", (32,), 777, 0)], b"\x00" * 64), "gguf.unknown-type"),
    (corpus.gguf_raw([_arch()], [("t", (0,), 1, 0)], b"\x00" * 64), "gguf.tensor-shape"),
    (corpus.gguf_raw([_arch()], [("t", (16,), 1, 8)], b"\x00" * 64), "gguf.alignment"),
    (corpus.gguf_raw([_arch()], [("t", (16,), 1, 0)], b"\x00" * 8), "gguf.bounds"),
    (corpus.gguf_raw([_arch()], [("t", (16,), 1, 0), ("u", (16,), 1, 0)], b"\x00" * 64),
     "gguf.overlap"),
    (corpus.gguf_raw([_arch()], [("t", (16,), 1, 0)], b"\x00" * 32 + b"\x01" * 64),
     "gguf.trailing-bytes"),
    (corpus.gguf_raw([_arch(), ("general.alignment", _U32, struct.pack("<I", 12))], [], b""),
     "gguf.alignment"),
    (corpus.gguf_raw([], [("t", (16,), 1, 0)], b"\x00" * 32), "gguf.metadata"),
])
def test_malformed_gguf(scan_one: Scan, data: bytes, check_id: str) -> None:
    rep = scan_one("model.gguf", data)
    assert check_id in ids(rep), [f.to_json() for f in rep.findings]


def test_gguf_template_differs_from_repository_template(tmp_path: Path) -> None:
    corpus.gguf_model(tmp_path / "model.gguf", template="{{ 'hidden instruction' }}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ 1 }}"}))
    rep = scan_tree(tmp_path, options=FAST)
    [f] = [f for f in rep.findings if f.check_id == "template.differs"]
    assert f.file == "model.gguf#tokenizer.chat_template" and not rep.blocked


def test_oversized_template_is_recorded_not_analysed(tmp_path: Path) -> None:
    from specbundle.scan import ScanOptions

    (tmp_path / "chat_template.jinja").write_text("{{ x }}" * 100)
    rep = scan_tree(tmp_path, options=ScanOptions(second_opinions=False, max_template_bytes=64))
    assert [f.check_id for f in rep.findings] == ["template.size"] and rep.blocked
    assert len(rep.templates) == 1


def test_templates_past_the_scan_budget_are_blocked_not_analysed(tmp_path: Path) -> None:
    """Analysis costs seconds per MB: many distinct large templates hit the scan's budget."""
    from specbundle.scan import ScanOptions

    (tmp_path / "additional_chat_templates").mkdir()
    for i in range(4):
        (tmp_path / "additional_chat_templates" / f"t{i}.jinja").write_text(
            f"{{{{ messages[{i}] }}}}" + " " * 90)
    opts = ScanOptions(second_opinions=False, max_template_total_bytes=250)
    rep = scan_tree(tmp_path, options=opts)
    over = [f for f in rep.findings if f.check_id == "template.size"]
    assert [f.file for f in over] == ["additional_chat_templates/t2.jinja",
                                      "additional_chat_templates/t3.jinja"], over
    assert "not analysed" in over[0].message and rep.blocked
    assert len(rep.templates) == 4  # every template still recorded by digest
    assert not scan_tree(tmp_path, options=FAST).blocked  # within the default budget


def test_one_template_in_many_places_is_analysed_once(tmp_path: Path) -> None:
    from specbundle.scan import ScanOptions

    tpl = "{% for m in messages %}{{ m.content }}{% endfor %}"
    corpus.gguf_model(tmp_path / "model.gguf", template=tpl)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": tpl}))
    (tmp_path / "chat_template.jinja").write_text(tpl)
    # every analysis spends its bytes of the scan's template budget: a budget of one copy
    # holds all three places only if the text is analysed once
    once = ScanOptions(second_opinions=False, max_template_total_bytes=len(tpl.encode()))
    rep = scan_tree(tmp_path, options=once)
    assert len(rep.templates) == 3 and ids(rep) == set() and not rep.blocked


def test_tokenizer_config_templates(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [
        {"name": "default", "template": "{% for m in messages %}{{ m.content }}{% endfor %}"},
        {"name": "rag", "template": "{{ self._TemplateReference__context }}"},
    ]}))
    (tmp_path / "chat_template.jinja").write_text("{% import 'os' as os %}")
    (tmp_path / "additional_chat_templates").mkdir()
    (tmp_path / "additional_chat_templates" / "tools.jinja").write_text("{{ x|attr('y') }}")
    rep = scan_tree(tmp_path, options=FAST)
    assert {t.name for t in rep.templates} == {"default", "rag", "tools"}
    got = {(f.file, f.check_id) for f in rep.findings}
    assert ("tokenizer_config.json", "template.gadget") in got
    assert ("tokenizer_config.json", "template.dunder-access") in got
    assert ("chat_template.jinja", "template.import") in got
    assert ("additional_chat_templates/tools.jinja", "template.attr-filter") in got


@pytest.mark.parametrize("tpl", [
    "{{ joiner.__init__.__globals__ }}",
    "{{ lipsum.__globals__['os'].popen('x') }}",
    "{{ ''['__class__'] }}",
    "{{ x.__globals__ }}",
    "{{ '{0.__class__}'.format(x) }}",
    "{{ fmt.format(x) }}",
    "{{ '[{}]'.format(m) }}",  # string formatting is denied outright, literal or not
    "{{ '%s'|format(x) }}",
    "{{ x|attr('__class__') }}",
    "{% include 'evil' %}",
    "{{ range(10000000)|list }}",
    "{% for %}",
])
def test_template_escape_shapes_are_flagged(tpl: str) -> None:
    assert analyse_template(tpl)


@pytest.mark.parametrize("tpl", [
    # Shapes of real templates (Llama 3, Qwen, transformers' generation tag) must stay clean.
    "{{- bos_token }}{%- set ns = namespace(system='') %}{%- for m in messages %}"
    "{%- if m['role'] == 'system' %}{%- set ns.system = m['content'] | trim %}{%- endif %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|assistant|>' }}{%- endif %}",
    "{% for m in messages %}{% generation %}{{ m.content | tojson }}{% endgeneration %}"
    "{% if loop.last %}{% break %}{% endif %}{% endfor %}{{ raise_exception('no') if false }}",
])
def test_benign_templates(tpl: str) -> None:
    assert analyse_template(tpl) == []


# Constructs of published templates (DeepSeek-R1 distill, Llama 3.1, Qwen3) that must not trip.
_DEEPSEEK_R1 = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
    "{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, "
    "system_prompt='') %}{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}{{bos_token}}"
    "{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'assistant' "
    "and message['content'] is none %}{%- for tool in message['tool_calls']%}"
    "{{'<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] "
    "+ '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```'}}"
    "{%- endfor %}{%- endif %}{% set content = message['content'] %}{% if '</think>' in "
    "content %}{% set content = content.split('</think>')[-1] %}{% endif %}{%- endfor -%}"
)
_LLAMA31 = (
    "{{- bos_token }}{%- if custom_tools is defined %}{%- set tools = custom_tools %}"
    "{%- endif %}{%- if not date_string is defined %}{%- set date_string = '26 Jul 2024' %}"
    "{%- endif %}{%- if messages[0]['role'] == 'system' %}{%- set system_message = "
    "messages[0]['content']|trim %}{%- set messages = messages[1:] %}{%- endif %}"
    "{%- if builtin_tools is defined %}{{- 'Tools: ' + builtin_tools | reject('equalto', "
    "'code_interpreter') | join(', ') }}{%- endif %}{%- for t in tools %}"
    "{{- t | tojson(indent=4) }}{%- endfor %}{%- for message in messages %}"
    "{%- if 'tool_calls' in message %}{%- set tool_call = message.tool_calls[0].function %}"
    "{{- '\"parameters\": ' }}{{- tool_call.arguments | tojson }}{%- for arg_name, arg_val "
    "in tool_call.arguments | items %}{{- arg_name + '=\"' + arg_val + '\"' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}{%- endif %}{%- endfor %}"
)
_QWEN3 = (
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step_tool and message.role == 'user' and not(message.content.startswith("
    "'<tool_response>') and message.content.endswith('</tool_response>')) %}"
    "{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}"
    "{%- endfor %}{%- for message in messages %}{%- if message.reasoning_content is string %}"
    "{%- set reasoning_content = message.reasoning_content %}{%- elif '</think>' in "
    "message.content %}{%- set reasoning_content = message.content.split('</think>')[0]"
    ".rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}{%- endif %}{%- endfor %}"
)


@pytest.mark.parametrize("tpl", [_DEEPSEEK_R1, _LLAMA31, _QWEN3])
def test_published_template_shapes(tpl: str) -> None:
    assert analyse_template(tpl) == []


def test_template_only_the_first_duplicate_reading_sees_is_analysed(tmp_path: Path) -> None:
    """transformers keeps the last duplicate key; a reader that keeps the first must not
    smuggle a template past the analysis (the duplicate alone is HIGH; the gadget CRITICAL)."""
    (tmp_path / "tokenizer_config.json").write_text(
        '{"chat_template": "' + SSTI.replace("'", "\\u0027") + '", '
        '"chat_template": "{{ messages[0][\'content\'] }}"}')
    rep = scan_tree(tmp_path, options=FAST)
    crit = [f for f in rep.findings if f.check_id == "template.dunder-access"]
    assert crit and all("reading 2" in f.message for f in crit)
    assert {t.name for t in rep.templates} == {"default", "default (reading 2)"}


def test_processor_templates_by_name_are_each_analysed(tmp_path: Path) -> None:
    """A processor's ``chat_template`` may map names to templates: each is analysed, and a
    benign mapping is clean (it is not 'not a string')."""
    (tmp_path / "processor_config.json").write_text(json.dumps(
        {"chat_template": {"default": "{{ messages[0]['content'] }}", "tool_use": SSTI}}))
    rep = scan_tree(tmp_path, options=FAST)
    assert {t.name for t in rep.templates} == {"default", "tool_use"}
    assert "template.not-text" not in ids(rep)
    assert all(f.message.startswith("template 'tool_use'")
               for f in rep.findings if f.check_id.startswith("template."))
    assert rep.blocked
    (tmp_path / "processor_config.json").write_text(json.dumps(
        {"chat_template": {"default": "{{ messages[0]['content'] }}"}}))
    assert ids(scan_tree(tmp_path, options=FAST)) == set()
