"""A trial render of a chat template in a stricter sandbox, under a time and output budget.

The static allow-list (:mod:`.policy`) decides what may appear; the trial render
checks what actually happens with realistic inputs (conversations, tool calls, tool results,
documents, reasoning), so that a name computed at run time is caught where it is used.
The environment is Jinja's :class:`ImmutableSandboxedEnvironment` (what transformers renders
with) made stricter: every ``_``-prefixed attribute and every string-formatting path
(``str.format``/``format_map``, ``|format``, ``%`` on strings) raises, ``|attr`` raises, and
each attribute access, call and operator counts against a deadline; output is streamed and
capped. Only templates that passed the static check are rendered.

The render also refuses what llama.cpp's own engine computes otherwise (a prompt, or a hidden
instruction, only one engine shows): the rules live in :mod:`.cpp`; ``~`` and slices
are compiled through the environment (:class:`_Codegen`) to be seen at all.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.runtime import ChainableUndefined, Context, Undefined, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment, modifies_known_mutable

from specbundle.scan.findings import Severity
from specbundle.scan.templates.cpp import (
    CASE_FOLDING,
    EXACT,
    INT64,
    Differs,
    is_number,
    plain_test,
    same_in_cpp,
    same_in_cpp_text,
    same_text_op,
    text_differs,
    tojson,
)

__all__ = ["SAMPLES", "TrialEnvironment", "force_branches", "trial_render"]

Problem = tuple[str, Severity, str]
_FORMAT_METHODS = frozenset({"format", "format_map"})


class _Budget(Exception):
    """The render ran past its deadline or output budget."""


class _GenerationTag(Extension):
    """transformers' ``{% generation %}`` block (AssistantTracker), parsed as a plain block."""

    tags: ClassVar[set[str]] = {"generation"}  # type: ignore[misc]

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _denied(what: str) -> Any:
    def deny(*_a: Any, **_k: Any) -> Any:
        raise SecurityError(f"{what} is not allowed in chat templates")
    return deny


def _raise(message: object) -> None:
    raise TemplateError(str(message))


