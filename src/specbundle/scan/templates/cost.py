"""What a chat template may cost to run or to analyse, bounded before anything runs it.

The trial render sees only what its sample conversations reach, and an engine without
Jinja's sandbox (llama.cpp's) has no range limit at all, so costs a template can run up are
refused statically: constant ranges and repetitions past the sandbox's own range limit (also
nested, also through macros), a value assigned from two copies of itself, a macro recursing
without descending into its arguments. The analysis itself is bounded too
(:func:`too_large`): Jinja's compiler copies every name of a scope at every branch, and
Python's compiler every enclosing name into every macro, so a template with thousands of
both is refused as too large to analyse rather than compiled, twice, for a minute.
"""

from __future__ import annotations

from collections.abc import Iterator

from jinja2 import nodes

from specbundle.scan.findings import Severity
from specbundle.scan.templates.allow import Problem
from specbundle.scan.templates.flow import NUMERIC
from specbundle.scan.templates.walk import Tree

__all__ = [
    "AMPLIFY_LIMIT", "COMPILE_LIMIT", "MAX_MACRO_DEPTH", "RANGE_LIMIT", "REPEAT_LIMIT",
    "const_ints", "int_value", "loop_size", "multiplied_into_itself", "recursion",
    "self_references", "too_large",
]

RANGE_LIMIT = 100_000
REPEAT_LIMIT = 10_000
# what one character or line of the conversation may become: ``|replace(' ', s)``,
# ``|indent(w)``, ``|join(s)``, ``text * k`` multiply a message by about ``len(s)``, ``w``,
# ``k`` with no limit but the message's size (real templates: 18), so a 1 MB message cannot be
# made a gigabyte; the sample conversations are too short for the trial render to see it
AMPLIFY_LIMIT = 256
# names × (branches, loops, macros): real templates reach ~8 000; at this limit compiling takes
# ~0.4 s, and the cost grows with the product
COMPILE_LIMIT = 1_000_000
MAX_MACRO_DEPTH = 8  # macros defined inside macros (real templates: 1)


def int_value(e: nodes.Node, ints: dict[str, int | None],
              memo: dict[int, int | None] | None = None) -> int | None:
    """The value of an integer expression made of constants (and names set only to them).

    ``memo`` (by node id) may be given once ``ints`` no longer changes: a chain of ``*``
    nested a thousand deep is then valued once per node, not once per enclosing node.
    """
    if memo is not None and id(e) in memo:
        return memo[id(e)]
    out: int | None = None
    if isinstance(e, nodes.Const):
        if isinstance(e.value, (int, float)) and not isinstance(e.value, bool):
            out = int(min(abs(e.value), 1 << 62))
        elif isinstance(e.value, str):
            out = len(e.value)
    elif isinstance(e, nodes.Name):
        out = ints.get(e.name)
    elif isinstance(e, nodes.Getattr) and isinstance(e.node, nodes.Name):
        out = ints.get("." + e.attr)  # a namespace attribute: the largest any is set to
    elif isinstance(e, nodes.Filter) and e.name in ("int", "float") and e.node is not None:
        inner = e.node  # ``'9999'|int``: the number, not the string's length
        if isinstance(inner, nodes.Const) and isinstance(inner.value, str):
            try:
                out = int(min(abs(float(inner.value)), 1 << 62))
            except (ValueError, OverflowError):
                out = 0
        else:
            out = int_value(inner, ints, memo)
    elif isinstance(e, (nodes.Mul, nodes.Add, nodes.Sub, nodes.Concat)):
        parts = [int_value(c, ints, memo) for c in e.iter_child_nodes()]
        vals = [v for v in parts if v is not None]
        if len(vals) == len(parts) and isinstance(e, nodes.Mul):
            out = 1
            for v in vals:
                out = min(out * v, 1 << 62)
        elif len(vals) == len(parts):
            out = min(sum(vals), 1 << 62)
    elif isinstance(e, nodes.Neg):
        out = int_value(e.node, ints, memo)
    if memo is not None:
        memo[id(e)] = out
    return out


def const_ints(tree: Tree) -> dict[str, int | None]:
    """Names set to a constant expression: the largest such value (a name that may also hold
    data is taken at its constant: the data may be small)."""
    ints: dict[str, int | None] = {}
    for _ in range(4):  # growth through ``n = n * 2`` is cut short, not waited for
        before = dict(ints)
        for n in tree.find_all(nodes.Assign):
            if isinstance(n.target, nodes.Name) and (
                    value := int_value(n.node, ints)) is not None:
                ints[n.target.name] = max(ints.get(n.target.name) or 0, value)
            elif isinstance(n.target, nodes.NSRef) and not self_references(n) and (
                    value := int_value(n.node, ints)) is not None:  # ``set ns.k = 9999``
                # (not ``ns.k = ns.k * 9``: multiplied_into_itself's case)
                ints["." + n.target.attr] = max(ints.get("." + n.target.attr) or 0, value)
        for c in tree.find_all(nodes.Call):  # ``namespace(k=9999)``
            if isinstance(c.node, nodes.Name) and c.node.name == "namespace":
                for k in c.kwargs:
                    if (value := int_value(k.value, ints)) is not None:
                        ints["." + k.key] = max(ints.get("." + k.key) or 0, value)
        if ints == before:
            break
    return ints


