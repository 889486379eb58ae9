"""Where each value of a chat template may come from: the provenance the key checks rest on.

Looking for dangerous *names* fails against computed ones, so the policy refuses any string
that a template *builds* and then uses as a key or a format string. "Built" is decided here,
through every binding (``set``, ``for``, macro parameters, namespace attributes,
``.append``): a literal changed in any way (sliced, cased, split, joined, concatenated,
replaced, a function's or macro's text) is built; a literal passed on unchanged is a constant,
checked where it is used; data (the conversation, tools) is neither: a template author cannot
choose what it spells.

The analysis is a fixpoint over the bindings, each pass linear in the template: an
expression's origin is memoised until a binding changes, and a name is allowed at most
:data:`MAX_CONSTANTS` different literals (real templates: 13), so that neither nested calls nor
thousands of ``set`` statements of one name make it quadratic.
"""

from __future__ import annotations

from jinja2 import nodes

from specbundle.scan.template_allow import ENV_GLOBALS
from specbundle.scan.template_walk import Tree

__all__ = [
    "BUILT", "DATA", "LOOKUPS", "MAX_CONSTANTS", "NUMERIC", "PASSES", "Origin", "Origins",
    "TooComplex", "influenced",
]

# An origin is what a value may have come from: (*transformed*, *constants*). *constants* are
# string literals the value may be verbatim (a name the author wrote, checked where it is used);
# *transformed* says the value may be a literal changed into something else: sliced, cased,
# split, concatenated, replaced, joined, formatted, repeated. Such a value spells a name the
# checks never saw, and must never become a key or a format string. Data (the conversation,
# tools) has neither: a template author cannot choose what it spells.
Origin = tuple[bool, frozenset[str]]
DATA: Origin = (False, frozenset())
BUILT: Origin = (True, frozenset())
# filters and methods whose result holds no character of their arguments (only of their input)
_KEEPS_INPUT = frozenset({"lower", "upper", "trim", "list", "string", "from_json", "split",
                          "strip", "lstrip", "rstrip", "startswith", "endswith", "title",
                          "capitalize"})
# the input or the argument, unchanged; or the input's elements, rearranged
_PASS_THROUGH = frozenset({"default", "d", "safe", "items", "dictsort", "unique", "sort", "min",
                           "max", "selectattr", "rejectattr", "reject", "select", "first",
                           "last", "reverse"})
LOOKUPS = frozenset({"get", "pop"})  # a data lookup by key, or the default unchanged
NUMERIC = frozenset({"length", "count", "int", "float", "abs", "round", "wordcount"})
_MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add"})

PASSES = 32  # real templates settle in a few passes; a longer chain is refused, not guessed
MAX_CONSTANTS = 1024  # literals one name may hold (real templates: 13); more is refused


class TooComplex(Exception):
    """The bindings did not settle within PASSES passes, or grew past MAX_CONSTANTS."""


def _join(*origins: Origin) -> Origin:
    return (any(t for t, _c in origins), frozenset().union(*(c for _t, c in origins)))


def influenced(o: Origin) -> bool:
    """Whether a value may hold anything the template's author wrote."""
    return o[0] or bool(o[1])


def _derived(o: Origin) -> Origin:
    """A value computed from another: a literal changed is a built string; data stays data."""
    return BUILT if influenced(o) else DATA


def _namespace_names(tree: Tree, macros: dict[str, nodes.Macro]) -> set[str]:
    """Names that may hold a namespace: set to ``namespace()``, assigned through, or a macro
    parameter given one."""
    out = {n.name for n in tree.find_all(nodes.NSRef)}
    for n in tree.find_all(nodes.Assign):
        if isinstance(n.node, nodes.Call) and isinstance(n.node.node, nodes.Name) and (
                n.node.node.name == "namespace"):
            out.update(t.name for t in [n.target, *n.target.find_all(nodes.Name)]
                       if isinstance(t, nodes.Name))
    calls = [(c, c.node.name) for c in tree.find_all(nodes.Call)
             if isinstance(c.node, nodes.Name) and c.node.name in macros]
    for _ in range(PASSES):
        before = len(out)
        for c, callee in calls:
            params = [a.name for a in macros[callee].args]
            out.update(p for p, a in zip(params, c.args, strict=False)
                       if isinstance(a, nodes.Name) and a.name in out)
            out.update(k.key for k in c.kwargs
                       if isinstance(k.value, nodes.Name) and k.value.name in out)
        if len(out) == before:
            return out
    raise TooComplex(f"bindings chained too deeply to analyse (no fixpoint in {PASSES} passes)")


class Origins:
    """Where every name, macro parameter and namespace attribute of a template may come from.

    A name is bound by ``set``, ``for``, macro parameters (call sites and defaults), namespace
    attributes by ``namespace(k=...)``, ``set ns.k`` and ``.append``: each binding adds to its
    origin (any binding counts, so a name that may also hold data is still checked), iterated
    to a fixpoint.
    """

    def __init__(self, tree: Tree) -> None:
        self.names: dict[str, Origin] = {}
        self.attrs: dict[str, Origin] = {}
        # origins of expressions (by node id: the tree outlives this), valid until a binding
        # changes; then recomputed, so the result is the same as without it
        self._memo: dict[int, Origin] = {}
        self._changed = False
        macros = {m.name: m for m in tree.find_all(nodes.Macro)}
        self.namespaces = _namespace_names(tree, macros)
        self.callables = set(macros) | ENV_GLOBALS
        bindings = tree.find_all((nodes.Assign, nodes.AssignBlock, nodes.For, nodes.Call,
                                  nodes.Macro))
        for _ in range(PASSES):
            self._changed = False
            for n in bindings:
                self._bind(n, macros)
            if not self._changed:
                return
        raise TooComplex(f"bindings chained too deeply to analyse (no fixpoint in {PASSES} passes)")

    def _add(self, table: dict[str, Origin], key: str, o: Origin) -> None:
        old = table.get(key)
        if old is not None and (old[0] or not o[0]) and o[1] <= old[1]:
            return  # adds nothing: no copy of what the name already holds
        new = _join(old or DATA, o)
        if len(new[1]) > MAX_CONSTANTS:
            raise TooComplex(f"{key!r} may hold more than {MAX_CONSTANTS} different strings "
                             "(too large to analyse)")
        table[key] = new
        self._memo.clear()
        self._changed = True

    def _target(self, target: nodes.Node, o: Origin) -> None:
        for t in [target, *target.find_all((nodes.Name, nodes.NSRef))]:
            if isinstance(t, nodes.Name):
                self._add(self.names, t.name, o)
            elif isinstance(t, nodes.NSRef):
                self._add(self.attrs, t.attr, o)

    def _bind(self, n: nodes.Node, macros: dict[str, nodes.Macro]) -> None:
        if isinstance(n, nodes.Assign):
            self._target(n.target, self.of(n.node))
        elif isinstance(n, nodes.AssignBlock):
            self._target(n.target, BUILT)
        elif isinstance(n, nodes.For):  # an element of the iterable: its constants, unchanged
            self._target(n.target, self.of(n.iter))
        elif isinstance(n, nodes.Macro):
            for arg, default in zip(reversed(n.args), reversed(n.defaults), strict=False):
                self._add(self.names, arg.name, self.of(default))
        elif isinstance(n, nodes.Call):
            callee = n.node
            values = [*n.args, *(k.value for k in n.kwargs)]
            if isinstance(callee, nodes.Name) and callee.name == "namespace":
                for k in n.kwargs:
                    self._add(self.attrs, k.key, self.of(k.value))
            elif isinstance(callee, nodes.Name) and callee.name in macros:
                params = [a.name for a in macros[callee.name].args]
                for name, value in zip(params, n.args, strict=False):
                    self._add(self.names, name, self.of(value))
                for k in n.kwargs:
                    self._add(self.names, k.key, self.of(k.value))
            elif isinstance(callee, nodes.Getattr) and callee.attr in _MUTATORS and values:
                # ``x.append(v)``: x's binding may now hold v
                root = callee.node
                o = _join(*(self.of(v) for v in values))
                if isinstance(root, nodes.Name):
                    self._add(self.names, root.name, o)
                elif isinstance(root, nodes.Getattr):
                    self._add(self.attrs, root.attr, o)

    def _member(self, node: nodes.Node, attr: str) -> Origin:
        if isinstance(node, nodes.Name) and node.name in self.namespaces:
            return self.attrs.get(attr, DATA)
        return DATA

    def of(self, e: nodes.Node | None) -> Origin:
        """The origin of an expression's value (``e`` a node of the analysed tree)."""
        if e is None:
            return DATA
        if (o := self._memo.get(id(e))) is not None:
            return o
        if isinstance(e, nodes.Const):
            o = (False, frozenset({e.value})) if isinstance(e.value, str) else DATA
        elif isinstance(e, nodes.TemplateData):
            o = BUILT
        elif isinstance(e, nodes.Name):
            if e.name in self.callables and e.name not in self.names:
                # a function or macro as a value: its text (``strftime_now|string``) is
                # Python's, with underscores to pick characters from
                o = BUILT
            else:
                o = self.names.get(e.name, DATA)
        elif isinstance(e, (nodes.List, nodes.Tuple, nodes.Dict, nodes.Pair)):
            o = _join(DATA, *(self.of(c) for c in e.iter_child_nodes()))
        elif isinstance(e, nodes.Getattr):  # a member: a namespace attribute, or part of it
            # (a method of a literal is only a value once called: the call is what builds)
            o = _join(self.of(e.node), self._member(e.node, e.attr))
        elif isinstance(e, nodes.Getitem):
            inner = self.of(e.node)
            if isinstance(e.arg, nodes.Const) and isinstance(e.arg.value, str):
                o = _join(inner, self._member(e.node, e.arg.value))
            else:  # a character, a slice, an element picked by a computation
                o = _derived(inner)
        elif isinstance(e, nodes.CondExpr):
            o = _join(self.of(e.expr1), self.of(e.expr2))
        elif isinstance(e, (nodes.And, nodes.Or)):
            o = _join(self.of(e.left), self.of(e.right))
        elif isinstance(e, (nodes.Compare, nodes.Test, nodes.Not, nodes.Sub, nodes.Neg,
                            nodes.Pos, nodes.Div, nodes.FloorDiv, nodes.Pow)):
            o = DATA  # a truth value or a number: never a name
        elif isinstance(e, nodes.Filter):  # (inline, as every case: one frame per level)
            inner = self.of(e.node)
            args = [*e.args, *(k.value for k in e.kwargs if k.key != "attribute")]
            if e.name in ("map", "select", "reject", "selectattr", "rejectattr"):
                args = args[1:]  # the filter/test/attribute name, checked on its own
            extra = _join(DATA, *(self.of(a) for a in args))
            if e.name in NUMERIC:
                o = DATA
            elif e.name in _PASS_THROUGH:
                o = _join(inner, extra)
            elif e.name in _KEEPS_INPUT:
                o = _derived(inner)
            else:
                o = _derived(_join(inner, extra))
        elif isinstance(e, nodes.Call) and isinstance(e.node, nodes.Getattr):
            recv = self.of(e.node.node)
            args = [*e.args, *(k.value for k in e.kwargs)]
            if e.node.attr in LOOKUPS:
                o = _join(_derived(recv), *(self.of(a) for a in args[1:]))
            elif e.node.attr in _KEEPS_INPUT:
                o = _derived(recv)
            else:
                o = _derived(_join(recv, *(self.of(a) for a in args)))
        elif isinstance(e, nodes.Call):
            # a macro's output is a built string (its body is template data and output)
            o = BUILT if isinstance(e.node, nodes.Name) and e.node.name not in (
                "range", "namespace", "strftime_now", "raise_exception") else DATA
        else:  # operators: ``~``, ``+``, ``*``, ``%``, ``-`` on a literal build a string
            o = _derived(_join(DATA, *(self.of(c) for c in e.iter_child_nodes())))
        self._memo[id(e)] = o
        return o
