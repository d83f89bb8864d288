"""The CEL parser: it accepts exactly what `cel.compile` accepts, and builds the tree it says."""

from __future__ import annotations

import cel
import pytest
from expr_strategies import noisy
from hypothesis import given, settings
from hypothesis import strategies as st

from meshctl.policy.expr import ParseError, parse
from meshctl.policy.expr.nodes import (
    Chain,
    Comprehension,
    Conditional,
    Has,
    Literal,
    Logical,
    Node,
    Struct,
    Unary,
    children,
)

pytestmark = pytest.mark.unit


def cel_accepts(source: str) -> bool:
    try:
        cel.compile(source)
    except Exception:
        return False
    return True


def we_accept(source: str) -> bool:
    try:
        parse(source)
    except ParseError:
        return False
    return True


# Where cel's parser is particular: each of these is accepted or rejected as cel does it.
EDGES = [
    pytest.param("01u", True, id="a-uint-with-a-leading-zero"),
    pytest.param("007u == 7u", True, id="a-uint-with-leading-zeros"),
    pytest.param("[1, 2,]", True, id="trailing-comma-in-a-list"),
    pytest.param("[,]", True, id="a-lone-comma-is-an-empty-list"),
    pytest.param("[,,]", False, id="two-lone-commas"),
    pytest.param("f(1,)", False, id="no-trailing-comma-in-arguments"),
    pytest.param("Foo{a: 1}", True, id="message-construction-parses"),
    pytest.param('Foo{"a": 1}', False, id="message-fields-are-names"),
    pytest.param("a[?1]", False, id="optional-index-unsupported"),
    pytest.param("a.?b", False, id="optional-select-unsupported"),
    pytest.param("-9223372036854775808", True, id="int-min-with-its-sign"),
    pytest.param("--9223372036854775808", False, id="two-signs-leave-it-out-of-range"),
    pytest.param("9223372036854775808", False, id="int-overflow"),
    pytest.param("18446744073709551615u", True, id="uint-max"),
    pytest.param("0X1F", False, id="hex-needs-a-small-x"),
    pytest.param("1.5u", False, id="no-unsigned-doubles"),
    pytest.param("1e400", False, id="double-overflow"),
    pytest.param("1.e3", True, id="int-then-a-field"),
    pytest.param("1.", False, id="dangling-dot"),
    pytest.param('"\\q"', False, id="unknown-escape"),
    pytest.param('"\\uD800"', False, id="surrogate-escape"),
    pytest.param('b"\\u0041"', False, id="no-unicode-escapes-in-bytes"),
    pytest.param('rb"a"', False, id="raw-before-bytes"),
    pytest.param('br"a"', True, id="bytes-then-raw"),
    pytest.param("has(a)", False, id="has-needs-a-field"),
    pytest.param("has(a[0])", False, id="has-of-an-index"),
    pytest.param("has(!!a.b)", True, id="double-negation-vanishes"),
    pytest.param("has(has(a.b))", True, id="has-of-has"),
    pytest.param("a.all(1, x)", False, id="macro-variable-must-be-a-name"),
    pytest.param("a.all(x)", True, id="one-argument-all-is-a-method"),
    pytest.param("if", False, id="reserved-word"),
    pytest.param("a.if", True, id="reserved-word-as-a-field"),
    pytest.param("if{}", True, id="reserved-word-as-a-message"),
    pytest.param("a.in", False, id="keyword-as-a-field"),
    pytest.param("!-1", True, id="not-of-a-signed-literal"),
    pytest.param("!-a", False, id="not-then-minus-a-name"),
    pytest.param("a ? b ? c : d : e", False, id="nested-conditional-needs-parens"),
    pytest.param("(x)(y)", False, id="calling-a-value"),
    pytest.param("a\vb", False, id="vertical-tab-is-not-a-space"),
    pytest.param("a // note\n && b", True, id="comment"),
    pytest.param("true?1:" * 95 + "2", True, id="nesting-at-the-limit"),
    pytest.param("true?1:" * 96 + "2", False, id="nesting-past-the-limit"),
]


@pytest.mark.parametrize(("source", "accepted"), EDGES)
def test_edges_are_parsed_as_cel_parses_them(source: str, accepted: bool) -> None:
    assert cel_accepts(source) is accepted  # the table itself is cel's behaviour
    assert we_accept(source) is accepted


@settings(max_examples=400, deadline=None)
@given(noisy())
def test_the_parser_accepts_exactly_what_cel_compile_accepts(source: str) -> None:
    assert we_accept(source) is cel_accepts(source)


_CHARS = [*"ab1 0xuUeE.+-\"'\\rRbBnq()[]{},:?!=<>&|*/%_\n`", "in", "has(", '"""']


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_CHARS), min_size=1, max_size=10).map("".join))
def test_the_lexer_agrees_with_cel_on_character_soup(source: str) -> None:
    assert we_accept(source) is cel_accepts(source)


def text(node: Node, source: str) -> str:
    return source[node.start : node.end]


def test_precedence_and_chains() -> None:
    source = "a || b && c < d + e * f"
    tree = parse(source)
    assert isinstance(tree, Logical)
    assert tree.op == "||"
    right = tree.operands[1]
    assert isinstance(right, Logical)
    assert right.op == "&&"
    relation = right.operands[1]
    assert isinstance(relation, Chain)
    assert relation.ops == ("<",)
    assert text(relation.operands[1], source) == "d + e * f"


def test_conditionals_nest_to_the_right() -> None:
    tree = parse("a ? b : c ? d : e")
    assert isinstance(tree, Conditional)
    assert isinstance(tree.otherwise, Conditional)


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        pytest.param("!!x", "Select", id="even-not-vanishes"),
        pytest.param("!!!x", "Unary", id="odd-not-is-one"),
        pytest.param("-1", "Literal", id="signed-literal"),
        pytest.param("--1", "Literal", id="even-minus-vanishes"),
        pytest.param("-1u", "Unary", id="uint-has-no-sign"),
    ],
)
def test_runs_of_unary_operators(source: str, kind: str) -> None:
    tree = parse(source.replace("x", "a.b"))
    assert type(tree).__name__ == kind
    if isinstance(tree, Unary):
        assert tree.op in ("!", "-")


def test_macros_has_and_messages() -> None:
    tree = parse("job.data.sets.exists(d, has(d.tags))")
    assert isinstance(tree, Comprehension)
    assert (tree.macro, tree.var) == ("exists", "d")
    assert isinstance(tree.args[0], Has)
    assert isinstance(parse("Foo.Bar{a: 1}"), Struct)


def test_literal_values() -> None:
    values = [parse(s) for s in ['"a\\x41\\u00e9"', "0x10", "7u", "2.5", "b'\\377'", "null"]]
    assert all(isinstance(v, Literal) for v in values)
    assert [v.value for v in values if isinstance(v, Literal)] == [
        "aAé",
        16,
        7,
        2.5,
        b"\xff",
        None,
    ]


@settings(max_examples=200, deadline=None)
@given(noisy())
def test_every_node_is_an_expression_of_its_own(source: str) -> None:
    # explain re-runs operands from their text: each node's must compile alone
    try:
        tree = parse(source)
    except ParseError:
        return
    stack = [tree]
    while stack:
        node = stack.pop()
        assert cel_accepts(text(node, source)), text(node, source)
        stack.extend(children(node))