class _Codegen(CodeGenerator):
    """Jinja's code generator, with ``~`` joining through :meth:`TrialEnvironment.text_of`
    (the compiled code calls ``str_join`` directly, past every sandbox hook)."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:  # noqa: N802
        self.write("environment.text_of((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def visit_Getitem(self, node: nodes.Getitem, frame: Frame) -> None:  # noqa: N802
        """A slice as well through :meth:`TrialEnvironment.sliced` (Jinja writes ``x[a:b]``,
        past the sandbox's ``getitem``)."""
        if not isinstance(node.arg, nodes.Slice):
            super().visit_Getitem(node, frame)
            return
        self.write("environment.sliced(")
        self.visit(node.node, frame)
        self.write(", slice(")
        for part in (node.arg.start, node.arg.stop, node.arg.step):
            if part is None:
                self.write("None")
            else:
                self.visit(part, frame)
            self.write(", ")
        self.write("))")


class TrialEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox, minus private attributes and string formatting, with a budget."""

    intercepted_binops = frozenset({"*", "**", "%", "+", "-"})
    code_generator_class = _Codegen

    def __init__(self, *, deadline_s: float = 1.0, max_output: int = 1 << 20,
                 every_branch: bool = False) -> None:
        # every_branch: the render that runs each branch of each ``if`` (see force_branches),
        # where an undefined value chains instead of failing and raise_exception is a no-op.
        # optimized=False: Jinja's constant folder revisits each expression's whole subtree at
        # every level (quadratic in nesting: 35 s per MB of nested calls), and runs filters at
        # compile time, outside the render's deadline; the render's result is the same.
        super().__init__(extensions=["jinja2.ext.loopcontrols", _GenerationTag],
                         undefined=ChainableUndefined if every_branch else Undefined,
                         optimized=False)
        self.every_branch = every_branch
        self.deadline_s, self.max_output = deadline_s, max_output
        self.violation: str | None = None
        self.ends = time.monotonic() + deadline_s
        self.filters["tojson"] = tojson
        self.filters["from_json"] = json.loads
        for name in ("format", "attr", "xmlattr"):
            self.filters[name] = _denied(f"|{name}")
        for name in CASE_FOLDING:
            self.filters[name] = same_in_cpp(self.filters[name], name)
        self.tests["number"] = is_number
        for name in ("mapping", "sequence", "iterable", "string"):
            self.tests[name] = plain_test(self.tests[name], name)
        for name in ("length", "count", "upper", "lower", "trim", "int", "string"):
            if name in self.filters:
                self.filters[name] = same_in_cpp_text(self.filters[name], name)
        self.finalize = self._printed
        for name in ("replace", "indent", "join", "center", "wordwrap", "truncate"):
            if name in self.filters:
                self.filters[name] = self._bounded(self.filters[name], name)
        self.globals["raise_exception"] = (lambda _m: "") if every_branch else _raise
        self.globals["strftime_now"] = lambda fmt: time.strftime(str(fmt), time.gmtime(0))
        for name in ("lipsum", "cycler", "joiner", "dict"):
            self.globals.pop(name, None)

    def _bounded(self, fn: Any, name: str) -> Any:
        """A filter whose output can grow past its input, checked before and after it runs."""
        def run(*args: Any, **kwargs: Any) -> Any:
            self.tick()
            self.precheck(name, args, kwargs)
            out = fn(*args, **kwargs)
            self.size_check(out)
            return out
        for attr in ("jinja_pass_arg",):  # keep @pass_environment/@pass_eval_context markers
            if hasattr(fn, attr):
                setattr(run, attr, getattr(fn, attr))
        return run

    def precheck(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Refuse a call whose result would exceed the output budget, before it is built."""
        vals = [a for a in args if not hasattr(a, "environment")]  # skip eval contexts
        if name == "replace" and len(vals) >= 3 and all(isinstance(v, str) for v in vals[:3]):
            s, old, new = vals[:3]
            same_text_op("replace", s, None, (old,))
            hits = (len(s) + 1) if old == "" else s.count(old)
            if len(s) + hits * max(0, len(new) - len(old)) > self.max_output:
                raise _Budget("replace beyond the output budget")
        width = kwargs.get("width", vals[1] if len(vals) > 1 else 0)
        if name in ("indent", "center", "wordwrap", "truncate") and (
                (isinstance(width, int) and width > 10_000)
                or (isinstance(width, str) and len(width) > 10_000)):
            raise _Budget(f"{name} width beyond the budget")
        if name == "join" and vals:
            seq = vals[0]
            if isinstance(seq, (list, tuple)) and sum(
                    len(x) for x in seq if isinstance(x, str)) > self.max_output:
                raise _Budget("join beyond the output budget")

    def size_check(self, value: Any) -> None:
        """Fail once an intermediate string or list outgrows the output budget."""
        if isinstance(value, (str, list, tuple, dict)) and len(value) > self.max_output:
            raise _Budget("a value grew beyond the output budget")

    def tick(self) -> None:
        """Fail the render once its deadline has passed."""
        if time.monotonic() > self.ends:
            raise _Budget(f"render ran longer than {self.deadline_s} s")

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        self.tick()
        self.size_check(value)  # a namespace attribute doubled in a loop is read back here
        if attr.startswith("_") or attr in _FORMAT_METHODS:
            self.violation = f"access to {attr!r} of a {type(obj).__name__} object"
            return False
        if super().is_safe_attribute(obj, attr, value):
            return True
        if not modifies_known_mutable(obj, attr):  # internals: func_globals, gi_frame, mro...
            self.violation = f"access to internal {attr!r} of a {type(obj).__name__} object"
        return False

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        violation, self.violation = self.violation, None
        if violation:
            raise SecurityError(violation)
        # the immutable sandbox refusing list.append is a template that does not run here
        # (nor in transformers), not an escape
        raise TemplateError(f"{type(obj).__name__}.{attribute} modifies a value")

    def call(__self, __context: Context, __obj: Any, *args: Any,  # noqa: N805
             **kwargs: Any) -> Any:
        __self.tick()
        if getattr(__obj, "__name__", None) in _FORMAT_METHODS and isinstance(
                getattr(__obj, "__self__", None), str):
            raise SecurityError("str.format is not allowed in chat templates")
        if getattr(__obj, "__name__", None) == "replace" and isinstance(
                getattr(__obj, "__self__", None), str):
            __self.precheck("replace", (__obj.__self__, *args), kwargs)
        for a in (*args, *kwargs.values()):  # a macro recursing on a doubled argument
            __self.size_check(a)
        out = super().call(__context, __obj, *args, **kwargs)
        __self.size_check(out)
        name = getattr(__obj, "__name__", None)
        if isinstance(getattr(__obj, "__self__", None), str) and name in (
                "upper", "lower", "strip", "lstrip", "rstrip", "split", "replace"):
            same_text_op(str(name), __obj.__self__, out, args)
        return out

    def _printed(self, value: Any) -> Any:
        # (a float only: real templates print none and dicts of the conversation, which
        # llama.cpp's engine writes otherwise all the same)
        if isinstance(value, float):
            text_differs(value, "printing")
        return value

    def text_of(self, parts: tuple[Any, ...]) -> str:
        """``a ~ b``: each part as text (see :class:`_Codegen`)."""
        for part in parts:
            text_differs(part, "'~' of")
        out = str_join(parts)
        self.size_check(out)
        return out

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        self.tick()
        if operator == "%" and isinstance(left, str):
            raise SecurityError("'%' string formatting is not allowed in chat templates")
        if operator in ("*", "**"):
            for a, b in ((left, right), (right, left)):
                if isinstance(a, (str, list, tuple)) and isinstance(b, int) and \
                        len(a) * b > self.max_output:
                    raise _Budget("repetition beyond the output budget")
            if operator == "**" and isinstance(right, int) and right > 256:
                raise _Budget("exponent beyond the budget")
        if operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(
                right, (str, list, tuple)) and len(left) + len(right) > self.max_output:
            raise _Budget("concatenation beyond the output budget")
        out = super().call_binop(context, operator, left, right)
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool)
                      for v in (left, right))
        if numbers and operator == "%" and out != math.fmod(left, right):
            raise Differs(f"{left} % {right} (the sign follows the divisor in Jinja, the "
                          "dividend in llama.cpp's engine)")
        if numbers and isinstance(out, float):
            text_differs(out, f"'{operator}' giving")
        if numbers and isinstance(out, int) and not -INT64 <= out < INT64:
            raise Differs("an integer past 64 bits (llama.cpp's engine wraps around)")
        if numbers and isinstance(out, int) and not -EXACT <= out <= EXACT:
            raise Differs("an integer past 2**53 (llama.cpp's engine computes it as a "
                          "double, rounded)")
        return out

    def sliced(self, obj: Any, part: slice) -> Any:
        """``obj[a:b:c]`` (see :class:`_Codegen`)."""
        self.tick()
        if isinstance(obj, str):
            same_text_op("getitem", obj, None, ())
        return obj[part]

    def getitem(self, obj: Any, argument: Any) -> Any:
        if isinstance(obj, str) and isinstance(argument, int) and argument < 0:
            raise Differs("a negative index into a string (llama.cpp's engine gives '')")
        if isinstance(obj, str) and isinstance(argument, (int, slice)):
            same_text_op("getitem", obj, None, ())
        return super().getitem(obj, argument)


_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}]
_CALL = {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
_CALL_STR = {"id": "call_2", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}
SAMPLES: tuple[dict[str, Any], ...] = (
    {"messages": [{"role": "system", "content": "You are helpful."},
                  {"role": "user", "content": "Hello!"}], "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                  {"role": "user", "content": "How are you?"}],
     "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [_CALL]},
                  {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
                   "content": "sunny"},
                  {"role": "assistant", "content": "It is sunny."}],
     "tools": _TOOLS, "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "And Rome?"},
                  {"role": "assistant", "content": None, "tool_calls": [_CALL_STR]},
                  {"role": "tool", "tool_call_id": "call_2", "content": '{"t": 20}'}],
     "tools": _TOOLS, "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "Summarise the document."}],
     "documents": [{"title": "Notes", "text": "The sky is blue."}],
     "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "2+2?"},
                  {"role": "assistant", "content": "4", "reasoning_content": "Add them."},
                  {"role": "user", "content": "Thanks"}],
     "add_generation_prompt": True, "enable_thinking": True},
)
_SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}


def _stream(chunks: Iterator[str], env: TrialEnvironment) -> None:
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > env.max_output:
            raise _Budget(f"output beyond {env.max_output} characters")
        env.tick()


def force_branches(ast: nodes.Template) -> nodes.Template:
    """Make every ``if`` run all its branches, in order (in place).

    A gadget behind a condition the samples never meet (``{% if messages|length > 99 %}``, a
    trigger word) runs in this render all the same; the static check is the guarantee, this
    render a second look at what it allowed.
    """
    for n in ast.find_all(nodes.If):
        body = [*n.body, *(s for e in n.elif_ for s in e.body), *n.else_]
        n.test, n.body, n.elif_, n.else_ = nodes.Const(True), body, [], []
    return ast


def trial_render(ast: nodes.Template, env: TrialEnvironment) -> list[Problem]:
    """Render a parsed template with every sample; a sandbox violation or a blown budget is
    a problem. ``env`` must be the environment that parsed ``ast`` (fresh: it holds the
    deadline).

    Templates legitimately raise on inputs they do not support (``raise_exception``, type
    errors on a shape they do not expect): those are not problems.
    """
    env.ends = time.monotonic() + env.deadline_s
    try:
        code = env.compile(ast)
        template = env.template_class.from_code(env, code, env.make_globals(None), None)
    except (TemplateError, SyntaxError, RecursionError) as err:
        return [("template.syntax", Severity.HIGH, f"does not compile: {err}")]
    for sample in SAMPLES:
        try:
            _stream(template.generate(**_SPECIAL, **sample), env)
        except SecurityError as err:
            return [("template.sandbox", Severity.CRITICAL, f"trial render: {err}")]
        except Differs as err:
            return [("template.engine-differs", Severity.HIGH, f"trial render: {err}")]
        except _Budget as err:
            return [("template.resource", Severity.HIGH, f"trial render: {err}")]
        except OverflowError as err:  # the sandbox's range limit: an engine without one hangs
            return [("template.resource", Severity.HIGH, f"trial render: {err}")]
        except RecursionError:
            if env.every_branch:  # every base case skipped: real recursion never ends here
                continue
            return [("template.resource", Severity.HIGH, "trial render: recursion too deep")]
        except Exception:  # noqa: BLE001,S112 - a template may reject a sample; not a finding
            continue
    return []
