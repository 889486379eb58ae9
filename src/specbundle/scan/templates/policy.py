"""What a chat template may contain: allow-lists derived from real templates, not deny-lists.

Looking for dangerous *names* fails against computed names (``x["__in" ~ "it__"]``,
``dict(__init__=1)|first``, ``"%c%cinit%c%c"|format(95, ...)``, ``map(attribute=...)``,
``map("attr", ...)``). So the check is by construction instead: every AST node type, filter,
test, global and method must be one that real chat templates use (the lists are in
:mod:`.allow`), every attribute must be a data key or an allowed Python attribute,
every key, attribute name and filter/test name given as an argument must be a constant, and no
string may be built and then used as a key or a format string (where a value may come from is
:mod:`.flow`'s analysis). The same goes for attribute names given positionally
(``sort(false, false, k)``) and for filters reached through ``map("map", ...)``. Costs a
template can run up without a sample conversation reaching them are refused statically
(:mod:`.cost`). This module is the walk that applies all of it, node by node.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from jinja2 import nodes

from specbundle.scan.findings import Severity
from specbundle.scan.templates.allow import (
    ALLOWED_FILTERS,
    ALLOWED_GLOBALS,
    ALLOWED_METHODS,
    ALLOWED_NODES,
    ALLOWED_SELECT_TESTS,
    ALLOWED_TESTS,
    ENV_GLOBALS,
    MUTATING_METHODS,
    Problem,
    attr_problem,
)
from specbundle.scan.templates.cost import (
    AMPLIFY_LIMIT,
    RANGE_LIMIT,
    REPEAT_LIMIT,
    const_ints,
    int_value,
    loop_size,
    multiplied_into_itself,
    recursion,
    self_references,
    too_large,
)
from specbundle.scan.templates.flow import LOOKUPS, PASSES, Origins, TooComplex, influenced
from specbundle.scan.templates.walk import Tree

__all__ = [
    "ALLOWED_FILTERS", "ALLOWED_GLOBALS", "ALLOWED_METHODS", "ALLOWED_NODES", "ALLOWED_TESTS",
    "lexical_problems", "policy_problems",
]


def _const_name(arg: nodes.Expr, allowed: frozenset[str], what: str) -> Problem | None:
    if not isinstance(arg, nodes.Const) or not isinstance(arg.value, str):
        return "template.filter-arg", Severity.CRITICAL, f"{what} is not a constant"
    if arg.value not in allowed:
        return ("template.filter-arg", Severity.CRITICAL,
                f"{what} {arg.value!r} is not one real templates use")
    return None


# The (0-based, after the input) positional argument that names an attribute, per filter.
_ATTR_POSITION = {"sort": 2, "unique": 1, "min": 1, "max": 1, "sum": 0, "groupby": 0,
                  "selectattr": 0, "rejectattr": 0, "join": 1}


def _filter_args(node: nodes.Filter, depth: int = 0) -> Iterator[Problem]:
    """Arguments that name an attribute, filter or test must be constants from the lists.

    ``map("f", a, b)`` applies ``f(a, b)`` to each item: when ``f`` itself takes a filter, test
    or attribute name (``map("map", "attr")``, ``map("sort", false, false, k)``), its
    arguments are checked the same way.
    """
    if node.dyn_args is not None or node.dyn_kwargs is not None:
        yield "template.filter-arg", Severity.CRITICAL, f"|{node.name} with *args/**kwargs"
    for kw in node.kwargs:
        if kw.key == "attribute":
            if not (isinstance(kw.value, nodes.Const) and isinstance(kw.value.value, str)):
                yield ("template.filter-arg", Severity.CRITICAL,
                       f"|{node.name}(attribute=...) is not a constant")
            elif (p := attr_problem(kw.value.value, f"|{node.name}(attribute=)")):
                yield p
    args = list(node.args)
    if (i := _ATTR_POSITION.get(node.name)) is not None and len(args) > i:
        named = args[i]
        if isinstance(named, nodes.Const) and isinstance(named.value, (str, int)):
            if (p := attr_problem(named.value, f"|{node.name} attribute")):
                yield p
        else:
            yield ("template.filter-arg", Severity.CRITICAL,
                   f"|{node.name} attribute is not a constant")
    if node.name in ("map", "select", "reject") and args:
        allowed = ALLOWED_FILTERS if node.name == "map" else ALLOWED_SELECT_TESTS
        if (p := _const_name(args[0], allowed, f"|{node.name} filter/test name")):
            yield p
        elif node.name == "map" and isinstance(args[0], nodes.Const):
            if depth > 2:
                yield "template.filter-arg", Severity.CRITICAL, "|map nested in |map"
            else:
                inner = nodes.Filter(None, args[0].value, args[1:], node.kwargs, None, None)
                yield from _filter_args(inner, depth + 1)
    if node.name in ("selectattr", "rejectattr") and len(args) > 1 and (
            p := _const_name(args[1], ALLOWED_TESTS, f"|{node.name} test")):
        yield p
    if node.name == "dictsort" and not all(
            isinstance(a, nodes.Const) for a in [*args, *(k.value for k in node.kwargs)]):
        yield "template.filter-arg", Severity.CRITICAL, "|dictsort argument is not a constant"


def _literal_text(e: nodes.Node, names: set[str]) -> str | None:
    """What a value the template writes itself (not the conversation's) is, when llama.cpp's
    engine prints it otherwise than Jinja: none ('None' in Jinja, '' there), a list, tuple or
    dict (Python's repr in Jinja, other text there)."""
    if isinstance(e, nodes.Const) and e.value is None:
        return "none"
    if isinstance(e, (nodes.List, nodes.Tuple, nodes.Dict)):
        return f"a {type(e).__name__.lower()} literal"
    if isinstance(e, nodes.Name) and e.name in names:
        return f"{e.name!r} (set to none or a list/dict literal)"
    if isinstance(e, nodes.CondExpr):
        return _literal_text(e.expr1, names) or (
            _literal_text(e.expr2, names) if e.expr2 is not None else None)
    if isinstance(e, (nodes.And, nodes.Or)):
        return _literal_text(e.left, names) or _literal_text(e.right, names)
    return None


# filters whose result is a generator in Jinja (always true) and a list in llama.cpp's engine
# (false when empty)
_GENERATORS = frozenset({"map", "select", "reject", "selectattr", "rejectattr", "unique",
                         "items"})


def _generator(e: nodes.Node, names: set[str]) -> bool:
    return (isinstance(e, nodes.Filter) and e.name in _GENERATORS) or (
        isinstance(e, nodes.Name) and e.name in names)


def _truth_differs(e: nodes.Node | None, ctx: _Context) -> str | None:
    """A condition on a value whose truth llama.cpp's engine reads otherwise: a namespace
    (an object in Jinja: true; a dict there: false when empty), a generator (true in Jinja; a
    list there: false when empty)."""
    if e is None:  # (a loop without a filter)
        return None
    if isinstance(e, (nodes.And, nodes.Or)):
        return _truth_differs(e.left, ctx) or _truth_differs(e.right, ctx)
    if isinstance(e, nodes.Not):
        return _truth_differs(e.node, ctx)
    if isinstance(e, nodes.Name) and e.name in ctx.origins.namespaces:
        return f"the namespace {e.name!r}"
    if _generator(e, ctx.generators):
        return "a generator (a |map, |select... not made a |list)"
    return None


class _Context:
    """What the node checks need to know about the whole template."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.bound: set[str] = set()
        self.macros: set[str] = set()
        for n in tree.find_all((nodes.Assign, nodes.AssignBlock, nodes.For, nodes.Macro)):
            if isinstance(n, nodes.Macro):
                self.macros.add(n.name)
                self.bound.update(a.name for a in n.args)
            elif isinstance(n, (nodes.Assign, nodes.AssignBlock, nodes.For)):
                self.bound.update(t.name for t in [n.target, *n.target.find_all(nodes.Name)]
                                  if isinstance(t, nodes.Name))
        self.origins = Origins(tree)
        # names set to none or to a list/dict literal somewhere (printing one: see _printed)
        self.literal_names = {n.target.name for n in tree.find_all(nodes.Assign)
                              if isinstance(n.target, nodes.Name)
                              and _literal_text(n.node, set()) is not None}
        # names in the two places a function or macro may stand: called, or asked about
        self.callees = {id(c.node) for c in tree.find_all(nodes.Call)}
        self.called = self.callees | {
            id(t.node) for t in tree.find_all(nodes.Test) if t.name in ("defined", "undefined")}
        # names that are, where they stand, a parameter of the macro they are in
        self.parameters = {id(x) for m in tree.find_all(nodes.Macro)
                           for x in tree.within(m, nodes.Name)
                           if x.name in {a.name for a in m.args}}
        self.generators: set[str] = set()
        for _ in range(PASSES):  # names set to a generator, or to such a name
            before = len(self.generators)
            self.generators.update(n.target.name for n in tree.find_all(nodes.Assign)
                                   if isinstance(n.target, nodes.Name)
                                   and _generator(n.node, self.generators))
            if len(self.generators) == before:
                break
        self.macro_nodes = {m.name: m for m in tree.find_all(nodes.Macro)}
        self.ints = const_ints(tree)
        self._ints: dict[int, int | None] = {}
        # the private constants of a set of constants, by the set's id (the set is kept
        # alive here): a name used as a key a thousand times is sorted once
        self._private: dict[int, tuple[frozenset[str], list[str]]] = {}

    def int_value(self, e: nodes.Node) -> int | None:
        """:func:`.cost.int_value`, once per node."""
        return int_value(e, self.ints, self._ints)

    def private_constants(self, consts: frozenset[str]) -> list[str]:
        """The constants that are private names, sorted."""
        if id(consts) not in self._private:
            self._private[id(consts)] = (consts, sorted(c for c in consts if c.startswith("_")))
        return self._private[id(consts)][1]


# per filter (or method): the positional index and the keyword of the argument inserted per
# character or line of the input
_INSERTED = {"indent": (0, "width"), "replace": (1, "new"), "join": (0, "d")}


def _amplification(name: str, args: list[nodes.Expr], kwargs: list[Any],
                   ctx: _Context) -> Iterator[Problem]:
    """A constant (or constant expression) inserted at each character or line of the input
    must be at most AMPLIFY_LIMIT characters. (A value built at run time is not bounded here:
    real templates insert their tool definitions, openbmb-MiniCPM5-1B at each separator.)"""
    if name not in _INSERTED:
        return
    i, key = _INSERTED[name]
    for a in (*args[i:i + 1], *(k.value for k in kwargs if k.key == key)):
        if (v := ctx.int_value(a)) is not None and v > AMPLIFY_LIMIT:
            yield ("template.resource", Severity.HIGH,
                   f"{name} inserting {v} characters at each match (multiplies the "
                   "conversation's size: denial of service)")


def _key_problems(arg: nodes.Node, ctx: _Context, what: str) -> Iterator[Problem]:
    """A key that is not a constant: never a built string, never a private constant."""
    transformed, consts = ctx.origins.of(arg)
    if transformed:
        yield ("template.computed-key", Severity.CRITICAL,
               f"{what} with a key built from strings (keys must be constants)")
    for c in ctx.private_constants(consts):
        yield "template.dunder-access", Severity.CRITICAL, f"{what} of private {c!r}"


def _private(name: str, what: str) -> Problem | None:
    if name.startswith("__") or (name.startswith("_") and name.endswith("_") and len(name) > 2):
        return "template.dunder-access", Severity.CRITICAL, f"{what} {name!r}"
    return None


def _node(n: nodes.Node, ctx: _Context) -> Iterator[Problem]:
    kind = type(n).__name__
    if kind not in ALLOWED_NODES:
        cid = "template.import" if isinstance(n, (nodes.Import, nodes.FromImport, nodes.Include,
                                                   nodes.Extends)) else "template.construct"
        yield cid, Severity.CRITICAL, f"{kind} construct (real chat templates never use it)"
    elif isinstance(n, (nodes.If, nodes.CondExpr, nodes.For, nodes.Not)) and (
            what := _truth_differs(n.node if isinstance(n, nodes.Not) else n.test, ctx)):
        yield ("template.engine-differs", Severity.HIGH,
               f"a condition on {what} (true in Jinja; llama.cpp's engine makes it a dict or "
               "list, false when empty)")
    elif isinstance(n, nodes.Output):
        for e in n.nodes:
            if not isinstance(e, nodes.TemplateData) and (
                    what := _literal_text(e, ctx.literal_names)) is not None:
                yield ("template.engine-differs", Severity.HIGH,
                       f"printing {what} (Jinja writes Python's text, llama.cpp's engine "
                       "other text)")
    elif isinstance(n, nodes.Getattr):
        if (p := attr_problem(n.attr, "attribute access")):
            yield p
        elif n.attr in MUTATING_METHODS and id(n) not in ctx.callees:
            yield ("template.engine-differs", Severity.HIGH,
                   f".{n.attr} not called (undefined in Jinja's immutable sandbox, a function "
                   "in llama.cpp's engine)")
    elif isinstance(n, nodes.NSRef):
        if n.attr.startswith("_"):
            yield ("template.dunder-access", Severity.CRITICAL,
                   f"private namespace attribute {n.attr!r}")
    elif isinstance(n, nodes.Getitem):
        if isinstance(n.arg, nodes.Const):
            # a constant key is a data key: only a private name can reach an attribute the
            # sandbox does not already refuse (``x['format']`` is JSON-schema's "format")
            if isinstance(n.arg.value, str) and n.arg.value.startswith("_"):
                yield ("template.dunder-access", Severity.CRITICAL,
                       f"item access of private {n.arg.value!r}")
        elif not isinstance(n.arg, nodes.Slice):  # a slice picks a part: it names nothing
            yield from _key_problems(n.arg, ctx, "subscript")
    elif isinstance(n, nodes.Name):
        # (a name bound somewhere may still be the global or the macro here: a loop
        # variable, a macro parameter or a ``set`` in a loop does not outlive its scope)
        if n.ctx == "load" and n.name.startswith("_") and n.name not in ctx.bound:
            yield "template.dunder-access", Severity.CRITICAL, f"private name {n.name!r}"
        elif n.ctx == "load" and id(n) in ctx.parameters:
            pass  # (a macro's parameter, inside it, is always the parameter)
        elif n.ctx == "load" and n.name in ENV_GLOBALS and n.name not in ALLOWED_GLOBALS:
            yield ("template.gadget", Severity.CRITICAL, f"global {n.name!r} (sandbox gadget)")
        elif n.ctx == "load" and (n.name in ENV_GLOBALS or n.name in ctx.macros) and (
                id(n) not in ctx.called):
            # stored (``namespace(get=range)``, ``set ns.split = m``), it is called under a
            # method's name (``ns.get(...)``) that no check of calls or recursion sees
            yield ("template.call", Severity.CRITICAL,
                   f"the function {n.name!r} as a value (only a call may name it)")
        elif n.ctx != "load" and (p := _private(n.name, "variable")):
            yield p
    elif isinstance(n, nodes.Macro):
        if (p := _private(n.name, "macro")):
            yield p
    elif isinstance(n, nodes.Filter):
        if n.name not in ALLOWED_FILTERS:
            cid = {"attr": "template.attr-filter", "format": "template.format"}.get(
                n.name, "template.filter")
            yield cid, Severity.CRITICAL, f"|{n.name} filter (real chat templates never use it)"
        yield from _filter_args(n)
        if n.name in ("indent", "center", "wordwrap", "truncate"):
            for a in (*n.args[:1], *(k.value for k in n.kwargs if k.key == "width")):
                if (v := ctx.int_value(a)) is not None and v > REPEAT_LIMIT:
                    yield ("template.resource", Severity.HIGH,
                           f"|{n.name} width {v} (denial of service)")
        yield from _amplification(n.name, list(n.args), list(n.kwargs), ctx)
    elif isinstance(n, nodes.Test) and n.name not in ALLOWED_TESTS:
        yield "template.test", Severity.HIGH, f"'is {n.name}' test (not used by real templates)"
    elif isinstance(n, nodes.Call):
        yield from _call(n, ctx)
    elif isinstance(n, nodes.Mod) and influenced(ctx.origins.of(n.left)):
        yield "template.format", Severity.CRITICAL, "'%' formatting of a string"
    elif isinstance(n, nodes.Mul):
        sizes = [ctx.int_value(c) for c in (n.left, n.right)]
        total = ctx.int_value(n)
        if any(v is not None and v > REPEAT_LIMIT for v in sizes) or (
                total is not None and total > RANGE_LIMIT):
            yield ("template.resource", Severity.HIGH,
                   f"repetition by {max(v or 0 for v in [*sizes, total])} (denial of service)")
        elif None in sizes and any(v is not None and v > AMPLIFY_LIMIT for v in sizes):
            yield ("template.resource", Severity.HIGH,
                   f"a value of the conversation repeated {max(v or 0 for v in sizes)} times "
                   "(multiplies its size: denial of service)")
    elif isinstance(n, nodes.Assign) and self_references(n) > 1:
        yield ("template.resource", Severity.HIGH,
               "a value assigned from two copies of itself (doubles each time: denial of "
               "service)")
    elif isinstance(n, nodes.Assign) and multiplied_into_itself(n, ctx.tree):
        # ``x = x * k`` grows geometrically: past 2**63 Python keeps a big integer and
        # llama.cpp's engine wraps to a negative one (another branch taken)
        yield ("template.engine-differs", Severity.HIGH,
               "a value multiplied into itself (overflows 64 bits: llama.cpp's engine wraps "
               "around where Jinja does not)")
    elif isinstance(n, nodes.Compare) and len(n.ops) > 1:
        yield ("template.engine-differs", Severity.HIGH,
               "chained comparison (Jinja reads 'a == b == c' as 'a == b and b == c', "
               "llama.cpp's engine as '(a == b) == c')")


def _call(n: nodes.Call, ctx: _Context) -> Iterator[Problem]:
    if n.dyn_args is not None or n.dyn_kwargs is not None:
        yield "template.call", Severity.CRITICAL, "call with *args/**kwargs"
    for kw in n.kwargs:
        if kw.key.startswith("_"):
            yield "template.dunder-access", Severity.CRITICAL, f"keyword argument {kw.key!r}"
    callee = n.node
    if isinstance(callee, nodes.Name):
        if callee.name not in ctx.macros and callee.name not in ALLOWED_GLOBALS:
            # a variable holding a callable (``set r = range``, a macro parameter given
            # ``x.get``) is a call the checks cannot name
            yield ("template.call", Severity.CRITICAL,
                   f"call of {callee.name!r} (not a macro or an allowed global)")
        elif callee.name in ctx.bound:
            # (a macro's name too: ``set m = range``, a parameter or a loop variable named
            # like a macro, holds whatever it was given, and the call runs that)
            yield ("template.call", Severity.CRITICAL,
                   f"call of the variable {callee.name!r} (shadows a global or a macro)")
        if callee.name == "range" and any(
                isinstance(x, (nodes.Mul, nodes.Pow)) for arg in n.args
                for x in [arg, *ctx.tree.within(arg, (nodes.Mul, nodes.Pow))]):
            yield ("template.resource", Severity.HIGH,
                   "range of a product (grows with the square of the conversation: denial "
                   "of service)")
        if callee.name == "range":
            big = [v for a in n.args if (v := ctx.int_value(a)) is not None
                   and v > RANGE_LIMIT]
            if big:
                yield "template.resource", Severity.HIGH, f"range({big[0]}) (denial of service)"
    elif isinstance(callee, nodes.Getattr):
        if callee.attr == "replace":
            yield from _amplification("replace", list(n.args), list(n.kwargs), ctx)
        if callee.attr in LOOKUPS and n.args and not isinstance(n.args[0], nodes.Const):
            yield from _key_problems(n.args[0], ctx, f".{callee.attr}()")
        if callee.attr not in ALLOWED_METHODS:
            cid = "template.format" if callee.attr in ("format", "format_map") else \
                "template.call"
            yield cid, Severity.CRITICAL, f".{callee.attr}() (not a method real templates call)"
    else:
        yield ("template.call", Severity.CRITICAL,
               f"call of a computed {type(callee).__name__} (not a name or a method)")


def policy_problems(ast: nodes.Template, tree: Tree | None = None) -> list[Problem]:
    """Every violation of the allow-lists in one parsed template (deduplicated, in order).

    ``tree`` is ``Tree(ast)`` where the caller has one already.
    """
    if tree is None:
        tree = Tree(ast)
    if (why := too_large(tree)) is not None:
        return [("template.resource", Severity.HIGH, why)]
    try:
        ctx = _Context(tree)
    except TooComplex as err:
        return [("template.resource", Severity.HIGH, str(err))]
    out: list[Problem] = []
    if (size := loop_size(ast, ctx.macro_nodes, ctx.ints, {})) > RANGE_LIMIT:
        out.append(("template.resource", Severity.HIGH,
                    f"nested constant loops of {size} iterations (denial of service)"))
    out.extend(recursion(tree))
    seen = set(out)
    for n in [ast, *tree.order]:
        for p in _node(n, ctx):
            if p not in seen:
                seen.add(p)
                out.append(p)
    return out


# llama.cpp's lexer, stripping blanks before a block at the start of a template, drops the
# template's first character with them: ``X {% if %}`` renders without the X there
_FIRST_CHAR_DROPPED = re.compile(r"\A[^\s][ \t\v\f]*\{[%#]")


def lexical_problems(tokens: Iterator[tuple[int, str, str]], source: str = "") -> list[Problem]:
    """What only the token stream shows: a ``{% raw %}`` block, which no real chat template
    uses, hides text from Jinja that another engine (llama.cpp's) may parse as code; and
    text only one engine renders."""
    if _FIRST_CHAR_DROPPED.match(source.replace("\r", "\n")):
        return [("template.engine-differs", Severity.HIGH,
                 "text before the first block that llama.cpp's engine drops (its first "
                 "character, with the blanks after it)")]
    for _line, kind, _value in tokens:
        if kind == "raw_begin":
            return [("template.construct", Severity.HIGH,
                     "{% raw %} block (real chat templates never use it; another engine may "
                     "read its text as template code)")]
    return []
