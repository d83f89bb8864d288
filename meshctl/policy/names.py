"""Pool and provider names in policies, policy tests and mesh moments, checked against a mesh.

A policy that names a pool the mesh does not have (``pool.name == "aws-brust"``, a budget for
``pool: gpu-a``, ``mesh.pools["onprem2"]``, a preference for ``gcp-burts``) never errors: it is
silently false, or a budget nobody spends against. These checks make it an error with the file,
the line and a "did you mean". Pure: the caller reads the files and gives the mesh's names.

What counts as naming a pool: in allow, deny, burst ``to`` and ``victims`` expressions a
comparison of ``pool.name`` (or ``victim.pool``) with a string (``==``, ``!=``, ``in [...]``);
in any expression ``mesh.pools["x"]`` and ``mesh.pools.x`` (but not ``has(mesh.pools.x)`` or
``"x" in mesh.pools``, the ways to ask whether a pool exists); ``scoring.pool_preference``;
budget scopes ``pool`` and ``provider``; the pools of a MeshState and of a policy test's states,
expectations (eligible, usable, denied, burst_pools) and victims.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from meshctl.model.mesh import Mesh
from meshctl.model.meshstate import Moment
from meshctl.model.policytest import PolicyTest
from meshctl.policy.compiled import Source, file_line
from meshctl.policy.expr import ParseError, parse
from meshctl.policy.expr.nodes import (
    Chain,
    Comprehension,
    Has,
    Ident,
    Index,
    ListExpr,
    Literal,
    Node,
    Select,
    children,
)
from meshctl.policy.refs import where_in
from meshctl.problems import Loc, Problem, dotted

LineOf = Callable[..., int]  # (*loc) -> the line of that key in its file


@dataclass(frozen=True, slots=True)
class MeshNames:
    """What a mesh is called by: its pools and the providers they use."""

    pools: frozenset[str]
    providers: frozenset[str]

    @classmethod
    def of(cls, *meshes: Mesh) -> MeshNames:
        """The names of ``meshes``, together (files given together name any of their pools)."""
        pools = [p for mesh in meshes for p in mesh.spec.pools]
        return cls(frozenset(p.name for p in pools), frozenset(p.provider for p in pools))

    def pool_problem(self, name: str) -> str | None:
        if name in self.pools:
            return None
        hint = did_you_mean(name, self.pools)
        return f"expected a pool of the mesh ({_listed(self.pools)}), got {name!r}{hint}"

    def provider_problem(self, name: str) -> str | None:
        if name in self.providers:
            return None
        return (
            f"expected a provider the mesh has pools of ({_listed(self.providers)}), got {name!r}"
        )


def _listed(names: Collection[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def did_you_mean(name: str, names: Collection[str]) -> str:
    """``; did you mean 'search'?`` for the name closest to ``name``, or nothing."""
    close = difflib.get_close_matches(name, sorted(names), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


# --- policies ----------------------------------------------------------------------------------


def policy_problems(sources: Sequence[Source], mesh: MeshNames) -> list[Problem]:
    """Every pool or provider the policies name that ``mesh`` does not have."""
    problems: list[Problem] = []
    for src in sources:
        problems += _expression_problems(src, mesh)
        problems += _setting_problems(src, mesh)
    return problems


def _expressions(src: Source) -> Iterator[tuple[Loc, str, bool]]:
    """(location, text, selects pools) of every expression in the file."""
    spec = src.policy.spec
    for i, rule in enumerate(spec.pools):
        yield ("spec", "pools", i, "when"), rule.when, False
        effect = "allow" if rule.allow is not None else "deny"
        yield ("spec", "pools", i, effect), rule.allow or rule.deny or "", True
    for i, burst in enumerate(spec.burst):
        yield ("spec", "burst", i, "when"), burst.when, False
        yield ("spec", "burst", i, "to"), burst.to, True
    for i, pre in enumerate(spec.preemption):
        yield ("spec", "preemption", i, "when"), pre.when, False
        yield ("spec", "preemption", i, "victims"), pre.victims, True


def _expression_problems(src: Source, mesh: MeshNames) -> list[Problem]:
    problems = []
    for loc, text, selects in _expressions(src):
        try:
            tree = parse(text)
        except (ParseError, RecursionError):
            continue  # compiling reports it
        for pos, name in pool_literals(tree, selects):
            message = mesh.pool_problem(name)
            if message is not None:
                line = file_line(src, src.origin(*loc).line, text, pos)
                where = where_in(text, pos)
                problems.append(Problem(src.path, line, dotted(loc), f"{where}: {message}"))
    return problems


def _setting_problems(src: Source, mesh: MeshNames) -> list[Problem]:
    spec = src.policy.spec
    found: list[tuple[Loc, str | None]] = []
    for i, budget in enumerate(spec.budgets):
        scope = ("spec", "budgets", i, "scope")
        if budget.scope.pool is not None:
            found.append(((*scope, "pool"), mesh.pool_problem(budget.scope.pool)))
        if budget.scope.provider is not None:
            found.append(((*scope, "provider"), mesh.provider_problem(budget.scope.provider)))
    preference = spec.scoring.pool_preference if spec.scoring else None
    for j, name in enumerate(preference or ()):
        found.append((("spec", "scoring", "pool_preference", j), mesh.pool_problem(name)))
    return [
        Problem(src.path, src.origin(*loc).line, dotted(loc), message)
        for loc, message in found
        if message is not None
    ]


def pool_literals(tree: Node, selects: bool) -> list[tuple[int, str]]:
    """(offset, name) of every pool named in ``tree``: ``mesh.pools`` keys, and where
    ``selects``, strings compared with ``pool.name`` or ``victim.pool``."""
    found: list[tuple[int, str]] = []
    stack: list[tuple[Node, frozenset[str]]] = [(tree, frozenset())]
    while stack:
        node, bound = stack.pop()
        if isinstance(node, Has):
            # has(mesh.pools.x) asks whether x exists: look only below the pool map
            inner = node.arg.operand if isinstance(node.arg, Select) else node.arg
            stack.append((inner, bound))
            continue
        found += _mesh_key(node, bound)
        if selects and isinstance(node, Chain):
            found += _compared(node, bound)
        if isinstance(node, Comprehension):
            stack.append((node.target, bound))
            stack.extend((arg, bound | {node.var}) for arg in node.args)
            continue
        stack.extend((child, bound) for child in children(node))
    return sorted(found)


def _is_path(node: Node, root: str, field: str, bound: frozenset[str]) -> bool:
    return (
        isinstance(node, Select)
        and node.field == field
        and isinstance(node.operand, Ident)
        and node.operand.name == root
        and root not in bound
    )


def _mesh_key(node: Node, bound: frozenset[str]) -> list[tuple[int, str]]:
    if isinstance(node, Select) and _is_path(node.operand, "mesh", "pools", bound):
        return [(node.field_pos, node.field)]
    if (
        isinstance(node, Index)
        and _is_path(node.operand, "mesh", "pools", bound)
        and isinstance(node.index, Literal)
        and node.index.kind == "string"
    ):
        return [(node.index.start, str(node.index.value))]
    return []


def _compared(node: Chain, bound: frozenset[str]) -> list[tuple[int, str]]:
    found = []
    for k, op in enumerate(node.ops):
        left, right = node.operands[k], node.operands[k + 1]
        names = _names_side(left, bound)
        if op in ("==", "!=") and names:
            found += _strings(right)
        elif op in ("==", "!=") and _names_side(right, bound):
            found += _strings(left)
        elif op == "in" and names and isinstance(right, ListExpr):
            for item in right.items:
                found += _strings(item)
    return found


def _names_side(node: Node, bound: frozenset[str]) -> bool:
    return _is_path(node, "pool", "name", bound) or _is_path(node, "victim", "pool", bound)


def _strings(node: Node) -> list[tuple[int, str]]:
    if isinstance(node, Literal) and node.kind == "string":
        return [(node.start, str(node.value))]
    return []


# --- policy tests and mesh moments -------------------------------------------------------------


def moment_problems(
    path: str, moment: Moment, line_of: LineOf, loc: Loc, mesh: MeshNames
) -> list[Problem]:
    """The pools a moment (a MeshState's spec, a test's or a case's state) gives that the
    mesh does not have."""
    problems = []
    for name in moment.pools:
        message = mesh.pool_problem(name)
        if message is not None:
            where = (*loc, "pools", name)
            problems.append(Problem(path, line_of(*where), dotted(where), message))
    return problems


def policy_test_problems(
    path: str, test: PolicyTest, line_of: LineOf, mesh: MeshNames
) -> list[Problem]:
    """Every pool a policy test names that ``mesh`` does not have."""
    problems = moment_problems(path, test.spec.state, line_of, ("spec", "state"), mesh)
    for i, case in enumerate(test.spec.cases):
        at: Loc = ("spec", "cases", i)
        problems += moment_problems(path, case.state, line_of, (*at, "state"), mesh)
        named: list[tuple[Loc, str]] = [
            ((*at, "expect", key, j), name)
            for key, names in _expected_pools(case.expect).items()
            for j, name in enumerate(names)
        ]
        if case.victim is not None:
            named.append(((*at, "victim", "pool"), case.victim.pool))
        for where, name in named:
            message = mesh.pool_problem(name)
            if message is not None:
                problems.append(Problem(path, line_of(*where), dotted(where), message))
    return problems


def _expected_pools(expect: object) -> Mapping[str, Sequence[str]]:
    keys = ("eligible", "usable", "denied", "burst_pools")
    return {key: getattr(expect, key) for key in keys if getattr(expect, key) is not None}
