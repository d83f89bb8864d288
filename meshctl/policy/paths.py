"""Walking field paths against the variables' schema: ``job.gpu`` is an error with a
suggestion ("did you mean 'resources.gpus'?") before anything runs.

A small scan over the tokens (lex.py) of an expression the parser has already accepted:
variables, the fields and literal indexes that follow them, and the names comprehension macros
bind. It finds the references; the type checker (expr/check.py) then types the whole tree.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from meshctl.policy.expr.functions import MACROS, NAMESPACES
from meshctl.policy.expr.lex import Token, tokenize
from meshctl.policy.expr.parse import KEYWORDS, RESERVED
from meshctl.policy.expr.types import article

_NOT_NAMES: Final = KEYWORDS | RESERVED  # tokens that look like names but are none
TYPE_NAMES: Final = frozenset(
    {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type",
     "dyn"}
)  # fmt: skip
_OPEN: Final = frozenset("([{")
_CLOSE: Final = frozenset(")]}")
_KEY_RE: Final = re.compile(r"""(["'])([A-Za-z_][A-Za-z0-9_]*)\1""")
# Names an author may well write that are not there: what to write instead. A job asks for one
# kind of accelerator; a pool may carry several, so it has no single `accelerator`.
_INSTEAD: Final[Mapping[str, str]] = {
    "accelerator": "did you mean 'job.accelerator' (what the job asks of each device) or "
    "'pool.accelerator_types' (what a pool carries: "
    'pool.accelerator_types.all(a, a.vendor == "amd"))?',
    "pool.accelerator": "a pool may carry several kinds: did you mean 'accelerator_types' "
    "(pool.accelerator_types.all(a, a.memory_gib >= 80.0)) or 'vendors'?",
}


def _add(problems: list[str], problem: str | None) -> None:
    if problem is not None and problem not in problems:
        problems.append(problem)


class PathChecker:
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
            if token.kind != "ident" or token.text in _NOT_NAMES or i in self.binders:
                continue
            if self.is_op(i - 1, "."):
                self.bind(i, scopes)
            elif self.is_op(i + 1, "(") or self.namespace(i):
                continue  # a call of a global function (or optional.of) is no reference
            else:
                self.root(i, scopes)

    def namespace(self, i: int) -> bool:
        """``optional.of(...)``: a function's namespace, not a variable (unless one is bound
        or allowed under that name)."""
        return (
            self.tokens[i].text in NAMESPACES
            and self.tokens[i].text not in self.allowed
            and self.is_op(i + 1, ".")
            and self.is_op(i + 3, "(")
        )

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
        if name in _INSTEAD:
            return f"unknown variable '{name}'; {_INSTEAD[name]}"
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
        return None, f"{path} is {article(node)}, it has no field '{name}'"
    if "*" in node:  # a map with any keys also allows `.key`
        return node["*"], None
    if "[]" in node:
        return None, f"{path} is a list, it has no field '{name}'; expected an index first"
    if name in node:
        return node[name], None
    instead = _INSTEAD.get(f"{path}.{name}") or _suggest(node, name)
    return None, f"{path} has no field '{name}'; {instead}"


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
            return None, f"{path} is {article(node)}, it cannot be indexed"
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
