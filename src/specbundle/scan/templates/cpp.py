"""What llama.cpp's own C++ template engine computes otherwise than Jinja2, checked in the
trial render (:mod:`.render`) on the values it actually meets.

A template that renders one prompt in transformers/vLLM and another in llama-server can show a
hidden instruction to one engine only. Each rule here was confirmed on llama-server
(tests/scan/templates/test_template_engines.py and test_redteam3_templates.py): string
operations on non-ASCII text (bytes there, code points here), Unicode case and blanks,
``split()`` without a separator, float text, ``|int`` parsing, integers past 2**53, ``~`` of
none or a container, case-folding sorts, and objects that are dicts or lists there
(namespaces, loop objects, generators, ranges) asked for their type or text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jinja2.runtime import Undefined

__all__ = ["CASE_FOLDING", "EXACT", "INT64", "Differs", "is_number", "plain_test", "same_in_cpp",
           "same_in_cpp_text", "same_text_op", "text_differs", "tojson"]


class Differs(Exception):
    """The render did something llama.cpp's engine evaluates differently (checked on
    llama-server: tests/scan/templates/test_template_engines.py)."""


INT64 = 1 << 63
EXACT = 1 << 53  # the largest integer a double holds exactly
CASE_FOLDING = ("sort", "min", "max", "unique", "dictsort")  # case_sensitive=False default


def same_in_cpp(fn: Any, name: str) -> Any:
    """A filter Jinja runs case-insensitively by default, llama.cpp's engine by byte order:
    a result that depends on which is a differential."""
    def run(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if name == "unique":  # a generator: read once, here
            out = list(out)
        try:  # (an explicit positional case_sensitive: the second call cannot be made)
            exact = None if "case_sensitive" in kwargs else list(
                fn(*args, **kwargs, case_sensitive=True))
        except TypeError:
            exact = None
        if exact is not None and exact != list(out):
            raise Differs(f"|{name} of strings differing in case (Jinja ignores case, "
                          "llama.cpp's engine does not)")
        return out
    for attr in ("jinja_pass_arg",):
        if hasattr(fn, attr):
            setattr(run, attr, getattr(fn, attr))
    return run


# C++'s isspace: what llama.cpp's engine strips (Python also strips \x1c-\x1f, \x85, \xa0 and
# the other Unicode spaces)
_CPP_SPACE = " \t\n\r\v\f"
_CPP_INT = re.compile(r"\s*[+-]?[0-9]+(\.[0-9]+)?\s*")


def _ascii_case(s: str, upper: bool) -> str:
    table = str.maketrans(*(("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
                            if upper else ("ABCDEFGHIJKLMNOPQRSTUVWXYZ",
                                           "abcdefghijklmnopqrstuvwxyz")))
    return s.translate(table)


def same_text_op(name: str, s: str, out: Any, args: tuple[Any, ...]) -> None:
    """A string operation llama.cpp's engine runs on bytes, ASCII case and ASCII blanks: a
    result that differs from Python's (code points, Unicode case and blanks) is a
    differential (checked on llama-server: tests/scan/templates/test_redteam3_templates.py)."""
    if name in ("length", "count", "getitem") and not s.isascii():
        raise Differs(f"{name} of a non-ASCII string (code points in Jinja, bytes in "
                      "llama.cpp's engine)")
    if name in ("upper", "lower") and out != _ascii_case(s, name == "upper"):
        raise Differs(f"|{name} of a non-ASCII letter (Jinja maps Unicode case, llama.cpp's "
                      "engine ASCII only)")
    if name in ("trim", "strip", "lstrip", "rstrip") and not (args and args[0] is not None):
        cpp = {"lstrip": s.lstrip, "rstrip": s.rstrip}.get(name, s.strip)(_CPP_SPACE)
        if out != cpp:
            raise Differs(f"{name} of a blank other than ASCII whitespace (Jinja strips "
                          "Unicode blanks, llama.cpp's engine ASCII ones)")
    if name == "split" and not (args and args[0] is not None) and out != s.split(" "):
        raise Differs("split() without a separator of other than single spaces (Jinja "
                      "splits on runs of blanks, llama.cpp's engine on each space)")
    if name == "replace" and args and args[0] == "" and not s.isascii():
        raise Differs("replace of '' in a non-ASCII string (between code points in Jinja, "
                      "bytes in llama.cpp's engine)")


_PLAIN = (str, int, float, bool, type(None), list, tuple, dict, Undefined)


def _plain(value: Any, how: str) -> None:
    """A value of a type llama.cpp's engine has too: its namespaces and loop objects are
    dicts (``is mapping``, their text), its filters give lists where Jinja gives generators
    (``is sequence``, their text), its ranges lists (checked on llama-server)."""
    if not isinstance(value, _PLAIN):
        raise Differs(f"{how} a {type(value).__name__} (another type in llama.cpp's engine: "
                      "a dict or a list)")


def text_differs(value: Any, how: str) -> None:
    """A value printed (``{{ }}``) or joined (``~``) whose text llama.cpp's engine writes
    otherwise: None (``''`` there), a container (no brackets or quotes there), a float Python
    writes with more digits than C++'s shortest form."""
    _plain(value, how)
    if value is None:
        raise Differs(f"{how} none ('None' in Jinja, '' in llama.cpp's engine)")
    if isinstance(value, (list, tuple, dict)):
        raise Differs(f"{how} a {type(value).__name__} (Python's repr in Jinja, other text "
                      "in llama.cpp's engine)")
    if isinstance(value, float) and repr(value) not in (short := f"{value:.15g}",
                                                         short + ".0"):
        raise Differs(f"{how} the float {value!r} (llama.cpp's engine writes {short})")


def same_in_cpp_text(fn: Any, name: str) -> Any:
    """A filter whose result llama.cpp's engine computes otherwise for some inputs."""
    def run(*args: Any, **kwargs: Any) -> Any:
        value = args[0] if args else None
        if name == "int" and isinstance(value, str) and not _CPP_INT.fullmatch(value):
            raise Differs(f"|int of {value[:20]!r} (Python's int() and float() read it, "
                          "llama.cpp's engine another way)")
        if name in ("default", "d") and value is None and not (
                len(args) > 2 and args[2]) and not kwargs.get("boolean"):
            raise Differs("|default of none (kept in Jinja, replaced in llama.cpp's engine)")
        if name == "string":
            _plain(value, "|string of")
            if isinstance(value, float):
                text_differs(value, "|string of")
        out = fn(*args, **kwargs)
        if isinstance(value, str):
            same_text_op(name, value, out, args[1:])
        return out
    for attr in ("jinja_pass_arg",):
        if hasattr(fn, attr):
            setattr(run, attr, getattr(fn, attr))
    return run


def plain_test(fn: Any, name: str) -> Any:
    def run(value: Any, *args: Any) -> Any:
        _plain(value, f"'is {name}' of")
        return fn(value, *args)
    return run


def is_number(value: Any) -> bool:
    if isinstance(value, bool):
        raise Differs("'is number' of a boolean (true in Jinja, false in llama.cpp's engine)")
    return isinstance(value, (int, float, complex))


def _integral_float(value: Any, depth: int = 0) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if depth > 64:
        return False
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, (list, tuple)) and any(_integral_float(v, depth + 1)
                                                     for v in value)


def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # transformers' tojson signature (the builtin one takes no ensure_ascii)
    if _integral_float(value):
        raise Differs("|tojson of an integral float ('1.0' in Jinja, '1' in llama.cpp's "
                      "engine)")
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=tuple(separators) if separators else None, sort_keys=sort_keys)
