"""Static checks of a policy's CEL expressions, before anything runs.

``compile_checked`` bounds an expression's size and bracket nesting (before the parser sees
it, so a huge or deeply nested input can neither hang nor crash it), compiles it with ``cel``,
checks every variable and field path it references against ``variables.SCHEMA`` (paths.py: a
typo such as ``job.gpu`` is an error at load time, with a suggestion, not a silent ``false``
at scheduling time), then parses it into an AST of our own and type-checks it (expr/: ``cel``
has neither): an operator, function or method the runtime has no overload for, or a condition
that is not a boolean, is an error with its column. Every problem is one line that says what
was expected, and every problem of an expression is reported, not only the first. A map
lookup by a constant key that no presence test guards (``job.labels.team == "x"``) is not an
error but is kept on the result (``Compiled.unguarded``, expr/guards.py) for validation to
warn about: the rule fails closed for every job without the key.

Evaluation never hangs: CEL has no loops or recursion; its only iteration is the bounded macros
(``all``, ``exists``, ``exists_one``, ``map``, ``filter``) over finite lists and maps, so the
time one evaluation takes is bounded by the expression's size times the size of its data.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import cel

from meshctl.policy.expr import ParseError, check, env_of, parse
from meshctl.policy.expr.functions import NAMESPACES
from meshctl.policy.expr.guards import Unguarded, unguarded
from meshctl.policy.expr.lex import tokenize
from meshctl.policy.expr.nodes import Node
from meshctl.policy.expr.types import Type
from meshctl.policy.paths import _CLOSE, _OPEN, TYPE_NAMES, PathChecker, _add
from meshctl.policy.variables import SCHEMA

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "MAX_NESTING",
    "Compiled",
    "ExpressionError",
    "check_source",
    "compile_checked",
    "conjuncts",
    "fields_read",
    "tokenize",
]

MAX_EXPRESSION_CHARS: Final = 4096
MAX_NESTING: Final = 32  # (), [], {} depth
# maps whose keys are the mesh's pools: names.py checks every constant key against the mesh
KEYS_CHECKED: Final = frozenset({"mesh.pools"})

_ERROR_RE: Final = re.compile(r"ERROR: <input>:(\d+):(\d+): (?:Syntax error: )?([^\n]*)")
_ITEM_RE: Final = re.compile(r"'[^']*'|<EOF>|[A-Z_]+")
_VALUE_ITEMS: Final = frozenset(
    {"'['", "'{'", "'('", "'.'", "'-'", "'!'", "'true'", "'false'", "'null'", "NUM_FLOAT",
     "NUM_INT", "NUM_UINT", "STRING", "BYTES", "IDENTIFIER"}
)  # fmt: skip
_OPERATOR_ITEMS: Final = frozenset(
    {"'=='", "'!='", "'in'", "'<'", "'<='", "'>='", "'>'", "'&&'", "'||'", "'['", "'.'",
     "'-'", "'?'", "'+'", "'*'", "'/'", "'%'"}
)  # fmt: skip
_ITEM_NAMES: Final = {
    "<EOF>": "end of input",
    "IDENTIFIER": "a name",
    "NUM_INT": "a number",
    "NUM_UINT": "a number",
    "NUM_FLOAT": "a number",
    "STRING": "a string",
    "BYTES": "bytes",
}


@dataclass(frozen=True, slots=True)
class Compiled:
    """A checked, compiled expression, and its tree (for explaining and for name checks)."""

    source: str
    program: cel.Program
    roots: frozenset[str]  # the schema variables the expression uses (job, pool, mesh, ...)
    tree: Node | None = None  # None only if our parser disagrees with cel's (it should not)
    unguarded: tuple[Unguarded, ...] = ()  # map lookups that fail where the key is missing


Found = tuple[str, int | None]  # a problem's message and its offset in the expression


class ExpressionError(ValueError):
    """An expression that cannot be used; the message is one line that says what was expected.
    ``pos`` is the offset in the expression the problem is at, where known; ``found`` every
    problem of the expression (this one first), each a one-line message and its offset."""

    def __init__(self, message: str, pos: int | None = None, found: tuple[Found, ...] = ()) -> None:
        super().__init__(_one_line(message))
        self.pos = pos
        self.found = tuple((_one_line(m), p) for m, p in found) or ((str(self), pos),)


def compile_checked(
    source: str, allowed: Collection[str], schema: Mapping[str, Any] = SCHEMA
) -> Compiled:
    """Compile a CEL expression after checking its size, nesting, every reference and its
    types; it must give a boolean.

    ``allowed`` names the variables this kind of expression may use (``victim`` only in
    preemption rules); ``schema`` describes their fields. Raises ``ExpressionError`` with a
    one-line message for the first problem found, and every problem in ``found``.
    """
    analysis = _analyse(source, allowed, schema)
    program, problems, roots, tree, _ = analysis
    if problems or program is None:
        message, pos = problems[0] if problems else ("invalid expression", None)
        raise ExpressionError(message, pos, tuple(problems))
    return Compiled(source, program, roots, tree, analysis.unguarded)


def check_source(
    source: str, allowed: Collection[str], schema: Mapping[str, Any] = SCHEMA
) -> list[str]:
    """Every problem ``compile_checked`` would find, as one-line messages; empty when fine."""
    return [_one_line(problem) for problem, _ in _analyse(source, allowed, schema)[1]]


def conjuncts(source: str) -> list[str]:
    """The operands of ``source``'s top-level ``&&`` chain, or ``[source]`` if it is not one.

    ``a && b ? c : d`` and ``a && b || c`` are not split: ``?:`` and ``||`` bind looser than
    ``&&``. CEL's ``&&`` is commutative (an error on one side is absorbed by ``false`` on the
    other), so the operands may be evaluated separately and in any order.
    """
    depth, cuts = 0, [-2]
    for token in tokenize(source):
        if token.kind != "op":
            continue
        if token.text in _OPEN:
            depth += 1
        elif token.text in _CLOSE:
            depth -= 1
        elif depth == 0 and token.text in ("||", "?"):
            return [source]
        elif depth == 0 and token.text == "&&":
            cuts.append(token.pos)
    bounds = zip(cuts, [*cuts[1:], len(source)], strict=True)
    return [source[start + 2 : end].strip() for start, end in bounds]


def fields_read(source: str, roots: Collection[str]) -> frozenset[str] | None:
    """The first-level fields of ``roots`` that ``source`` reads (``job.kind`` -> ``kind``);
    None when it uses one of them whole (passes ``job`` itself to a function or macro)."""
    tokens = list(tokenize(source))
    fields: set[str] = set()
    for i, token in enumerate(tokens):
        if token.kind != "ident" or token.text not in roots:
            continue
        if i > 0 and tokens[i - 1].text == ".":
            continue  # a field that happens to share the name, e.g. victim.job
        after = tokens[i + 1 : i + 3]
        if len(after) == 2 and after[0].text == "." and after[1].kind == "ident":
            fields.add(after[1].text)
        else:
            return None
    return frozenset(fields)


class _Analysis(NamedTuple):
    program: cel.Program | None
    problems: list[Found]
    roots: frozenset[str]
    tree: Node | None
    unguarded: tuple[Unguarded, ...] = ()


def _analyse(source: str, allowed: Collection[str], schema: Mapping[str, Any]) -> _Analysis:
    problem = _size_problem(source)
    if problem is not None:
        return _Analysis(None, [(problem, None)], frozenset(), None)
    try:
        program = cel.compile(source)
    except ValueError as error:
        return _Analysis(None, [(_syntax_message(source, error), None)], frozenset(), None)
    variables = program.variables()
    checker = PathChecker(source, frozenset(allowed), schema)
    checker.scan()
    problems = checker.problems
    known = checker.bound | frozenset(allowed) | TYPE_NAMES | (NAMESPACES - checker.free)
    for name in variables:
        if name not in known:
            _add(problems, checker.unavailable(name))
    used = checker.free | (frozenset(variables) - checker.bound)
    roots = frozenset(name for name in variables if name in schema and name in used)
    found: list[Found] = [(p, None) for p in problems]
    tree = _tree(source)
    if found or tree is None:
        return _Analysis(program, found, roots, tree)
    checked = check(tree, _env(allowed, schema))
    found = [
        (f"type error at {where_in(source, p.pos)}: {p.message}", p.pos) for p in checked.problems
    ]
    missing = tuple(unguarded(source, tree, checked.lookups, KEYS_CHECKED))
    return _Analysis(program, found, roots, tree, missing)


# The types of SCHEMA's variables, built once: every policy expression is checked against them.
_SCHEMA_ENV: Final = env_of(sorted(SCHEMA), SCHEMA)


def _env(allowed: Collection[str], schema: Mapping[str, Any]) -> dict[str, Type]:
    if schema is SCHEMA:
        return {name: _SCHEMA_ENV[name] for name in sorted(allowed) if name in _SCHEMA_ENV}
    return env_of(sorted(allowed), schema)


def _tree(source: str) -> Node | None:
    """Our parse of what ``cel`` accepted. The two are held to agree (the differential test);
    were they ever not to, the type check is skipped rather than reject what ``cel`` runs."""
    try:
        return parse(source)
    except (ParseError, RecursionError):
        return None


def _size_problem(source: str) -> str | None:
    depth = 0
    for token in tokenize(source[:MAX_EXPRESSION_CHARS]):
        if token.kind != "op":
            continue
        if token.text in _OPEN:
            depth += 1
            if depth > MAX_NESTING:
                return (
                    f"brackets nest deeper than {MAX_NESTING} levels at "
                    f"{where_in(source, token.pos)}; expected at most {MAX_NESTING} levels "
                    "of (), [] and {}"
                )
        elif token.text in _CLOSE:
            depth = max(depth - 1, 0)
    if len(source) > MAX_EXPRESSION_CHARS:
        return (
            f"expression is {len(source)} characters long; expected at most {MAX_EXPRESSION_CHARS}"
        )
    return None


def where_in(source: str, pos: int) -> str:
    """Offset ``pos`` of ``source`` in words: ``column 9``, or ``line 2, column 3``."""
    line = source.count("\n", 0, pos) + 1
    column = pos - (source.rfind("\n", 0, pos) + 1) + 1
    return _where_text(line, column)


def _where_text(line: int, column: int) -> str:
    return f"column {column}" if line == 1 else f"line {line}, column {column}"


def _syntax_message(source: str, error: ValueError) -> str:
    text = str(error).removeprefix(f"Failed to parse expression '{source}': ")
    match = _ERROR_RE.match(text)
    if match is None:
        lines = text.strip().splitlines()
        return "invalid expression: " + (lines[0] if lines else type(error).__name__)
    where = _where_text(int(match.group(1)), int(match.group(2)))
    return f"syntax error at {where}: {_shorten(match.group(3).strip())}"


def _shorten(reason: str) -> str:
    """Turn the parser's long ``expecting {...}`` list into words."""
    head, found, expected = reason.rpartition(" expecting ")
    if not found:
        return reason
    items = _ITEM_RE.findall(expected)
    if not items:
        return reason
    if len(items) <= 4:
        return f"{head} expecting " + " or ".join(_ITEM_NAMES.get(i, i) for i in items)
    parts: list[str] = []
    rest = set(items)
    if "IDENTIFIER" in rest or "NUM_INT" in rest:
        parts.append("a value")
        rest -= _VALUE_ITEMS
    if "'=='" in rest or "'&&'" in rest or "'+'" in rest:
        parts.append("an operator")
        rest -= _OPERATOR_ITEMS
    parts += [_ITEM_NAMES.get(i, i) for i in items if i in rest]
    return f"{head} expecting " + " or ".join(parts)


def _one_line(text: str) -> str:
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )
