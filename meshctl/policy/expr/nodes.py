"""The AST of a CEL expression: frozen nodes that know where in the source they are.

``start`` and ``end`` are offsets into the source (``source[n.start:n.end]`` is the node's
text, with its parentheses: a valid expression on its own), so problems can name a column and
``explain`` can show and re-run an operand. Chains of one precedence level
are one node (``Chain``, ``Logical``), and a run of ``!`` or ``-`` one ``Unary`` or none:
the tree's depth follows the brackets, not the length of the expression, so walking it never
recurses deeper than the parser allows brackets to nest.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal as Kind

LiteralKind = Kind["int", "uint", "double", "string", "bytes", "bool", "null"]


@dataclass(frozen=True, slots=True)
class Node:
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Literal(Node):
    kind: LiteralKind
    value: object


@dataclass(frozen=True, slots=True)
class Ident(Node):
    name: str  # with its leading dot, if it has one (``.a``)


@dataclass(frozen=True, slots=True)
class Select(Node):
    operand: Node
    field: str
    field_pos: int


@dataclass(frozen=True, slots=True)
class Has(Node):
    """``has(a.b)``: whether ``a`` has the field or key ``b`` (``has(has(a.b))`` is legal)."""

    arg: Select | Has


@dataclass(frozen=True, slots=True)
class Call(Node):
    """``f(args)`` (``target`` None) or ``target.f(args)``."""

    function: str
    target: Node | None
    args: tuple[Node, ...]
    name_pos: int


@dataclass(frozen=True, slots=True)
class Index(Node):
    operand: Node
    index: Node


@dataclass(frozen=True, slots=True)
class Unary(Node):
    """``!x`` or ``-x``; as in ``cel``, an even run of the same operator is no operator at all
    (``!!x`` is ``x``, whatever its type) and an odd run is one."""

    op: Kind["!", "-"]
    operand: Node


@dataclass(frozen=True, slots=True)
class Chain(Node):
    """``a op1 b op2 c``, left to right: arithmetic (one precedence level) or relations."""

    operands: tuple[Node, ...]
    ops: tuple[str, ...]
    op_pos: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Logical(Node):
    """``a && b && c`` or ``a || b || c``."""

    op: Kind["&&", "||"]
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Conditional(Node):
    cond: Node
    then: Node
    otherwise: Node


@dataclass(frozen=True, slots=True)
class ListExpr(Node):
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class MapExpr(Node):
    entries: tuple[tuple[Node, Node], ...]


@dataclass(frozen=True, slots=True)
class Struct(Node):
    """``Name{field: value}``: parsed, but the runtime has no message types to build."""

    name: str
    fields: tuple[tuple[str, Node], ...]


@dataclass(frozen=True, slots=True)
class Comprehension(Node):
    """``target.all(v, p)``, ``exists``, ``exists_one``/``existsOne``, ``filter``, ``map``
    (``args``: the predicate; for map the transform, or the filter then the transform)."""

    macro: str
    target: Node
    var: str
    var_pos: int
    args: tuple[Node, ...]
    name_pos: int


def children(node: Node) -> list[Node]:
    """The nodes directly under ``node``, in field order (a map's keys and values included)."""
    out: list[Node] = []
    for item_field in fields(node):
        value = getattr(node, item_field.name)
        if isinstance(value, Node):
            out.append(value)
        elif isinstance(value, tuple):
            for item in value:
                if isinstance(item, Node):
                    out.append(item)
                elif isinstance(item, tuple):
                    out.extend(part for part in item if isinstance(part, Node))
    return out