def _copies(e: nodes.Node, target: nodes.Node) -> int:
    """How many copies of a target's current value an expression's result may hold."""
    if isinstance(target, nodes.Name) and isinstance(e, nodes.Name):
        return int(e.name == target.name)
    if isinstance(target, nodes.NSRef) and isinstance(e, nodes.Getattr) and (
            e.attr == target.attr):
        return 1
    if isinstance(e, nodes.CondExpr):  # one branch or the other, never both
        return max(_copies(e.expr1, target),
                   _copies(e.expr2, target) if e.expr2 is not None else 0)
    if isinstance(e, (nodes.Test, nodes.Compare, nodes.Not)) or (
            isinstance(e, nodes.Filter) and e.name in NUMERIC):
        return 0
    if isinstance(e, (nodes.And, nodes.Or)):
        return max(_copies(e.left, target), _copies(e.right, target))
    return sum(_copies(c, target) for c in e.iter_child_nodes())


def self_references(n: nodes.Assign) -> int:
    """How many copies of its own target an assignment's value holds (``x = x ~ x``: 2)."""
    return _copies(n.node, n.target) if isinstance(n.target, (nodes.Name, nodes.NSRef)) else 0


def multiplied_into_itself(n: nodes.Assign, tree: Tree) -> bool:
    """Whether an assignment multiplies its own target (``x = x * k``, ``ns.x = 2 * (ns.x +
    1)``): it grows geometrically. One sweep over the value: the references to the target
    that lie inside a product."""
    t = n.target
    if not isinstance(t, (nodes.Name, nodes.NSRef)):
        return False
    start, end = tree.span(n.node)
    start -= 1  # the value itself
    depth = [0] * (end - start + 1)  # products open at each position (difference array)
    inside = 0
    for q in range(start, end):
        e = tree.order[q]
        if isinstance(e, nodes.Mul):
            depth[0 if q == start else q - start] += 1
            depth[tree.span(e)[1] - start] -= 1
        inside += depth[q - start]
        if inside and ((isinstance(t, nodes.Name) and isinstance(e, nodes.Name)
                        and e.name == t.name)
                       or (isinstance(t, nodes.NSRef) and isinstance(e, nodes.Getattr)
                           and e.attr == t.attr)):
            return True
    return False


def _range_size(n: nodes.For, ints: dict[str, int | None]) -> int:
    """Iterations of ``for x in range(<constants>)`` (1 for a loop over data)."""
    it = n.iter
    if isinstance(it, nodes.Call) and isinstance(it.node, nodes.Name) and (
            it.node.name == "range") and it.args:
        bounds = [int_value(a, ints) for a in it.args[:2]]
        if all(b is not None for b in bounds):
            return max(b for b in bounds if b is not None)
    return 1


def loop_size(n: nodes.Node, macros: dict[str, nodes.Macro], ints: dict[str, int | None],
              memo: dict[str, int]) -> int:
    """Iterations of a constant range loop (or of a macro, or the template) times those of the
    constant range loops inside it, and inside the macros it calls (each macro once)."""
    inner = [loop_size(f, macros, ints, memo) for f in n.iter_child_nodes()]
    if isinstance(n, nodes.Call) and isinstance(n.node, nodes.Name) and (
            n.node.name in macros):
        if n.node.name not in memo:
            memo[n.node.name] = 1  # a recursive call counts once
            memo[n.node.name] = loop_size(macros[n.node.name], macros, ints, memo)
        inner.append(memo[n.node.name])
    own = _range_size(n, ints) if isinstance(n, nodes.For) else 1
    return min(own * max(inner, default=1), 1 << 62)


_DESCENDS = frozenset({"items", "dictsort", "first", "last", "selectattr", "rejectattr",
                       "reject", "select", "map", "list", "sort", "unique", "get", "values",
                       "keys"})


def _descends(e: nodes.Node, roots: set[str], parts: set[str]) -> bool:
    """Whether an expression holds a part (a member, an element) of a root name: one of
    ``roots``, or a name in ``parts``, already bound to such a part."""
    if isinstance(e, nodes.Name):
        return e.name in parts
    if isinstance(e, (nodes.Getattr, nodes.Getitem)) and not isinstance(
            getattr(e, "arg", None), nodes.Slice):
        return _reaches(e.node, roots, parts)
    if isinstance(e, nodes.Filter) and e.name in _DESCENDS and e.node is not None:
        return _reaches(e.node, roots, parts)
    if isinstance(e, nodes.Call) and isinstance(e.node, nodes.Getattr) and (
            e.node.attr in _DESCENDS):
        return _reaches(e.node.node, roots, parts)
    if isinstance(e, (nodes.List, nodes.Tuple, nodes.Dict, nodes.Pair, nodes.CondExpr,
                      nodes.And, nodes.Or)):
        return any(_descends(c, roots, parts) for c in e.iter_child_nodes())
    return False


