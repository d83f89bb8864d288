"""Why an expression did not match, in words: the operand that decided, and run-time failures.

Deciding is fast and says only "false" or "error"; explaining is done when someone reads the
trace (``meshctl policy explain``), from the variables the evaluation saw, so the scheduler's
hot path pays nothing for it. ``when: a && b`` is false because of its first false operand in
source order (even when the engine ran ``b`` first, at bind); ``a || b`` because all of its
operands were false; a failure names the operand that failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import cel

from meshctl.policy.expr.guards import presence_test, string_literal
from meshctl.policy.expr.nodes import Index, Literal, Logical, Node, Select, children
from meshctl.policy.refs import Compiled

Outcome = str  # "matched", "not matched", "error"


@dataclass(frozen=True, slots=True)
class Scope:
    """The variables one job's evaluation saw (built once per job; pools added on demand)."""

    values: Mapping[str, Any]
    pools: Mapping[str, Any] = field(default_factory=dict)

    def variables(self, pool: str | None) -> dict[str, Any]:
        out = dict(self.values)
        if pool is not None and pool in self.pools:
            out["pool"] = self.pools[pool]
        return out


def failure(expr: Compiled, err: Exception) -> str:
    """A run-time failure of ``expr`` in words, with how to avoid it where there is a way."""
    if isinstance(err, KeyError):
        return _missing_key(expr, str(err.args[0]) if err.args else "")
    if isinstance(err, IndexError):
        return f"index out of range ({err})"
    if isinstance(err, ZeroDivisionError):
        return "division by zero"
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text.split(". ")[0]


def _missing_key(expr: Compiled, key: str) -> str:
    key = key.strip("'\"")
    where = _lookup_of(expr.tree, key) if expr.tree is not None else None
    if where is None:
        return f"no key '{key}'"
    operand = expr.source[where.start : where.end]
    tests = [presence_test(operand, key), f"{string_literal(key)} in {operand}"]
    return f"no key '{key}' in {operand}; test for it with " + " or ".join(dict.fromkeys(tests))


def _lookup_of(tree: Node, key: str) -> Node | None:
    """The operand of the first ``x.key`` or ``x["key"]`` in ``tree``, in source order."""
    found: list[tuple[int, Node]] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if _looks_up(node, key):
            assert isinstance(node, Select | Index)
            found.append((node.start, node.operand))
        stack.extend(children(node))
    return min(found, key=lambda f: f[0])[1] if found else None


def _looks_up(node: Node, key: str) -> bool:
    if isinstance(node, Select):
        return node.field == key
    return isinstance(node, Index) and isinstance(node.index, Literal) and node.index.value == key


# --- why a condition or selector was false ----------------------------------------------------


def why_not(
    parts: Sequence[Compiled], outcome: Outcome, detail: str, variables: Mapping[str, Any]
) -> str:
    """The operand that decided, in source order: for "not matched" the first false one (and
    inside it, the first false operand of an ``&&``, or every operand of an ``||``); for
    "error" the first that failed, and why."""
    for part in parts:
        value, error = _run(part, variables)
        if outcome == "not matched" and value is False:
            return (
                _false(part.tree, part.source, variables) if part.tree else f"false: {part.source}"
            )
        if outcome == "error" and error is not None:
            return f"{error} in `{part.source}`" if len(parts) > 1 else error
    return detail or ("false" if outcome == "not matched" else "")


def _false(node: Node, source: str, variables: Mapping[str, Any]) -> str:
    text = source[node.start : node.end]
    if isinstance(node, Logical) and node.op == "&&":
        for operand in node.operands:
            if _value(source[operand.start : operand.end], variables) is False:
                return _false(operand, source, variables)
    if isinstance(node, Logical) and node.op == "||":
        shown = "; ".join(f"`{source[o.start : o.end]}`" for o in node.operands)
        return f"all false: {shown}"
    return f"false: {text}"


def _run(part: Compiled, variables: Mapping[str, Any]) -> tuple[object, str | None]:
    """(its value, None), or (None, why it failed) in the words evaluation uses."""
    try:
        value = part.program.execute(dict(variables))
    except Exception as err:
        return None, failure(part, err)
    if isinstance(value, bool):
        return value, None
    return None, f"expected a boolean, got {type(value).__name__} {value!r}"


def _value(source: str, variables: Mapping[str, Any]) -> object:
    """A sub-expression's value; None if it fails."""
    try:
        return _program(source).execute(dict(variables))
    except Exception:
        return None


@lru_cache(maxsize=1024)
def _program(source: str) -> cel.Program:
    return cel.compile(source)
