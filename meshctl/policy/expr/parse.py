"""A recursive-descent parser of CEL into the AST of nodes.py, accepting what ``cel.compile``
accepts (tests/unit/policy/test_expr_parse.py holds it to that, with Hypothesis).

The grammar is CEL's (CEL.g4), with the checks the ``cel`` package adds after parsing:

    expr     = or ["?" or ":" expr]
    or       = and {"||" and}          and      = relation {"&&" relation}
    relation = calc {("<"|"<="|">="|">"|"=="|"!="|"in") calc}
    calc     = product {("+"|"-") product}     product = unary {("*"|"/"|"%") unary}
    unary    = member | "!"{"!"} member | "-"{"-"} member
    member   = primary {"." IDENT ["(" [args] ")"] | "[" expr "]"}
    primary  = ["."] IDENT ["(" [args] ")"] | "(" expr ")" | "[" [exprs] [","] "]"
             | "{" [entries] [","] "}" | ["."] IDENT {"." IDENT} "{" [fields] [","] "}"
             | ["-"] NUM_INT | NUM_UINT | ["-"] NUM_FLOAT | STRING | BYTES | true | false | null

A ``-`` directly before an int or double literal is its sign (so ``-9223372036854775808`` is
in range) unless more ``-`` come before it. ``has(x)`` needs a field selection; a macro's first
argument must be a name; reserved words (``if``, ``for`` ...) are not names; ``?`` (optional
syntax) and backquoted names are not supported; expressions may nest 96 deep (brackets and
``?:`` branches), as in ``cel``. Loops, not recursion, parse chains, so only nesting recurses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Final, NoReturn, TypeVar

from meshctl.policy.expr import literals
from meshctl.policy.expr.lex import Token, tokenize
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

MAX_DEPTH: Final = 96  # the cel parser's recursion limit, in nested expressions
MACROS: Final = {
    "all": (2,),
    "exists": (2,),
    "exists_one": (2,),
    "existsOne": (2,),
    "filter": (2,),
    "map": (2, 3),
}
RESERVED: Final = frozenset(
    {"as", "break", "const", "continue", "else", "for", "function", "if", "import", "let",
     "loop", "package", "namespace", "return", "var", "void", "while"}
)  # fmt: skip
KEYWORDS: Final = frozenset({"true", "false", "null", "in"})  # tokens of their own, not names
RELATIONS: Final = frozenset({"<", "<=", ">=", ">", "==", "!="})
T = TypeVar("T")


class ParseError(ValueError):
    """Not an expression ``cel`` accepts; ``pos`` is the offset where parsing stopped."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.pos = pos


