"""One linear walk of a parsed template, shared by every static analysis of it.

Jinja's ``Node.find_all`` is a generator per tree level: each node it finds is handed up
through every level above it, so one call costs nodes × depth, and the analysis makes dozens
of passes over the tree (up to 32 per fixpoint). A hostile template nests deep to multiply
that. :class:`Tree` walks the tree once, iteratively, in ``find_all``'s order; a subtree is a
slice of that walk, and the nodes of each type are listed once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from jinja2 import nodes

__all__ = ["Tree"]

N = TypeVar("N", bound=nodes.Node)


class Tree:
    """Every node under a root, in ``find_all``'s order (depth first, children in order)."""

    def __init__(self, root: nodes.Node) -> None:
        self.root = root
        self.order: list[nodes.Node] = []
        self._end: list[int] = []  # per position: one past the position of its last descendant
        self._pos: dict[int, int] = {}  # id(node) -> position
        self._by_type: dict[type | tuple[type, ...], list[nodes.Node]] = {}
        stack: list[tuple[int, Iterator[nodes.Node]]] = [(-1, root.iter_child_nodes())]
        while stack:
            at, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                if at >= 0:
                    self._end[at] = len(self.order)
                continue
            self._pos[id(child)] = len(self.order)
            self.order.append(child)
            self._end.append(0)
            stack.append((len(self.order) - 1, child.iter_child_nodes()))

    def find_all(self, kind: type[N] | tuple[type[N], ...]) -> list[N]:
        """``root.find_all(kind)``, listed once per ``kind``."""
        if kind not in self._by_type:
            self._by_type[kind] = [n for n in self.order if isinstance(n, kind)]
        return self._by_type[kind]  # type: ignore[return-value]

    def span(self, node: nodes.Node) -> tuple[int, int]:
        """The positions of ``node``'s descendants: ``order[start:end]``."""
        if node is self.root:
            return 0, len(self.order)
        at = self._pos[id(node)]
        return at + 1, self._end[at]

    def within(self, node: nodes.Node, kind: type[N] | tuple[type[N], ...]) -> list[N]:
        """``node.find_all(kind)`` for a node of this tree."""
        if node is not self.root and id(node) not in self._pos:
            return list(node.find_all(kind))
        start, end = self.span(node)
        return [n for n in self.order[start:end] if isinstance(n, kind)]
