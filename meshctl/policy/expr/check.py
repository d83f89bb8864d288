"""Type inference over a parsed expression: what each node gives, and what cannot run.

The checker rejects what is certain to fail when it is evaluated (an operator or function the
runtime has no overload for, a field of a string, a list indexed by a string, a condition that
is not a boolean) and never what runs (functions.py is the runtime's own table, verified
against it). ``dyn`` (a value whose type is known only at run time) passes wherever some type
would. A map lookup that may miss (``job.labels.team``) is legal: it fails only for some jobs,
and the engine fails closed when it does.

After a problem a node's type is dyn, so one mistake is reported once, not again by every
node above it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from meshctl.policy.expr import functions as fn
from meshctl.policy.expr.nodes import (
    Call,
    Chain,
    Comprehension,
    Conditional,
    Has,
    Ident,
    Index,
    ListExpr,
    Literal,
    Logical,
    MapExpr,
    Node,
    Select,
    Struct,
    Unary,
)
from meshctl.policy.expr.types import (
    BOOL,
    DYN,
    MAP_KEYS,
    NUMBERS,
    PRIMITIVES,
    TYPE,
    Type,
    article,
    from_schema,
    join,
    list_of,
    map_of,
    optional_of,
)

TYPE_VALUES: Final = frozenset(
    {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type",
     "optional_type"}
)  # fmt: skip
Env = Mapping[str, Type]
_ORDER_OPS: Final = frozenset({"<", "<=", ">", ">="})


@dataclass(frozen=True, slots=True)
class TypeProblem:
    pos: int  # offset in the source
    message: str


@dataclass(frozen=True, slots=True)
class Checked:
    type: Type  # what the expression gives
    problems: list[TypeProblem]
    dynamic: bool  # some operation was let through only because a value was dyn
    # the lookups into a map (``m.k``, ``m[k]``), which fail where the key is missing
    lookups: tuple[Select | Index, ...] = ()


def env_of(names: Sequence[str], schema: Mapping[str, Any]) -> dict[str, Type]:
    """The types of the variables ``names`` as ``schema`` (variables.SCHEMA) describes them
    (built anew each call: refs.py builds variables.SCHEMA's once)."""
    return {name: from_schema(schema[name], name) for name in names if name in schema}


def check(tree: Node, env: Env, want_bool: bool = True) -> Checked:
    """The type ``tree`` gives and every problem found; with ``want_bool``, a result that is
    not a boolean is one. An expression without problems that is not ``dynamic`` cannot fail
    with a type error at run time (tests/unit/policy/test_expr_check.py holds it to that)."""
    checker = _Checker(env)
    result = checker.type_of(tree)
    if want_bool and not checker.problems and result.kind not in ("bool", "dyn"):
        checker.problem(tree.start, f"the expression gives {article(result)}; expected a boolean")
    dynamic = checker.dynamic or result.kind == "dyn"
    return Checked(result, checker.problems, dynamic, tuple(checker.lookups))


def _inner(node: Node) -> Node | None:
    """What a member node (``x.f``, ``x[i]``, ``x.m()``, ``x.all(...)``) applies to."""
    if isinstance(node, Select | Index):
        return node.operand
    if isinstance(node, Call | Comprehension):
        return node.target
    return None


class _Checker:
    def __init__(self, env: Env) -> None:
        self.scopes: list[Env] = [env]
        self.problems: list[TypeProblem] = []
        self.dynamic = False
        self.lookups: list[Select | Index] = []

    def lean(self, *types: Type) -> None:
        """Note when a check passes only because some value is dyn."""
        if any(t.kind == "dyn" for t in types):
            self.dynamic = True

    def problem(self, pos: int, message: str) -> Type:
        self.problems.append(TypeProblem(pos, message))
        return DYN

    def lookup(self, name: str) -> Type | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def type_of(self, node: Node) -> Type:
        """Member chains (``a.b[0].c()``) are walked in a loop: they may be long."""
        spine: list[Node] = []
        while (inner := _inner(node)) is not None and not self.namespaced(node):
            spine.append(node)
            node = inner
        current = self.base(node)
        for step in reversed(spine):
            current = self.member(step, current)
        return current

    def namespaced(self, node: Node) -> bool:
        """``optional.of(x)``: a function in a namespace, unless ``optional`` is a variable."""
        return (
            isinstance(node, Call)
            and isinstance(node.target, Ident)
            and node.target.name in fn.NAMESPACES
            and self.lookup(node.target.name) is None
        )

    def base(self, node: Node) -> Type:
        if isinstance(node, Literal):
            return PRIMITIVES[node.kind]
        if isinstance(node, Ident):
            return self.ident(node)
        if isinstance(node, Call):
            name = node.function
            if node.target is not None:  # a namespaced function
                assert isinstance(node.target, Ident)
                name = f"{node.target.name}.{name}"
            return self.call(node, name, [self.type_of(a) for a in node.args])
        if isinstance(node, Has):
            return self.has(node)
        if isinstance(node, Unary):
            return self.unary(node)
        if isinstance(node, Chain):
            return self.chain(node)
        if isinstance(node, Logical):
            return self.logical(node)
        if isinstance(node, Conditional):
            return self.conditional(node)
        if isinstance(node, ListExpr):
            return list_of(join([self.type_of(item) for item in node.items]))
        if isinstance(node, MapExpr):
            return self.map_expr(node)
        assert isinstance(node, Struct)
        for _, value in node.fields:
            self.type_of(value)
        return self.problem(
            node.start, f"cannot build {node.name}{{...}}: there are no message types here"
        )

    def ident(self, node: Ident) -> Type:
        found = self.lookup(node.name)
        if found is not None:
            return found
        if node.name in TYPE_VALUES:
            return TYPE
        if node.name in fn.GLOBALS:
            return self.problem(node.start, f"'{node.name}' is a function, not a value")
        return self.problem(node.start, f"unknown variable '{node.name}'")

    # --- members ---------------------------------------------------------------------------

    def member(self, node: Node, target: Type) -> Type:
        self.lean(target)
        if isinstance(node, Select):
            return self.select(node, target)
        if isinstance(node, Index):
            return self.index(node, target, self.type_of(node.index))
        if isinstance(node, Comprehension):
            return self.comprehension(node, target)
        assert isinstance(node, Call)
        return self.method(node, target, [self.type_of(a) for a in node.args])

    def select(self, node: Select, target: Type) -> Type:
        if target.kind == "object":
            found = target.fields.get(node.field)
            if found is None:
                return self.problem(node.field_pos, f"{target.label} has no field '{node.field}'")
            return found
        if target.kind == "map":
            self.lookups.append(node)
            return target.value
        if target.kind == "dyn":
            return DYN
        if target.kind == "optional":
            return optional_of(DYN)
        return self.problem(
            node.field_pos, f"{article(target)} has no fields; cannot select '{node.field}'"
        )

    def has(self, node: Has) -> Type:
        arg = node.arg
        if isinstance(arg, Has):
            self.has(arg)
            return BOOL
        target = self.type_of(arg.operand)
        self.lean(target)
        if target.kind in ("map", "dyn", "optional") or (
            target.kind == "object" and arg.field in target.fields
        ):
            return BOOL
        if target.kind == "object":
            return self.problem(arg.field_pos, f"{target.label} has no field '{arg.field}'")
        return self.problem(
            arg.start, f"has() tests a field of a map; {article(target)} has no fields"
        )

    def index(self, node: Index, target: Type, key: Type) -> Type:
        self.lean(key)
        if target.kind == "object":
            if isinstance(node.index, Literal) and node.index.kind == "string":
                found = target.fields.get(str(node.index.value))
                if found is None:
                    return self.problem(
                        node.index.start, f"{target.label} has no field {node.index.value!r}"
                    )
                return found
            target = map_of(Type("string"), DYN)
        if target.kind == "dyn":
            if key.kind in MAP_KEYS or key.kind in ("dyn", "optional"):
                return DYN
            return self.problem(node.index.start, _bad_key(key))
        found = fn.resolve(fn.OPERATORS["[]"], [target, key])
        if found is not None:
            if target.kind == "map":
                self.lookups.append(node)
            return found
        if target.kind == "list":
            return self.problem(node.index.start, f"a list is indexed by an int, got {key}")
        if target.kind == "map":
            return self.problem(node.index.start, _bad_key(key))
        return self.problem(node.index.start, f"{article(target)} cannot be indexed")

    def comprehension(self, node: Comprehension, target: Type) -> Type:
        if target.kind not in ("list", "map", "object", "dyn"):
            self.problem(node.name_pos, f"'{node.macro}' ranges over a list or a map, got {target}")
            target = DYN
        var = target.element if target.kind != "dyn" else DYN
        self.scopes.append({node.var: var})
        try:
            types = [self.type_of(arg) for arg in node.args]
        finally:
            self.scopes.pop()
        predicates = node.args if node.macro != "map" else node.args[:-1]
        for arg, t in zip(predicates, types, strict=False):
            self.lean(t)
            if t.kind not in ("bool", "dyn"):
                self.problem(
                    arg.start, f"the condition of '{node.macro}' gives {t}; expected a boolean"
                )
        if node.macro == "map":
            return list_of(types[-1])
        if node.macro == "filter":
            return list_of(var)
        return BOOL

    def method(self, node: Call, target: Type, args: list[Type]) -> Type:
        self.lean(*args)
        overloads = fn.METHODS.get(node.function)
        if overloads is None:
            return self.problem(node.name_pos, _unknown_method(node.function, target))
        found = fn.resolve(overloads, [target, *args])
        if found is not None:
            return found
        mine = [o for o in overloads if fn.accepts(o.params[0], target)]
        if not mine:
            owners = " or ".join(article(r) for r in sorted({o.params[0] for o in overloads}))
            return self.problem(
                node.name_pos, f"{article(target)} has no method '{node.function}' ({owners} has)"
            )
        return self.problem(node.name_pos, _bad_arguments(node.function, mine, args, 1))

    def call(self, node: Call, name: str, args: list[Type]) -> Type:
        self.lean(*(a for a in args if name not in ("dyn", "type")))
        overloads = fn.GLOBALS.get(name)
        if overloads is None:
            return self.problem(node.name_pos, _unknown_function(name))
        found = fn.resolve(overloads, args)
        if found is not None:
            return found
        return self.problem(node.name_pos, _bad_arguments(name, overloads, args, 0))

    # --- operators -------------------------------------------------------------------------

    def unary(self, node: Unary) -> Type:
        operand = self.type_of(node.operand)
        self.lean(operand)
        found = fn.resolve(fn.OPERATORS[f"{node.op}_"], [operand])
        if found is not None:
            return found
        wants = "a boolean" if node.op == "!" else "a number"
        return self.problem(node.start, f"'{node.op}' needs {wants}, got {operand}")

    def chain(self, node: Chain) -> Type:
        left_node: Node | None = node.operands[0]
        left = self.type_of(node.operands[0])
        for op, pos, operand in zip(node.ops, node.op_pos, node.operands[1:], strict=True):
            right = self.type_of(operand)
            if op not in ("==", "!="):
                self.lean(left, right)
            found = fn.resolve(fn.OPERATORS[op], [left, right])
            if found is None:
                found = self.problem(pos, _bad_operands(op, (left, right), (left_node, operand)))
            left, left_node = found, None
        return left

    def logical(self, node: Logical) -> Type:
        for operand in node.operands:
            t = self.type_of(operand)
            self.lean(t)
            if t.kind not in ("bool", "dyn"):
                self.problem(operand.start, f"'{node.op}' needs booleans on both sides, got {t}")
        return BOOL

    def conditional(self, node: Conditional) -> Type:
        cond = self.type_of(node.cond)
        self.lean(cond)
        if cond.kind not in ("bool", "dyn"):
            self.problem(
                node.cond.start, f"the condition before '?' gives {cond}; expected a boolean"
            )
        return join([self.type_of(node.then), self.type_of(node.otherwise)])

    def map_expr(self, node: MapExpr) -> Type:
        keys, values = [], []
        for key, value in node.entries:
            t = self.type_of(key)
            self.lean(t)
            if t.kind not in MAP_KEYS and t.kind != "dyn":
                self.problem(key.start, _bad_key(t))
            keys.append(t)
            values.append(self.type_of(value))
        return map_of(join(keys), join(values))


# --- messages ------------------------------------------------------------------------------


def _bad_key(key: Type) -> str:
    return f"a map key must be an int, uint, bool or string, got {key}"


def _bad_operands(op: str, types: tuple[Type, Type], nodes: tuple[Node | None, Node | None]) -> str:
    left, right = types
    if op == "in":
        if right.kind in ("map", "object"):
            return _bad_key(left)
        return f"'in' needs a list or a map on the right, got {right}"
    if op in _ORDER_OPS:
        text = f"'{op}' cannot compare {left} with {right}"
        quoted = next((n for n in nodes if isinstance(n, Literal) and _is_number_text(n)), None)
        if isinstance(quoted, Literal) and NUMBERS & {left.kind, right.kind}:
            text += f"; write {quoted.value} without quotes for a number"
        return text
    text = f"'{op}' is not defined for {left} and {right}"
    if left.kind in NUMBERS and right.kind in NUMBERS:
        whole = next((n for n in nodes if isinstance(n, Literal) and n.kind == "int"), None)
        fix = f"write {whole.value}.0 for a double, or " if isinstance(whole, Literal) else ""
        text += (
            f"; cel does not mix int, uint and double in arithmetic: {fix}convert one side"
            " with double(), int() or uint()"
        )
    return text


def _is_number_text(node: Node | None) -> bool:
    if not isinstance(node, Literal) or node.kind != "string":
        return False
    try:
        float(str(node.value))
    except ValueError:
        return False
    return True


def _bad_arguments(
    name: str, overloads: Sequence[fn.Overload], args: Sequence[Type], skip: int
) -> str:
    """What ``name`` takes instead of ``args`` (``skip``: 1 for a method's target)."""
    shapes = list(dict.fromkeys(o.params[skip:] for o in overloads))
    given = ", ".join(str(a) for a in args) or "nothing"
    counts = sorted({len(shape) for shape in shapes})
    if len(args) not in counts:
        wanted = " or ".join("no" if n == 0 else str(n) for n in counts)
        noun = "argument" if counts == [1] else "arguments"
        zones = " (time zones are not supported)" if name.startswith("get") else ""
        return f"{name}() takes {wanted} {noun}{zones}, got ({given})"
    if all(len(shape) == 1 for shape in shapes):
        kinds = [shape[0] for shape in shapes]
        listed = ", ".join(kinds[:-1]) + (" or " if len(kinds) > 1 else "") + kinds[-1]
        return f"{name}() takes {article(listed)}, got {given}"
    takes = "; ".join(f"{name}({', '.join(shape)})" for shape in shapes)
    return f"no {name}() takes ({given}); it takes {takes}"


def _unknown_method(name: str, target: Type) -> str:
    mine = sorted(
        n for n, os in fn.METHODS.items() if any(fn.accepts(o.params[0], target) for o in os)
    )
    close = _close(name, mine) or _close(name, list(fn.METHODS))
    if close:
        return f"{article(target)} has no method '{name}'; did you mean '{close}'?"
    if name in fn.GLOBALS:
        return f"'{name}' is a function, not a method: write {name}(x)"
    if name in fn.MACROS:
        return f"'{name}' takes a variable name and an expression: x.{name}(v, v > 0)"
    known = ", ".join(mine) or "none"
    return f"{article(target)} has no method '{name}' (its methods: {known})"


def _unknown_function(name: str) -> str:
    if name in fn.METHODS:
        return f"'{name}' is a method, not a function: write x.{name}(...)"
    close = _close(name, list(fn.GLOBALS))
    if close:
        return f"no function '{name}'; did you mean '{close}'?"
    return f"no function '{name}' (functions: {', '.join(sorted(fn.GLOBALS))})"


def _close(name: str, names: Sequence[str]) -> str | None:
    """A case-insensitive match first (``startswith`` -> ``startsWith``), then a near one."""
    for candidate in names:
        if candidate.lower() == name.lower():
            return candidate
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return close[0] if close else None
