"""Static checks of a policy's CEL expressions, before anything runs.

``compile_checked`` bounds an expression's size and bracket nesting (before the parser sees
it, so a huge or deeply nested input can neither hang nor crash it), compiles it with ``cel``,
and checks every variable and field path it references against ``variables.SCHEMA``: a typo
such as ``job.gpu`` is an error at load time, with a suggestion, not a silent ``false`` at
scheduling time. Every problem is one line that says what was expected.

``cel`` has no AST API, so references are found by a small lexer of our own (strings, comments
and numbers are skipped) over an expression the parser has already accepted.

Evaluation never hangs: CEL has no loops or recursion; its only iteration is the bounded macros
(``all``, ``exists``, ``exists_one``, ``map``, ``filter``) over finite lists and maps, so the
time one evaluation takes is bounded by the expression's size times the size of its data.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import cel

from meshctl.policy.variables import SCHEMA

MAX_EXPRESSION_CHARS: Final = 4096
MAX_NESTING: Final = 32  # (), [], {} depth

MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})
KEYWORDS: Final = frozenset(
    {"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
     "function", "if", "import", "let", "loop", "package", "namespace", "return", "var",
     "void", "while"}
)  # fmt: skip
TYPE_NAMES: Final = frozenset(
    {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type",
     "dyn"}
)  # fmt: skip

_OPEN: Final = frozenset("([{")
_CLOSE: Final = frozenset(")]}")
_TOKEN_RE: Final = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<comment>//[^\n]*)
    | (?P<str>
          (?:[rR][bB]?|[bB][rR])
          (?:\"\"\"(?:(?!\"\"\").)*(?:\"\"\"|\Z) | '''(?:(?!''').)*(?:'''|\Z)
            | "[^"\r\n]*"? | '[^'\r\n]*'? )
        | [bB]?
          (?:\"\"\"(?:\\.|(?!\"\"\")[^\\])*(?:\"\"\"|\Z) | '''(?:\\.|(?!''')[^\\])*(?:'''|\Z)
            | "(?:\\.|[^\\"\r\n])*"? | '(?:\\.|[^\\'\r\n])*'? ) )
    | (?P<num>0[xX][0-9a-fA-F]+[uU]? | (?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[uU]?)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>==|!=|<=|>=|&&|\|\||.)
    """,
    re.VERBOSE | re.DOTALL,
)
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
_KEY_RE: Final = re.compile(r"""(["'])([A-Za-z_][A-Za-z0-9_]*)\1""")


@dataclass(frozen=True, slots=True)
class Compiled:
    """A checked, compiled expression."""

    source: str
    program: cel.Program
    roots: frozenset[str]  # the schema variables the expression uses (job, pool, mesh, ...)


class ExpressionError(ValueError):
    """An expression that cannot be used; the message is one line that says what was expected."""

    def __init__(self, message: str) -> None:
        super().__init__(_one_line(message))


class Token(NamedTuple):
    kind: str  # "str", "num", "ident" or "op"
    text: str
    pos: int


def compile_checked(
    source: str, allowed: Collection[str], schema: Mapping[str, Any] = SCHEMA
) -> Compiled:
    """Compile a CEL expression after checking its size, nesting and every reference.

    ``allowed`` names the variables this kind of expression may use (``victim`` only in
    preemption rules); ``schema`` describes their fields. Raises ``ExpressionError`` with a
    one-line message for the first problem found.
    """
    program, problems, roots = _analyse(source, allowed, schema)
    if problems or program is None:
        raise ExpressionError(problems[0] if problems else "invalid expression")
    return Compiled(source=source, program=program, roots=roots)


def check_source(
    source: str, allowed: Collection[str], schema: Mapping[str, Any] = SCHEMA
) -> list[str]:
    """Every problem ``compile_checked`` would find, as one-line messages; empty when fine."""
    return [_one_line(problem) for problem in _analyse(source, allowed, schema)[1]]


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


def tokenize(source: str) -> Iterator[Token]:
    """The tokens of ``source`` without spaces and comments; total over any text."""
    pos = 0
    while pos < len(source):
        match = _TOKEN_RE.match(source, pos)
        if match is None or match.lastgroup is None:  # unreachable: `.` matches any char
            yield Token("op", source[pos], pos)
            pos += 1
            continue
        if match.lastgroup not in ("space", "comment"):
            yield Token(match.lastgroup, match.group(), pos)
        pos = match.end()


def _analyse(
    source: str, allowed: Collection[str], schema: Mapping[str, Any]
) -> tuple[cel.Program | None, list[str], frozenset[str]]:
    problem = _size_problem(source)
    if problem is not None:
        return None, [problem], frozenset()
    try:
        program = cel.compile(source)
    except ValueError as error:
        return None, [_syntax_message(source, error)], frozenset()
    variables = program.variables()
    checker = _Checker(source, frozenset(allowed), schema)
    checker.scan()
    problems = checker.problems
    for name in variables:
        if name not in checker.bound and name not in allowed and name not in TYPE_NAMES:
            _add(problems, checker.unavailable(name))
    used = checker.free | (frozenset(variables) - checker.bound)
    roots = frozenset(name for name in variables if name in schema and name in used)
    return program, problems, roots


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
                    f"{_where(source, token.pos)}; expected at most {MAX_NESTING} levels "
                    "of (), [] and {}"
                )
        elif token.text in _CLOSE:
            depth = max(depth - 1, 0)
    if len(source) > MAX_EXPRESSION_CHARS:
        return (
            f"expression is {len(source)} characters long; expected at most {MAX_EXPRESSION_CHARS}"
        )
    return None


def _where(source: str, pos: int) -> str:
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


def _add(problems: list[str], problem: str | None) -> None:
    if problem is not None and problem not in problems:
        problems.append(problem)


class _Checker:
    """Finds the variables and field paths in an expression that the parser has accepted."""

    def __init__(self, source: str, allowed: frozenset[str], schema: Mapping[str, Any]) -> None:
        self.source = source
        self.allowed = allowed
        self.schema = schema
        self.tokens = list(tokenize(source))
        self.pairs = _match_brackets(self.tokens)
        self.problems: list[str] = []
        self.free: set[str] = set()  # variables used outside any comprehension binding them
        self.bound: set[str] = set()  # names bound by comprehension macros
        self.binders: set[int] = set()  # the tokens that bind them
        self.elements: dict[int, Any] = {}  # macro "(" token -> schema of its bound variable

    def kind(self, i: int) -> str:
        return self.tokens[i].kind if 0 <= i < len(self.tokens) else ""

    def is_op(self, i: int, text: str) -> bool:
        return self.kind(i) == "op" and self.tokens[i].text == text

    def scan(self) -> None:
        scopes: list[tuple[str, int, Any]] = []  # (name, index of closing ")", schema)
        for i, token in enumerate(self.tokens):
            while scopes and scopes[-1][1] < i:
                scopes.pop()
            if token.kind != "ident" or token.text in KEYWORDS or i in self.binders:
                continue
            if self.is_op(i - 1, "."):
                self.bind(i, scopes)
            elif not self.is_op(i + 1, "("):  # a call of a global function is no reference
                self.root(i, scopes)

    def bind(self, i: int, scopes: list[tuple[str, int, Any]]) -> None:
        """``.exists(t, ...)`` binds ``t`` until its closing parenthesis."""
        if self.tokens[i].text not in MACROS or not self.is_op(i + 1, "("):
            return
        if self.kind(i + 2) != "ident" or not self.is_op(i + 3, ","):
            return
        name = self.tokens[i + 2].text
        self.binders.add(i + 2)
        self.bound.add(name)
        end = self.pairs.get(i + 1, len(self.tokens))
        scopes.append((name, end, self.elements.get(i + 1)))

    def root(self, i: int, scopes: Sequence[tuple[str, int, Any]]) -> None:
        name = self.tokens[i].text
        for bound, _, node in reversed(scopes):
            if bound == name:
                self.walk(i, node, name)
                return
        if name in self.allowed:
            self.free.add(name)
            self.walk(i, self.schema.get(name), name)
        elif name not in TYPE_NAMES:
            _add(self.problems, self.unavailable(name))

    def unavailable(self, name: str) -> str:
        allowed = sorted(self.allowed)
        expected = "expected one of: " + ", ".join(allowed) if allowed else "expected none"
        if name in self.schema:
            return f"variable '{name}' is not available here; {expected}"
        close = difflib.get_close_matches(name, allowed, n=1)
        if close:
            return f"unknown variable '{name}'; did you mean '{close[0]}'?"
        return f"unknown variable '{name}'; {expected}"

    def walk(self, i: int, node: Any, path: str) -> None:
        """Follow ``.field`` and ``[index]`` from the variable at token ``i``."""
        j = i + 1
        while True:
            if self.is_op(j, "["):
                close = self.pairs.get(j, len(self.tokens))
                node, problem = _index(node, path, self.literal_key(j, close))
                path += self.index_text(j, close)
                j = close + 1
            elif self.is_op(j, ".") and self.kind(j + 1) == "ident":
                name = self.tokens[j + 1].text
                if self.is_op(j + 2, "("):  # a method call, not a field
                    if name in MACROS:
                        self.elements[j + 2] = _element(node)
                    return
                node, problem = _field(node, path, name)
                path += "." + name
                j += 2
            else:
                return
            if problem is not None:
                _add(self.problems, problem)
                return

    def literal_key(self, open_: int, close: int) -> str | None:
        if close != open_ + 2 or self.kind(open_ + 1) != "str":
            return None
        match = _KEY_RE.fullmatch(self.tokens[open_ + 1].text)
        return match.group(2) if match else None

    def index_text(self, open_: int, close: int) -> str:
        if close >= len(self.tokens):
            return "[...]"
        text = self.source[self.tokens[open_].pos : self.tokens[close].pos + 1]
        return text if len(text) <= 24 and "\n" not in text else "[...]"


def _match_brackets(tokens: Sequence[Token]) -> dict[int, int]:
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for i, token in enumerate(tokens):
        if token.kind != "op":
            continue
        if token.text in _OPEN:
            stack.append(i)
        elif token.text in _CLOSE and stack:
            pairs[stack.pop()] = i
    return pairs


def _article(type_name: str) -> str:
    return ("an " if type_name[:1] in "aeiou" else "a ") + type_name


def _leaf_element(type_name: str) -> str | None:
    """``list<string>`` -> ``string``; ``map<K, V>`` -> ``V``; other leaves have none."""
    if type_name.startswith("list<") and type_name.endswith(">"):
        return type_name[5:-1].strip()
    if type_name.startswith("map<") and type_name.endswith(">"):
        return type_name[4:-1].partition(",")[2].strip() or None
    return None


def _field(node: Any, path: str, name: str) -> tuple[Any, str | None]:
    """The schema of ``path.name``, or a problem."""
    if node is None:
        return None, None
    if isinstance(node, str):
        return None, f"{path} is {_article(node)}, it has no field '{name}'"
    if "*" in node:  # a map with any keys also allows `.key`
        return node["*"], None
    if "[]" in node:
        return None, f"{path} is a list, it has no field '{name}'; expected an index first"
    if name in node:
        return node[name], None
    return None, f"{path} has no field '{name}'; {_suggest(node, name)}"


def _suggest(node: Mapping[str, Any], name: str) -> str:
    """A close field name, else a close nested one (``resources.gpus`` for ``gpu``), else all."""
    fields = sorted(node)
    close = difflib.get_close_matches(name, fields, n=1)
    if close:
        return f"did you mean '{close[0]}'?"
    nested = _nested_fields(node)
    close = difflib.get_close_matches(name, list(nested), n=1)
    if close:
        return f"did you mean '{nested[close[0]]}'?"
    return "expected one of: " + ", ".join(fields)


def _nested_fields(node: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Field name -> its shallowest path below ``node``, through plain objects only."""
    found: dict[str, str] = {}
    children = [(k, v) for k, v in sorted(node.items()) if _is_object(v)]
    for key, child in children:
        for name in sorted(child):
            found.setdefault(name, f"{prefix}{key}.{name}")
    for key, child in children:
        for name, path in _nested_fields(child, f"{prefix}{key}.").items():
            found.setdefault(name, path)
    return found


def _is_object(node: Any) -> bool:
    return isinstance(node, Mapping) and "*" not in node and "[]" not in node


def _index(node: Any, path: str, key: str | None) -> tuple[Any, str | None]:
    """The schema of ``path[...]``, or a problem; a literal string key of an object is a field."""
    if node is None:
        return None, None
    if isinstance(node, str):
        element = _leaf_element(node)
        if element is None:
            return None, f"{path} is {_article(node)}, it cannot be indexed"
        return element, None
    if "*" in node:
        return node["*"], None
    if "[]" in node:
        return node["[]"], None
    return _field(node, path, key) if key is not None else (None, None)


def _element(node: Any) -> Any:
    """The schema of the variable a macro binds over ``node``: list elements or map keys."""
    if node is None:
        return None
    if isinstance(node, str):
        if node.startswith("map<"):
            return node[4:].partition(",")[0].strip() or None
        return _leaf_element(node)
    if "[]" in node:
        return node["[]"]
    return "string"  # maps and objects iterate over their keys
