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

from specbundle.scan.templates.allow import ALLOWED_METHODS, ENV_GLOBALS
from specbundle.scan.templates.walk import Tree

__all__ = [
    "BUILT", "DATA", "LOOKUPS", "MAX_CONSTANTS", "NUMERIC", "OBJECT", "OBJECT_TEXT", "PASSES",
    "Origin", "Origins", "TooComplex", "influenced",
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
# A Python object the template made (a generator from ``|selectattr``/``|map``/``|items``,
# ``dict_items``, a bound method): not data, and its text is Python's (``<generator object
# select_or_reject at 0x..>``), with underscores to pick characters from. Marked by a constant
# no literal is checked for (its elements are data: the mark only makes the object's *text*,
# once converted, a built string).
OBJECT_TEXT = "\x00<python object>"
OBJECT: Origin = (False, frozenset({OBJECT_TEXT}))
# filters and methods whose result is such an object (an iterator, a view), not a list or text
_OBJECT_FILTERS = frozenset({"map", "select", "reject", "selectattr", "rejectattr", "unique",
                             "items", "groupby", "batch", "slice", "reverse", "attr"})
_OBJECT_METHODS = frozenset({"items", "keys", "values"})
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
    """Names that may hold a namespace: set to ``namespace()`` or to another such name,
    assigned through, or a macro parameter given one by name. (A namespace reached any other
    way, in a list or through a filter, carries everything it holds: :class:`Origins`.)"""
    out = {n.name for n in tree.find_all(nodes.NSRef)}
    for n in tree.find_all(nodes.Assign):
        if isinstance(n.node, nodes.Call) and isinstance(n.node.node, nodes.Name) and (
                n.node.node.name == "namespace"):
            out.update(t.name for t in [n.target, *n.target.find_all(nodes.Name)]
                       if isinstance(t, nodes.Name))
    calls = [(c, c.node.name) for c in tree.find_all(nodes.Call)
             if isinstance(c.node, nodes.Name) and c.node.name in macros]
    aliases = [n for n in tree.find_all(nodes.Assign)
               if isinstance(n.node, nodes.Name) and isinstance(n.target, nodes.Name)]
    for _ in range(PASSES):
        before = len(out)
        out.update(n.target.name for n in aliases  # ``set n2 = ns``
                   if isinstance(n.node, nodes.Name) and n.node.name in out
                   and isinstance(n.target, nodes.Name))
        for c, callee in calls:
            params = [a.name for a in macros[callee].args]
            out.update(p for p, a in zip(params, c.args, strict=False)
                       if isinstance(a, nodes.Name) and a.name in out)
            out.update(k.key for k in c.kwargs
                       if isinstance(k.value, nodes.Name) and k.value.name in out)
        if len(out) == before:
            return out
    raise TooComplex(f"bindings chained too deeply to analyse (no fixpoint in {PASSES} passes)")


# what passes a container (or a part of one) on unchanged: an alias, not a new value
_ALIASING_FILTERS = _PASS_THROUGH | {"list", "items"}


def _roots(e: nodes.Node, memo: dict[int, frozenset[str]]) -> frozenset[str]:
    """The names whose containers an expression's value may be (or be part of)."""
    if (r := memo.get(id(e))) is not None:
        return r
    parts: list[nodes.Node] = []
    if isinstance(e, nodes.Name):
        r = frozenset({e.name})
    elif isinstance(e, (nodes.Getattr, nodes.Getitem)):
        parts = [e.node]
    elif isinstance(e, (nodes.List, nodes.Tuple, nodes.Dict, nodes.Pair, nodes.CondExpr,
                        nodes.And, nodes.Or)):
        parts = list(e.iter_child_nodes())
    elif isinstance(e, nodes.Filter) and e.name in _ALIASING_FILTERS and e.node is not None:
        parts = [e.node, *e.args, *(k.value for k in e.kwargs)]
    elif isinstance(e, nodes.Call) and isinstance(e.node, nodes.Getattr):
        parts = [e.node.node, *e.args]  # ``.pop()``, ``.get(k, default)``, ``.items()``
    elif isinstance(e, nodes.Call) and isinstance(e.node, nodes.Name) and (
            e.node.name == "namespace"):
        parts = [*e.args, *(k.value for k in e.kwargs)]
    r = frozenset().union(*(_roots(p, memo) for p in parts)) if parts else (r or frozenset())
    memo[id(e)] = r
    return r


def _mutated(tree: Tree, macros: dict[str, nodes.Macro]) -> set[str]:
    """Names that may refer to a container something is appended to: the receivers' names and
    every name bound to, or from, a part of one (``set b = a``, ``for l in a``, a macro
    parameter, ``ns.k = a``, ``a.append(b)``), as classes of a union-find."""
    parent: dict[str, str] = {}
    seen: set[str] = set()

    def find(x: str) -> str:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while x != root:
            parent[x], x = root, parent.get(x, x)
        return root

    def union(names: frozenset[str] | set[str]) -> None:
        seen.update(names)
        it = iter(names)
        if (first := next(it, None)) is not None:
            for other in it:
                parent[find(other)] = find(first)

    memo: dict[int, frozenset[str]] = {}
    receivers: set[str] = set()
    for n in tree.find_all((nodes.Assign, nodes.For, nodes.Macro, nodes.Call)):
        if isinstance(n, (nodes.Assign, nodes.For)):
            targets = {t.name for t in [n.target, *n.target.find_all((nodes.Name, nodes.NSRef))]
                       if isinstance(t, (nodes.Name, nodes.NSRef))}
            value = n.node if isinstance(n, nodes.Assign) else n.iter
            union(targets | _roots(value, memo))
        elif isinstance(n, nodes.Macro):
            for arg, default in zip(reversed(n.args), reversed(n.defaults), strict=False):
                union({arg.name} | _roots(default, memo))
        elif not isinstance(n, nodes.Call):
            continue
        elif isinstance(n.node, nodes.Name) and n.node.name in macros:
            params = [a.name for a in macros[n.node.name].args]
            for name, value in zip(params, n.args, strict=False):
                union({name} | _roots(value, memo))
            for k in n.kwargs:
                union({k.key} | _roots(k.value, memo))
        elif isinstance(n.node, nodes.Getattr) and n.node.attr in _MUTATORS:
            into = _roots(n.node.node, memo)
            receivers.update(into)
            union(into.union(*(_roots(v, memo) for v in [*n.args, *(k.value for k in n.kwargs)])))
    tainted = {find(r) for r in receivers}
    return {x for x in seen | receivers if find(x) in tainted}


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
        # field-insensitive tables (what aliasing cannot hide): every value appended to any
        # container (read back through any name: ``set b = a``, ``a[0].append``, a loop
        # variable, a macro parameter), every value stored in any namespace (read back whole:
        # an alias in a list, ``ns|string``, ``ns[key]``), every element a loop iterates
        # (``loop.previtem``/``nextitem``)
        self._globals: dict[str, Origin] = {"heap": DATA, "ns_all": DATA, "ns_dict": DATA,
                                            "loop": DATA}
        # origins of expressions (by node id: the tree outlives this), valid until a binding
        # changes; then recomputed, so the result is the same as without it
        self._memo: dict[int, Origin] = {}
        self._changed = False
        macros = {m.name: m for m in tree.find_all(nodes.Macro)}
        self.macros = set(macros)
        self.namespaces = _namespace_names(tree, macros)
        self.mutated = _mutated(tree, macros)
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
        if table is self.attrs:
            self._add(self._globals, "ns_all", o)
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

    def _value(self, e: nodes.Node) -> Origin:
        """What a binding receives: a namespace passed by name is bound as the namespace it
        is (the target is one too, :func:`_namespace_names`), not as everything in it."""
        if isinstance(e, nodes.Name) and e.name in self.namespaces:
            return self._name(e.name)
        return self.of(e)

    def _name(self, name: str) -> Origin:
        """A name's own bindings, and what was appended to any container it may refer to."""
        o = self.names.get(name, DATA)
        return _join(o, self._globals["heap"]) if name in self.mutated else o

    def _bind(self, n: nodes.Node, macros: dict[str, nodes.Macro]) -> None:
        if isinstance(n, nodes.Assign):
            self._target(n.target, self._value(n.node))
        elif isinstance(n, nodes.AssignBlock):
            self._target(n.target, BUILT)
        elif isinstance(n, nodes.For):  # an element of the iterable: its constants, unchanged
            o = self.of(n.iter)
            self._target(n.target, o)
            self._add(self._globals, "loop", o)  # loop.previtem, loop.nextitem
        elif isinstance(n, nodes.Macro):
            for arg, default in zip(reversed(n.args), reversed(n.defaults), strict=False):
                self._add(self.names, arg.name, self.of(default))
        elif isinstance(n, nodes.Call):
            callee = n.node
            values = [*n.args, *(k.value for k in n.kwargs)]
            if isinstance(callee, nodes.Name) and callee.name in macros:
                # (checked first: a macro may be named like a global, ``namespace`` included)
                params = [a.name for a in macros[callee.name].args]
                for name, value in zip(params, n.args, strict=False):
                    self._add(self.names, name, self._value(value))
                for k in n.kwargs:
                    self._add(self.names, k.key, self._value(k.value))
            elif isinstance(callee, nodes.Name) and callee.name == "namespace":
                for k in n.kwargs:
                    self._add(self.attrs, k.key, self.of(k.value))
                for a in n.args:  # ``namespace({"k": v})``: stored under keys not written here
                    self._add(self._globals, "ns_dict", self.of(a))
                    self._add(self._globals, "ns_all", self.of(a))
            elif isinstance(callee, nodes.Getattr) and callee.attr in _MUTATORS and values:
                # ``x.append(v)``: whatever x is (a name, an alias of one, an element of a
                # list, a parameter), any container may now hold v
                self._add(self._globals, "heap", _join(*(self.of(v) for v in values)))

    def _member(self, node: nodes.Node, attr: str) -> Origin | None:
        """A member read straight from a namespace (or ``loop``) by name; None otherwise."""
        if not isinstance(node, nodes.Name):
            return None
        if node.name in self.namespaces:
            return _join(self._name(node.name), self.attrs.get(attr, DATA),
                         self._globals["ns_dict"])
        if node.name == "loop" and node.name not in self.names:
            # the element before or after: any loop's element; the rest are numbers/flags
            return self._globals["loop"] if attr in ("previtem", "nextitem") else DATA
        return None

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
                o = self._name(e.name)
                if e.name in self.namespaces:  # a namespace as a whole: all it holds
                    o = _join(o, self._globals["ns_all"])
                elif e.name == "loop" and e.name not in self.names:
                    o = _join(o, self._globals["loop"])
        elif isinstance(e, (nodes.List, nodes.Tuple, nodes.Dict, nodes.Pair)):
            o = _join(DATA, *(self.of(c) for c in e.iter_child_nodes()))
        elif isinstance(e, nodes.Getattr):  # a member: a namespace attribute, or part of it
            # (a method of a literal is only a value once called: the call is what builds)
            m = self._member(e.node, e.attr)
            o = m if m is not None else self.of(e.node)
            if m is None and e.attr in ALLOWED_METHODS:  # (or a bound method, uncalled)
                o = _join(o, OBJECT)
        elif isinstance(e, nodes.Getitem):
            if isinstance(e.arg, nodes.Const) and isinstance(e.arg.value, str):
                m = self._member(e.node, e.arg.value)
                o = m if m is not None else self.of(e.node)
            else:  # a character, a slice, an element picked by a computation
                o = _derived(self.of(e.node))
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
            if e.name in _OBJECT_FILTERS:
                o = _join(o, OBJECT)
        elif isinstance(e, nodes.Call) and isinstance(e.node, nodes.Getattr):
            recv = self.of(e.node.node)
            args = [*e.args, *(k.value for k in e.kwargs)]
            if e.node.attr in LOOKUPS:
                o = _join(_derived(recv), *(self.of(a) for a in args[1:]))
            elif e.node.attr in _KEEPS_INPUT:
                o = _derived(recv)
            else:
                o = _derived(_join(recv, *(self.of(a) for a in args)))
            if e.node.attr in _OBJECT_METHODS:
                o = _join(o, OBJECT)
        elif isinstance(e, nodes.Call):
            # a macro's output is a built string (its body is template data and output)
            # (a macro first: it may be named like a global); ``strftime_now``'s result is
            # its format string, changed (``strftime_now("_x")`` is ``"_x"``)
            callee = e.node.name if isinstance(e.node, nodes.Name) else None
            if callee in self.macros:
                o = BUILT
            elif callee == "strftime_now":
                o = _derived(_join(DATA, *(self.of(a) for a in e.args)))
            else:
                o = BUILT if callee is not None and callee not in (
                    "range", "namespace", "raise_exception") else DATA
        else:  # operators: ``~``, ``+``, ``*``, ``%``, ``-`` on a literal build a string
            o = _derived(_join(DATA, *(self.of(c) for c in e.iter_child_nodes())))
        self._memo[id(e)] = o
        return o
