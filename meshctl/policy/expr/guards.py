"""Map lookups that nothing guards, and the presence test that would guard each.

A lookup by a constant key (``job.labels.team``, ``job.labels["data-class"]``) fails at run
time for a value whose map lacks the key, and the engine then fails closed. It is guarded when
its failure cannot decide the result:

- an operand of ``&&`` is guarded by another operand that is true only when the key is there
  (``has(m.k) && m.k == "v"``, in either order: CEL's ``&&`` absorbs an error when another
  operand is false);
- an operand of ``||`` by another that is false only when the key is there
  (``!has(m.k) || m.k == "v"``);
- the branches of ``c ? a : b``: ``a`` by what ``c`` being true proves, ``b`` by what it
  being false proves.

A presence test is ``has(m.k)`` or ``"k" in m``; ``!``, ``&&`` and ``||`` combine what they
prove. Maps are told apart by their text (``job.labels``), so a guard must name the map as
the lookup does. Lookups by a key computed at run time (``mesh.pools[p]``) are not judged.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final
from typing import Literal as Kind

from meshctl.policy.expr.lex import tokenize
from meshctl.policy.expr.nodes import (
    Chain,
    Comprehension,
    Conditional,
    Has,
    Index,
    Literal,
    Logical,
    Node,
    Select,
    Unary,
    children,
)
from meshctl.policy.expr.parse import KEYWORDS, RESERVED

_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES: Final = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}

Key = tuple[str, str]  # (the map's text without spaces, the key)


def is_field_name(key: str) -> bool:
    """Whether ``key`` may follow a dot (``m.key``, ``has(m.key)``): a CEL identifier that is
    neither a keyword nor a reserved word."""
    return _NAME_RE.fullmatch(key) is not None and key not in KEYWORDS | RESERVED


def string_literal(text: str) -> str:
    """``text`` as a double-quoted CEL string literal that reads back as ``text``."""
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif not char.isprintable():
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def presence_test(operand: str, key: str) -> str:
    """The CEL that asks whether the map ``operand`` has ``key``: ``has(operand.key)`` when the
    key is a field name, else ``"key" in operand`` (``has(m.data-class)`` is a syntax error)."""
    if is_field_name(key):
        return f"has({operand}.{key})"
    return f"{string_literal(key)} in {operand}"


def key_of(node: Select | Index) -> str | None:
    """The constant key a lookup reads (``m.k``, ``m["k"]``); None for a computed one."""
    if isinstance(node, Select):
        return node.field
    index = node.index
    if isinstance(index, Literal) and index.kind == "string":
        return str(index.value)
    return None


@dataclass(frozen=True, slots=True)
class Unguarded:
    """A lookup that fails wherever its map lacks the key, and how to guard it."""

    pos: int  # where the (first) lookup starts in the source
    lookup: str  # its text: job.labels["data-class"]
    operand: str  # the map's text: job.labels
    key: str
    guard: str  # the presence test: "data-class" in job.labels
    # the smallest boolean operand that holds every such lookup, guarded
    # (``guard && operand``), and the span of the source it replaces; None where the lookup
    # is the value a ``map`` macro gives, which no ``&&`` can guard
    guarded: str | None
    span: tuple[int, int]


# Where a lookup sits: the operands around it, outermost first, each with its kind: "operand"
# (a boolean: the whole expression, an operand of && or ||, the condition of a ?:),
# "predicate" (a macro's boolean: a guard outside it could not name the macro's variable) or
# "value" (what a map macro gives: any type, so no && can guard it)
_Kind = Kind["operand", "predicate", "value"]
_Around = tuple[tuple[Node, _Kind], ...]


def unguarded(
    source: str, tree: Node, lookups: Iterable[Select | Index], exempt: Collection[str] = ()
) -> list[Unguarded]:
    """The lookups among ``lookups`` (the map lookups of ``tree``, as the checker found them)
    that no presence test guards, in source order; the lookups of one map and key once, with
    one guarded form for them all where one exists. ``exempt``: maps (by text) whose keys
    are known to be there."""
    wanted = {id(node): node for node in lookups if key_of(node) is not None}
    found: dict[Key, list[tuple[Select | Index, _Around]]] = {}
    stack: list[tuple[Node, frozenset[Key], _Around]] = [(tree, frozenset(), ((tree, "operand"),))]
    while stack:
        node, present, around = stack.pop()
        lookup = wanted.get(id(node))
        if lookup is not None:
            key = (_text(source, lookup.operand), str(key_of(lookup)))
            if key not in present and key[0] not in exempt:
                found.setdefault(key, []).append((lookup, around))
        stack.extend(_below(source, node, present, around))
    out = [u for places in found.values() for u in _reports(source, places)]
    return sorted(out, key=lambda u: u.pos)


def _below(
    source: str, node: Node, present: frozenset[Key], around: _Around
) -> list[tuple[Node, frozenset[Key], _Around]]:
    """The children of ``node``, each with the keys known present there and where it sits."""
    if isinstance(node, Logical):
        proofs = [_proves(source, o, node.op == "&&") for o in node.operands]
        counts = Counter(key for proof in proofs for key in proof)
        # what the other operands prove: a key proved by this one alone does not count
        others = [{k for k, n in counts.items() if n > (k in proof)} for proof in proofs]
        return [
            (o, present | known, (*around, (o, "operand")))
            for o, known in zip(node.operands, others, strict=True)
        ]
    if isinstance(node, Conditional):
        # the branches may give any type: the operand to guard is the one around the ?:
        return [
            (node.cond, present, (*around, (node.cond, "operand"))),
            (node.then, present | _proves(source, node.cond, True), around),
            (node.otherwise, present | _proves(source, node.cond, False), around),
        ]
    if isinstance(node, Comprehension):
        kinds: list[_Kind] = ["predicate"] * len(node.args)
        if node.macro == "map":
            kinds[-1] = "value"
        return [
            (node.target, present, around),
            *((a, present, (*around, (a, k))) for a, k in zip(node.args, kinds, strict=True)),
        ]
    return [(child, present, around) for child in children(node)]


def _reports(source: str, places: list[tuple[Select | Index, _Around]]) -> list[Unguarded]:
    """One report for the lookups of one map and key, guarded at the innermost operand that
    holds them all; one report each where that operand lies outside a macro one of them is
    in (a guard there could not name the macro's variable)."""
    common = places[0][1]
    for _, around in places[1:]:
        same = 0
        while same < min(len(common), len(around)) and common[same][0] is around[same][0]:
            same += 1
        common = common[:same]
    left = [kind for _, around in places for _, kind in around[len(common) :]]
    if len(places) > 1 and any(kind != "operand" for kind in left):
        return [u for place in places for u in _reports(source, [place])]
    first = min((lookup for lookup, _ in places), key=lambda n: n.start)
    return [_unguarded(source, first, *common[-1])]


def _proves(source: str, node: Node, value: bool) -> frozenset[Key]:
    """The keys that ``node`` giving ``value`` proves present."""
    if isinstance(node, Unary) and node.op == "!":
        return _proves(source, node.operand, not value)
    if isinstance(node, Logical):
        proofs = [_proves(source, o, value) for o in node.operands]
        if (node.op == "&&") == value:  # every operand gave value
            return frozenset[Key]().union(*proofs)
        return proofs[0].intersection(*proofs[1:])  # some operand gave value: what all prove
    if not value:
        return frozenset()
    if isinstance(node, Has) and isinstance(node.arg, Select):
        return frozenset({(_text(source, node.arg.operand), node.arg.field)})
    if isinstance(node, Chain) and node.ops == ("in",):
        key, container = node.operands
        if isinstance(key, Literal) and key.kind == "string":
            return frozenset({(_text(source, container), str(key.value))})
    return frozenset()


def _text(source: str, node: Node) -> str:
    """A node's text without spaces or comments: how maps are told apart."""
    return "".join(token.text for token in tokenize(source[node.start : node.end]))


def _unguarded(source: str, lookup: Select | Index, operand: Node, kind: _Kind) -> Unguarded:
    map_text = source[lookup.operand.start : lookup.operand.end]
    key = str(key_of(lookup))
    guard = presence_test(map_text, key)
    holder = source[operand.start : operand.end].strip()
    loose = isinstance(operand, Conditional) or (
        isinstance(operand, Logical) and operand.op == "||"
    )
    if loose and not _bracketed(holder):
        holder = f"({holder})"  # binds looser than the && put before it
    return Unguarded(
        pos=lookup.start,
        lookup=source[lookup.start : lookup.end],
        operand=map_text,
        key=key,
        guard=guard,
        guarded=None if kind == "value" else f"{guard} && {holder}",
        span=(operand.start, operand.end),
    )


def _bracketed(text: str) -> bool:
    """Whether ``text`` is one parenthesised expression: ``(a || b)``, not ``(a) || (b)``."""
    depth = 0
    tokens = [t for t in tokenize(text) if t.kind == "op" and t.text in ("(", ")")]
    for i, token in enumerate(tokens):
        depth += 1 if token.text == "(" else -1
        if depth == 0 and i < len(tokens) - 1:
            return False
    return bool(tokens) and text.startswith("(") and text.endswith(")")
