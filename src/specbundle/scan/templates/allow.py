"""The tables the chat-template checks read: what real templates use, what a template can reach.

Kept apart from the code that applies them so that the policy itself can be read and reviewed
(and diffed) on one page. The allow-lists are exactly what the corpus in
``tests/scan/templates/`` uses (``test_template_corpus`` checks each entry is used);
:data:`REACHABLE_ATTRIBUTES` enumerates the Python attributes of every type a template can
touch, so that a name in it is known to be an attribute, not a data key.
"""

from __future__ import annotations

import types

from jinja2.runtime import LoopContext, Macro, Undefined
from jinja2.utils import Cycler, Joiner, Namespace
from markupsafe import Markup

from specbundle.scan.findings import Severity

__all__ = [
    "ALLOWED_ATTRIBUTES", "ALLOWED_FILTERS", "ALLOWED_GLOBALS", "ALLOWED_METHODS",
    "ALLOWED_NODES", "ALLOWED_SELECT_TESTS", "ALLOWED_TESTS", "ENV_GLOBALS", "MUTATING_METHODS",
    "REACHABLE_ATTRIBUTES", "Problem", "attr_problem",
]

Problem = tuple[str, Severity, str]

# -- derived from tests/scan/templates (test_template_corpus checks each entry is used) --------
ALLOWED_NODES = frozenset({
    "Template", "Output", "TemplateData", "Const", "Name", "Getattr", "Getitem", "Slice",
    "Filter", "Test", "Call", "Keyword", "If", "For", "Break", "Macro", "Assign", "AssignBlock",
    "NSRef", "FilterBlock", "Scope", "Compare", "Operand", "And", "Or", "Not", "Neg", "Add",
    "Sub", "Mul", "Mod", "Concat", "CondExpr", "List", "Tuple", "Dict", "Pair",
})
ALLOWED_FILTERS = frozenset({
    "default", "dictsort", "from_json", "indent", "int", "items", "join", "length", "list",
    "lower", "map", "min", "reject", "rejectattr", "replace", "safe", "selectattr", "sort",
    "string", "tojson", "trim", "unique", "upper",
})
ALLOWED_TESTS = frozenset({
    "boolean", "defined", "equalto", "false", "iterable", "mapping", "none", "number",
    "sequence", "string", "true", "undefined",
})
ALLOWED_METHODS = frozenset({
    "append", "endswith", "get", "items", "lstrip", "pop", "replace", "rstrip", "split",
    "startswith", "strip",
})
# Loop-context and other non-method attributes of Python objects the corpus reads.
ALLOWED_ATTRIBUTES = frozenset({"first", "last", "index", "index0", "length", "previtem",
                                "nextitem"}) | ALLOWED_METHODS
ALLOWED_GLOBALS = frozenset({"namespace", "raise_exception", "range", "strftime_now"})
# the tests ``|select``/``|reject`` may name (real templates: ``reject('equalto', ...)``):
# llama.cpp's engine runs no other the same (``[none, 1]|reject('none')`` keeps both there)
ALLOWED_SELECT_TESTS = frozenset({"equalto"})
# methods that change their object: Jinja's immutable sandbox makes them undefined (``x.append
# is defined`` is false), llama.cpp's engine a function (true), so they may only be called
MUTATING_METHODS = frozenset({"append", "pop"})
# -----------------------------------------------------------------------------------------------

# Every attribute a template can reach on the objects it is given or builds: a name in here is a
# Python attribute, not a data key, and only ALLOWED_ATTRIBUTES of them may be used.
_TYPES: tuple[type, ...] = (str, bytes, dict, list, tuple, set, frozenset, int, float, bool,
                            complex, type(None), Namespace, LoopContext, Macro, Undefined,
                            Markup, Cycler, Joiner, object, type, range, map, filter, zip,
                            types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                            types.MethodWrapperType, types.GeneratorType, types.CoroutineType,
                            types.AsyncGeneratorType, types.FrameType, types.CodeType,
                            types.TracebackType, types.ModuleType, types.CellType,
                            BaseException, property, staticmethod, classmethod)
REACHABLE_ATTRIBUTES = frozenset(a for t in _TYPES for a in dir(t)) | {
    "func_globals", "f_globals", "gi_frame", "cr_frame", "gi_code", "f_code", "f_back",
    "tb_frame", "im_func", "environment", "globals", "module", "obj"}
# Names a template resolves in the environment's globals, not in the conversation context.
ENV_GLOBALS = frozenset({"range", "dict", "lipsum", "cycler", "joiner", "namespace", "self",
                         "config", "request", "url_for", "get_flashed_messages", "g",
                         "session", "raise_exception", "strftime_now", "caller", "varargs",
                         "kwargs"})


def attr_problem(attr: object, how: str) -> Problem | None:
    """A private name, or a Python attribute real templates never use, in a (dotted) name."""
    if not isinstance(attr, str):
        return None
    for part in attr.split("."):
        if part.startswith("_"):
            return "template.dunder-access", Severity.CRITICAL, f"{how} of private {part!r}"
        if part in REACHABLE_ATTRIBUTES and part not in ALLOWED_ATTRIBUTES:
            return ("template.attribute", Severity.CRITICAL,
                    f"{how} of the Python attribute {part!r} (real templates never use it)")
    return None