def parse(source: str) -> Node:
    """The AST of ``source``; ``ParseError`` if ``cel.compile`` would reject it."""
    return _Parser(source).parse()


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = list(tokenize(source))
        self.i = 0
        self.depth = 0

    # --- tokens ------------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def at_op(self, text: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token is not None and token.kind == "op" and token.text == text

    def at_name(self, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token is not None and token.kind == "ident" and token.text not in KEYWORDS

    def pos(self) -> int:
        token = self.peek()
        return token.pos if token is not None else len(self.source)

    def take(self) -> Token:
        token = self.peek()
        if token is None:
            self.fail("unexpected end of input")
        self.i += 1
        return token

    def expect(self, text: str) -> Token:
        if not self.at_op(text):
            self.fail(f"expected '{text}'")
        return self.take()

    def fail(self, message: str, pos: int | None = None) -> NoReturn:
        where = self.pos() if pos is None else pos
        token = self.peek() if pos is None else None
        found = f", found '{token.text}'" if token is not None else ""
        raise ParseError(f"{message}{found}", where)

    def end_of(self, token: Token) -> int:
        return token.pos + len(token.text)

    # --- the grammar -------------------------------------------------------------------------

    def parse(self) -> Node:
        node = self.expr()
        if self.peek() is not None:
            self.fail("expected an operator or the end")
        return node

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(f"expressions nest more than {MAX_DEPTH} deep")

    def expr(self) -> Node:
        """``c1 ? t1 : c2 ? t2 : e``, in a loop: each else branch nests one level deeper."""
        entered = 1
        self.nest()
        branches: list[tuple[Node, Node]] = []
        node = self.logical_or()
        while self.at_op("?"):
            self.take()
            then = self.logical_or()
            self.expect(":")
            branches.append((node, then))
            self.nest()
            entered += 1
            node = self.logical_or()
        for cond, then in reversed(branches):
            node = Conditional(cond.start, node.end, cond, then, node)
        self.depth -= entered
        return node

    def logical_or(self) -> Node:
        operands = self.operands("||", self.logical_and)
        if len(operands) == 1:
            return operands[0]
        return Logical(operands[0].start, operands[-1].end, "||", operands)

    def logical_and(self) -> Node:
        operands = self.operands("&&", self.relation)
        if len(operands) == 1:
            return operands[0]
        return Logical(operands[0].start, operands[-1].end, "&&", operands)

    def operands(self, op: str, operand: Callable[[], Node]) -> tuple[Node, ...]:
        found = [operand()]
        while self.at_op(op):
            self.take()
            found.append(operand())
        return tuple(found)

    def relation(self) -> Node:
        return self.chain(self.calc, _is_relation)

    def calc(self) -> Node:
        return self.chain(self.product, lambda t: t.kind == "op" and t.text in ("+", "-"))

    def product(self) -> Node:
        return self.chain(self.unary, lambda t: t.kind == "op" and t.text in ("*", "/", "%"))

    def chain(self, operand: Callable[[], Node], is_op: Callable[[Token], bool]) -> Node:
        operands: list[Node] = [operand()]
        ops: list[str] = []
        positions: list[int] = []
        while (token := self.peek()) is not None and is_op(token):
            self.take()
            ops.append(token.text)
            positions.append(token.pos)
            operands.append(operand())
        if not ops:
            return operands[0]
        return Chain(
            operands[0].start, operands[-1].end, tuple(operands), tuple(ops), tuple(positions)
        )

    def unary(self) -> Node:
        start = self.pos()
        for op in ("!", "-"):
            count = 0
            while self.at_op(op, count):
                count += 1
            if count == 0:
                continue
            if op == "-" and count == 1 and self.signed_number_next(1):
                return self.member()  # `-1`: a literal with its sign
            self.i += count
            operand = self.member()
            if count % 2 == 0:
                return operand
            return Unary(start, operand.end, "!" if op == "!" else "-", operand)
        return self.member()

    def signed_number_next(self, ahead: int) -> bool:
        token = self.peek(ahead)
        return token is not None and token.kind == "num" and literals.is_signed_number(token.text)

    def member(self) -> Node:
        node = self.primary()
        while True:
            if self.at_op(".") and self.at_name(1):
                self.take()
                name = self.take()
                if self.at_op("("):
                    node = self.method(node, name)
                else:
                    node = Select(node.start, self.end_of(name), node, name.text, name.pos)
            elif self.at_op("["):
                self.take()
                index = self.expr()
                node = Index(node.start, self.end_of(self.expect("]")), node, index)
            elif self.at_op("."):
                self.take()
                self.fail("expected a field name after '.'")
            else:
                return node

    def method(self, target: Node, name: Token) -> Node:
        args, end = self.arguments()
        arities = MACROS.get(name.text, ())
        if len(args) not in arities:
            return Call(target.start, end, name.text, target, args, name.pos)
        var = args[0]
        if not isinstance(var, Ident):
            self.fail("argument must be a simple name", var.start)
        return Comprehension(
            target.start, end, name.text, target, var.name, var.start, args[1:], name.pos
        )

    def arguments(self) -> tuple[tuple[Node, ...], int]:
        """``(a, b)``, from its ``(``: the arguments and the end of the ``)``."""
        self.expect("(")
        args: list[Node] = []
        if not self.at_op(")"):
            args.append(self.expr())
            while self.at_op(","):
                self.take()
                args.append(self.expr())
        return tuple(args), self.end_of(self.expect(")"))

    def primary(self) -> Node:
        token = self.peek()
        if token is None:
            self.fail("expected a value")
        if token.kind == "ident" or (token.kind == "op" and token.text == "." and self.at_name(1)):
            return self.name()
        if token.kind == "op" and token.text == "(":
            self.take()
            node = self.expr()
            close = self.expect(")")
            return replace(node, start=token.pos, end=self.end_of(close))  # its text: `(a)`
        if token.kind == "op" and token.text == "[":
            return self.list_()
        if token.kind == "op" and token.text == "{":
            return self.map_()
        if token.kind == "op" and token.text == "-" and self.signed_number_next(1):
            self.take()
            return self.number(self.take(), token.pos, negative=True)
        if token.kind == "num":
            return self.number(self.take(), token.pos, negative=False)
        if token.kind == "str":
            self.take()
            try:
                kind, value = literals.string(token.text)
            except ValueError as err:
                self.fail(str(err), token.pos)
            return Literal(token.pos, self.end_of(token), kind, value)
        self.fail("expected a value")

    def number(self, token: Token, start: int, negative: bool) -> Node:
        try:
            kind, value = literals.number(token.text, negative)
        except ValueError as err:
            self.fail(str(err), token.pos)
        return Literal(start, self.end_of(token), kind, value)

    def name(self) -> Node:
        start = self.pos()
        dot = "." if self.at_op(".") else ""
        if dot:
            self.take()
        token = self.take()
        if not dot and token.text in ("true", "false"):
            return Literal(start, self.end_of(token), "bool", token.text == "true")
        if not dot and token.text == "null":
            return Literal(start, self.end_of(token), "null", None)
        if token.text == "in":
            self.fail("expected a value", token.pos)
        if self.struct_ahead():
            return self.struct(start, dot + token.text)
        if token.text in RESERVED:
            self.fail(f"reserved identifier: {token.text}", token.pos)
        if self.at_op("("):
            args, end = self.arguments()
            if not dot and token.text == "has" and len(args) == 1:
                if not isinstance(args[0], Select | Has):
                    self.fail("invalid argument to has() macro", args[0].start)
                return Has(start, end, args[0])
            return Call(start, end, dot + token.text, None, args, token.pos)
        return Ident(start, self.end_of(token), dot + token.text)

    def struct_ahead(self) -> bool:
        """After a name: ``.name`` pairs, then ``{`` (a message to build)."""
        ahead = 0
        while self.at_op(".", ahead) and self.at_name(ahead + 1):
            ahead += 2
        return self.at_op("{", ahead)

    def struct(self, start: int, first: str) -> Node:
        parts = [first]
        while self.at_op("."):
            self.take()
            parts.append(self.take().text)
        self.expect("{")
        fields = self.items("}", self.field)
        return Struct(start, self.end_of(self.expect("}")), ".".join(parts), tuple(fields))

    def field(self) -> tuple[str, Node]:
        if not self.at_name():
            self.fail("expected a field name")
        name = self.take().text
        self.expect(":")
        return name, self.expr()

    def items(self, close: str, item: Callable[[], T]) -> list[T]:
        """``a, b`` up to ``close``, with an optional trailing comma (``[,]`` is empty)."""
        out: list[T] = []
        if self.at_op(close):
            return out
        if self.at_op(","):
            self.take()
            return out
        out.append(item())
        while self.at_op(","):
            self.take()
            if self.at_op(close):
                break
            out.append(item())
        return out

    def list_(self) -> Node:
        start = self.take().pos
        items = self.items("]", self.expr)
        return ListExpr(start, self.end_of(self.expect("]")), tuple(items))

    def map_(self) -> Node:
        start = self.take().pos
        entries = self.items("}", self.entry)
        return MapExpr(start, self.end_of(self.expect("}")), tuple(entries))

    def entry(self) -> tuple[Node, Node]:
        key = self.expr()
        self.expect(":")
        return key, self.expr()


def _is_relation(token: Token) -> bool:
    if token.kind == "op":
        return token.text in RELATIONS
    return token.kind == "ident" and token.text == "in"
