"""What a chat template may contain: allow-lists derived from real templates, not deny-lists.

Looking for dangerous *names* fails against computed names (``x["__in" ~ "it__"]``,
``dict(__init__=1)|first``, ``"%c%cinit%c%c"|format(95, ...)``, ``map(attribute=...)``,
``map("attr", ...)``). So the check is by construction instead: every AST node type, filter,
test, global and method must be one that real chat templates use (the sets below are exactly
what the corpus in ``tests/scan/templates/`` uses; a test keeps them in sync), every attribute
must be a data key or an allowed Python attribute (the reachable attributes of every type a
template can touch are enumerated, and only the corpus' ones are allowed), every key, attribute
name and filter/test name given as an argument must be a constant, and no string may be built
and then used as a key or a format string.
"""

from __future__ import annotations

from collections.abc import Iterator

from jinja2 import nodes
from jinja2.runtime import LoopContext, Macro, Undefined
from jinja2.utils import Cycler, Joiner, Namespace
from markupsafe import Markup

from specbundle.scan.findings import Severity

__all__ = [
    "ALLOWED_FILTERS", "ALLOWED_GLOBALS", "ALLOWED_METHODS", "ALLOWED_NODES", "ALLOWED_TESTS",
    "policy_problems",
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
# -----------------------------------------------------------------------------------------------

# Every attribute a template can reach on the objects it is given or builds: a name in here is a
# Python attribute, not a data key, and only ALLOWED_ATTRIBUTES of them may be used.
_TYPES: tuple[type, ...] = (str, bytes, dict, list, tuple, set, frozenset, int, float, bool,
                            complex, type(None), Namespace, LoopContext, Macro, Undefined,
                            Markup, Cycler, Joiner, object, type)
REACHABLE_ATTRIBUTES = frozenset(a for t in _TYPES for a in dir(t)) | {
    "func_globals", "f_globals", "gi_frame", "cr_frame", "gi_code", "f_code", "f_back",
    "tb_frame", "im_func", "environment", "globals", "module", "obj"}
# Names a template resolves in the environment's globals, not in the conversation context.
_ENV_GLOBALS = frozenset({"range", "dict", "lipsum", "cycler", "joiner", "namespace", "self",
                          "config", "request", "url_for", "get_flashed_messages", "g",
                          "session", "raise_exception", "strftime_now", "caller", "varargs",
                          "kwargs"})
# Filters whose arguments name an attribute (attribute=, or the first positional argument).
_ATTR_ARG = frozenset({"map", "selectattr", "rejectattr", "sort", "unique", "min", "max",
                       "sum", "groupby", "dictsort"})
_RANGE_LIMIT = 100_000
_REPEAT_LIMIT = 10_000


def _attr_problem(attr: object, how: str) -> Problem | None:
    if not isinstance(attr, str):
        return None
    for part in attr.split("."):
        if part.startswith("_"):
            return "template.dunder-access", Severity.CRITICAL, f"{how} of private {part!r}"
        if part in REACHABLE_ATTRIBUTES and part not in ALLOWED_ATTRIBUTES:
            return ("template.attribute", Severity.CRITICAL,
                    f"{how} of the Python attribute {part!r} (real templates never use it)")
    return None


_INJECTING = frozenset({"replace", "join", "format", "format_map", "default", "center",
                        "indent", "wordwrap", "truncate"})


def _stringy(expr: nodes.Node, tainted: set[str], attrs: set[str], *,
             or_literal: bool = False) -> bool:
    """Whether an expression *builds* a string from template constants.

    A constant (``param['maximum']``, a loop over a literal list) is a name the author wrote
    and the checks see; a string derived from data (``fn.name.split('.')[0]``) cannot spell a
    name the author chose. A string *built* from constants (``"__in" ~ "it__"``,
    ``["_", "_"]|join``, ``"%c" % 95``, a variable or namespace attribute set to one) hides
    the name it spells, and must never become a key or a format string.
    """
    def literal(e: nodes.Node) -> bool:
        if isinstance(e, nodes.Const):
            return isinstance(e.value, str)
        if isinstance(e, (nodes.List, nodes.Tuple)):
            return any(literal(x) or built(x) for x in e.iter_child_nodes())
        return built(e)

    def built(e: nodes.Node) -> bool:
        if isinstance(e, nodes.TemplateData):
            return True
        if isinstance(e, nodes.Name):
            return e.name in tainted
        if isinstance(e, nodes.Getattr):
            return e.attr in attrs or built(e.node)
        if isinstance(e, nodes.Concat):
            return any(literal(x) for x in e.nodes)
        if isinstance(e, nodes.Add):
            return literal(e.left) or literal(e.right)
        if isinstance(e, nodes.Mod):
            return literal(e.left)
        if isinstance(e, nodes.CondExpr):
            return built(e.expr1) or (e.expr2 is not None and built(e.expr2))
        if isinstance(e, (nodes.Getitem, nodes.List, nodes.Tuple)):
            return any(built(x) for x in e.iter_child_nodes())
        if isinstance(e, nodes.Filter):
            inject = e.name in _INJECTING and (
                (e.node is not None and literal(e.node)) or any(literal(x) for x in e.args))
            return inject or (e.node is not None and built(e.node))
        if isinstance(e, nodes.Call) and isinstance(e.node, nodes.Getattr):
            recv = e.node.node
            inject = e.node.attr in _INJECTING and (
                literal(recv) or any(literal(x) for x in e.args))
            return inject or built(recv)
        return False
    return literal(expr) if or_literal else built(expr)


def _bindings(ast: nodes.Template) -> tuple[set[str], set[str], set[str], set[str]]:
    """(names bound anywhere, macro names, names and namespace attributes set to built strings)."""
    bound: set[str] = set()
    macros: set[str] = set()
    for n in ast.find_all((nodes.Assign, nodes.AssignBlock, nodes.For, nodes.Macro)):
        if isinstance(n, nodes.Macro):
            macros.add(n.name)
            bound.update(a.name for a in n.args)
        elif isinstance(n, (nodes.Assign, nodes.AssignBlock, nodes.For)):
            bound.update(t.name for t in [n.target, *n.target.find_all(nodes.Name)]
                         if isinstance(t, nodes.Name))
    # A name (or namespace attribute) is a built string when every binding of it is one; a
    # name that may also hold data is left to the trial render, which sees its real value.
    tainted: set[str] = set()
    attrs: set[str] = set()
    for _ in range(4):  # bindings copied from built strings: iterate to a fixpoint
        names: dict[str, bool] = {}
        nsattrs: dict[str, bool] = {}
        for n in ast.find_all((nodes.Assign, nodes.AssignBlock, nodes.For)):
            if not isinstance(n, (nodes.Assign, nodes.AssignBlock, nodes.For)):
                continue
            value = n.iter if isinstance(n, nodes.For) else getattr(n, "node", None)
            built = isinstance(n, nodes.AssignBlock) or (
                value is not None and _stringy(value, tainted, attrs))
            for t in [n.target, *n.target.find_all((nodes.Name, nodes.NSRef))]:
                if isinstance(t, nodes.Name):
                    names[t.name] = names.get(t.name, True) and built
                elif isinstance(t, nodes.NSRef):
                    nsattrs[t.attr] = nsattrs.get(t.attr, True) and built
        for call in ast.find_all(nodes.Call):  # namespace(key=...) binds attributes too
            if isinstance(call.node, nodes.Name) and call.node.name == "namespace":
                for k in call.kwargs:
                    nsattrs[k.key] = nsattrs.get(k.key, True) and _stringy(k.value, tainted,
                                                                            attrs)
        new_t = {k for k, v in names.items() if v}
        new_a = {k for k, v in nsattrs.items() if v}
        if (new_t, new_a) == (tainted, attrs):
            break
        tainted, attrs = new_t, new_a
    return bound, macros, tainted, attrs


def _const_name(arg: nodes.Expr, allowed: frozenset[str], what: str) -> Problem | None:
    if not isinstance(arg, nodes.Const) or not isinstance(arg.value, str):
        return "template.filter-arg", Severity.CRITICAL, f"{what} is not a constant"
    if arg.value not in allowed:
        return ("template.filter-arg", Severity.CRITICAL,
                f"{what} {arg.value!r} is not one real templates use")
    return None


def _filter_args(node: nodes.Filter) -> Iterator[Problem]:
    """Arguments that name an attribute, filter or test must be constants from the lists."""
    if node.dyn_args is not None or node.dyn_kwargs is not None:
        yield "template.filter-arg", Severity.CRITICAL, f"|{node.name} with *args/**kwargs"
    for kw in node.kwargs:
        if kw.key == "attribute":
            if not (isinstance(kw.value, nodes.Const) and isinstance(kw.value.value, str)):
                yield ("template.filter-arg", Severity.CRITICAL,
                       f"|{node.name}(attribute=...) is not a constant")
            elif (p := _attr_problem(kw.value.value, f"|{node.name}(attribute=)")):
                yield p
    args = list(node.args)
    if node.name in ("map", "select", "reject") and args and not (
            node.name == "map" and not args):
        allowed = ALLOWED_FILTERS if node.name == "map" else ALLOWED_TESTS
        if (p := _const_name(args[0], allowed, f"|{node.name} filter/test name")):
            yield p
    if node.name in ("selectattr", "rejectattr"):
        if args and isinstance(args[0], nodes.Const):
            if (p := _attr_problem(args[0].value, f"|{node.name} attribute")):
                yield p
        elif args:
            yield ("template.filter-arg", Severity.CRITICAL,
                   f"|{node.name} attribute is not a constant")
        if len(args) > 1 and (p := _const_name(args[1], ALLOWED_TESTS, f"|{node.name} test")):
            yield p


def _node(n: nodes.Node, bound: set[str], macros: set[str], tainted: set[str],
          attrs: set[str]) -> Iterator[Problem]:
    kind = type(n).__name__
    if kind not in ALLOWED_NODES:
        cid = "template.import" if isinstance(n, (nodes.Import, nodes.FromImport, nodes.Include,
                                                   nodes.Extends)) else "template.construct"
        yield cid, Severity.CRITICAL, f"{kind} construct (real chat templates never use it)"
    elif isinstance(n, nodes.Getattr):
        if (p := _attr_problem(n.attr, "attribute access")):
            yield p
    elif isinstance(n, nodes.Getitem):
        if isinstance(n.arg, nodes.Const):
            # a constant key is a data key: only a private name can reach an attribute the
            # sandbox does not already refuse (``x['format']`` is JSON-schema's "format")
            if isinstance(n.arg.value, str) and n.arg.value.startswith("_"):
                yield ("template.dunder-access", Severity.CRITICAL,
                       f"item access of private {n.arg.value!r}")
        elif not isinstance(n.arg, nodes.Slice) and _stringy(n.arg, tainted, attrs):
            yield ("template.computed-key", Severity.CRITICAL,
                   "subscript with a key built from strings (keys must be constants)")
    elif isinstance(n, nodes.Name) and n.ctx == "load" and n.name not in bound:
        if n.name.startswith("_"):
            yield "template.dunder-access", Severity.CRITICAL, f"private name {n.name!r}"
        elif n.name in _ENV_GLOBALS and n.name not in ALLOWED_GLOBALS:
            yield "template.gadget", Severity.CRITICAL, f"global {n.name!r} (sandbox gadget)"
    elif isinstance(n, nodes.Filter):
        if n.name not in ALLOWED_FILTERS:
            cid = {"attr": "template.attr-filter", "format": "template.format"}.get(
                n.name, "template.filter")
            yield cid, Severity.CRITICAL, f"|{n.name} filter (real chat templates never use it)"
        yield from _filter_args(n)
    elif isinstance(n, nodes.Test) and n.name not in ALLOWED_TESTS:
        yield "template.test", Severity.HIGH, f"'is {n.name}' test (not used by real templates)"
    elif isinstance(n, nodes.Call):
        yield from _call(n, bound, macros)
    elif isinstance(n, nodes.Mod) and _stringy(n.left, tainted, attrs, or_literal=True):
        yield "template.format", Severity.CRITICAL, "'%' formatting of a string"
    elif isinstance(n, nodes.Mul):
        big = [c.value for c in (n.left, n.right) if isinstance(c, nodes.Const)
               and isinstance(c.value, int) and c.value > _REPEAT_LIMIT]
        if big:
            yield "template.resource", Severity.MEDIUM, f"repetition by {big[0]}"


def _call(n: nodes.Call, bound: set[str], macros: set[str]) -> Iterator[Problem]:
    if n.dyn_args is not None or n.dyn_kwargs is not None:
        yield "template.call", Severity.CRITICAL, "call with *args/**kwargs"
    for kw in n.kwargs:
        if kw.key.startswith("_"):
            yield "template.dunder-access", Severity.CRITICAL, f"keyword argument {kw.key!r}"
    callee = n.node
    if isinstance(callee, nodes.Name):
        if callee.name not in macros and callee.name not in ALLOWED_GLOBALS and (
                callee.name not in bound):
            yield ("template.call", Severity.CRITICAL,
                   f"call of {callee.name!r} (not a macro or an allowed global)")
        if callee.name == "range":
            big = [a.value for a in n.args if isinstance(a, nodes.Const)
                   and isinstance(a.value, int) and a.value > _RANGE_LIMIT]
            if big:
                yield "template.resource", Severity.MEDIUM, f"range({big[0]}) (denial of service)"
    elif isinstance(callee, nodes.Getattr):
        if callee.attr not in ALLOWED_METHODS:
            cid = "template.format" if callee.attr in ("format", "format_map") else \
                "template.call"
            yield cid, Severity.CRITICAL, f".{callee.attr}() (not a method real templates call)"
    else:
        yield ("template.call", Severity.CRITICAL,
               f"call of a computed {type(callee).__name__} (not a name or a method)")


def policy_problems(ast: nodes.Template) -> list[Problem]:
    """Every violation of the allow-lists in one parsed template (deduplicated, in order)."""
    bound, macros, tainted, attrs = _bindings(ast)
    out: list[Problem] = []
    for n in [ast, *ast.find_all(nodes.Node)]:
        for p in _node(n, bound, macros, tainted, attrs):
            if p not in out:
                out.append(p)
    return out