def _reaches(e: nodes.Node, roots: set[str], parts: set[str]) -> bool:
    """Whether an expression is a root name or holds a part of one."""
    return (isinstance(e, nodes.Name) and e.name in roots) or _descends(e, roots, parts)


def _parts(m: nodes.Macro, tree: Tree) -> tuple[set[str], set[str]]:
    """A macro's parameters, and the names bound inside it to parts of them."""
    params = {a.name for a in m.args}
    parts: set[str] = set()
    bindings: list[nodes.For | nodes.Assign] = tree.within(m, (nodes.For, nodes.Assign))
    for _ in range(4):
        before = len(parts)
        for n in bindings:
            value = n.iter if isinstance(n, nodes.For) else n.node
            if (_reaches if isinstance(n, nodes.For) else _descends)(value, params, parts):
                parts.update(t.name for t in [n.target, *n.target.find_all(nodes.Name)]
                             if isinstance(t, nodes.Name))
        if len(parts) == before:
            break
    return params, parts


def recursion(tree: Tree) -> Iterator[Problem]:
    """Macros calling themselves, or each other in a cycle (``a`` -> ``b`` -> ``a``), must
    pass on a part of what they were given somewhere along the cycle (``f(spec.items)``, an
    element of a loop over a parameter): data is finite, so that recursion ends. A cycle whose
    every call passes its arguments unchanged, or grown (``f(n + 1)``, ``f(n ~ "a")``), never
    ends: Python stops it at its recursion limit, llama.cpp's engine runs out of stack and the
    server dies (SIGSEGV). So the calls that do not descend form a graph that must have no
    cycle (real templates recurse mutually over data: functionary's
    get_array_typescript <-> get_parameter_typescript)."""
    macros = {m.name: m for m in tree.find_all(nodes.Macro)}
    still: dict[str, set[str]] = {}  # macro -> macros it calls without descending
    for name, m in macros.items():
        calls = [c for c in tree.within(m, nodes.Call)
                 if isinstance(c.node, nodes.Name) and c.node.name in macros]
        if not calls:
            continue
        params, parts = _parts(m, tree)
        still[name] = {c.node.name for c in calls if isinstance(c.node, nodes.Name) and not any(
            _descends(a, params, parts) for a in [*c.args, *(k.value for k in c.kwargs)])}
    # a cycle in ``still``: iterative depth-first search, each macro once (linear)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(still):
        if root in state:
            continue
        stack = [(root, iter(sorted(still.get(root, ()))))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                cycle = [n for n, _ in stack][[n for n, _ in stack].index(nxt):]
                how = "calls itself without passing on a part of its arguments" if len(
                    cycle) == 1 else ("and " + ", ".join(repr(c) for c in cycle[1:])
                                      + " call each other without passing on a part of "
                                      "their arguments")
                yield ("template.resource", Severity.HIGH,
                       f"macro {cycle[0]!r} {how} (endless recursion)")
                return
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(still.get(nxt, ())))))


def _macro_depth(tree: Tree) -> int:
    """How deep macro definitions nest inside macro definitions (1: none inside another)."""
    depth, open_ends = 0, list[int]()  # the end positions of the enclosing macros
    for m in tree.find_all(nodes.Macro):
        start, end = tree.span(m)
        while open_ends and open_ends[-1] < start:
            open_ends.pop()
        open_ends.append(end)
        depth = max(depth, len(open_ends))
    return depth


def too_large(tree: Tree) -> str | None:
    """Why a template is too large to analyse (and to compile for the trial render), if it is.

    Every other step of the analysis is linear in the template; these two are not: the
    macro-recursion check reads each macro's whole body, nested macros included, and the
    compilers' costs grow with names × branches (Jinja copies a scope's names at each ``if``
    and conditional expression; Python gives the function of each macro and of each filtered
    loop its enclosing names). Every loop is counted: a plain one costs little, but real
    templates stay ~100× under the limit all the same.
    """
    if (depth := _macro_depth(tree)) > MAX_MACRO_DEPTH:
        return f"macros defined {depth} deep inside macros (too deep to analyse)"
    named: list[nodes.Name | nodes.NSRef | nodes.Macro] = tree.find_all(
        (nodes.Name, nodes.NSRef, nodes.Macro))
    names = {n.name for n in named}
    branches = len(tree.find_all((nodes.If, nodes.CondExpr, nodes.For, nodes.Macro)))
    if len(names) * branches > COMPILE_LIMIT:
        return (f"{len(names)} names and {branches} branches, loops and macros (too large to "
                f"analyse: compiling costs their product, limit {COMPILE_LIMIT})")
    return None
