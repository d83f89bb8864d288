"""Presence tests that are valid CEL for any key, and the map lookups no presence test guards.

Suggestions are held to the CEL parser and checker meshctl uses, and to what they say when
run; the guard analysis is held to the runtime: an expression with no unguarded lookup never
fails for a missing key, whatever keys the map has.
"""

from __future__ import annotations

import cel
import pytest
from helpers import compiled, job, verdict
from hypothesis import given, settings
from hypothesis import strategies as st

from meshctl.policy.expr.guards import is_field_name, presence_test, string_literal
from meshctl.policy.refs import compile_checked

pytestmark = pytest.mark.unit

ROUTING = ("job", "mesh", "now", "pool")

# key -> the presence test on job.labels: has() only for a key that may follow a dot
SUGGESTIONS = [
    pytest.param("team", "has(job.labels.team)", id="plain"),
    pytest.param("_x1", "has(job.labels._x1)", id="underscore-and-digit"),
    pytest.param("data-class", '"data-class" in job.labels', id="hyphenated"),
    pytest.param("k8s.io/zone", '"k8s.io/zone" in job.labels', id="dotted"),
    pytest.param("1st", '"1st" in job.labels', id="starts-with-a-digit"),
    pytest.param('say "hi"', '"say \\"hi\\"" in job.labels', id="quoted"),
    pytest.param("a\\b", '"a\\\\b" in job.labels', id="backslash"),
    pytest.param("with space", '"with space" in job.labels', id="space"),
    pytest.param("line\nbreak", '"line\\nbreak" in job.labels', id="newline"),
    pytest.param("zoné", '"zoné" in job.labels', id="not-ascii"),
    pytest.param("in", '"in" in job.labels', id="keyword"),
    pytest.param("null", '"null" in job.labels', id="literal-word"),
    pytest.param("if", '"if" in job.labels', id="reserved-word"),
    pytest.param("", '"" in job.labels', id="empty"),
]


@pytest.mark.parametrize(("key", "expected"), SUGGESTIONS)
def test_a_presence_test_is_valid_cel_and_asks_for_its_key(key: str, expected: str):
    suggestion = presence_test("job.labels", key)
    assert suggestion == expected
    program = cel.compile(suggestion)  # the parser meshctl uses
    compile_checked(suggestion, ROUTING)  # and meshctl's checks, against the same variables
    assert program.execute({"job": {"labels": {key: "v"}}}) is True
    assert program.execute({"job": {"labels": {"other": "v"}}}) is False


@pytest.mark.parametrize(("key", "expected"), SUGGESTIONS)
def test_a_presence_test_compiles_on_any_map(key: str, expected: str):
    for operand in ("pool.labels", 'mesh.pools["onprem"].labels'):
        compile_checked(presence_test(operand, key), ROUTING)


@given(st.text(max_size=12))
def test_a_string_literal_reads_back_as_its_text(text: str):
    assert cel.compile(string_literal(text)).execute({}) == text


@given(st.text(alphabet="ab_-1.", min_size=1, max_size=6))
def test_has_is_suggested_only_where_it_parses(key: str):
    suggestion = presence_test("job.labels", key)
    assert suggestion.startswith("has(") == is_field_name(key)
    cel.compile(suggestion)


def test_the_fail_closed_message_suggests_valid_cel_for_a_hyphenated_key():
    policies = compiled(
        """pools: [{name: r, when: 'job.labels["data-class"] == "x"', deny: pool.cloud}]"""
    )
    (error,) = verdict(policies, job()).errors
    suggestion = error.message.split("; test for it with ")[1]
    assert suggestion == '"data-class" in job.labels'
    compile_checked(suggestion, ROUTING)


# source -> the unguarded lookups, each with the guarded form to write (None: guarded)
UNGUARDED = [
    pytest.param(
        'job.labels["data-class"] == "restricted"',
        [('job.labels["data-class"]',
          '"data-class" in job.labels && job.labels["data-class"] == "restricted"')],
        id="bare-index-hyphenated",
    ),
    pytest.param(
        'job.labels.team == "ads"',
        [("job.labels.team", 'has(job.labels.team) && job.labels.team == "ads"')],
        id="bare-select",
    ),
    pytest.param(
        'job.kind == "train" && job.labels.team == "ads"',
        [("job.labels.team", 'has(job.labels.team) && job.labels.team == "ads"')],
        id="the-operand-is-guarded-not-the-chain",
    ),
    pytest.param(
        'job.labels.team == "a" || job.labels.team == "b"',
        [("job.labels.team",
          'has(job.labels.team) && (job.labels.team == "a" || job.labels.team == "b")')],
        id="two-lookups-one-guard-around-the-or",
    ),
    pytest.param(
        'job.kind == "x" && (job.labels.team == "a" || job.labels.team == "b")',
        [("job.labels.team",
          'has(job.labels.team) && (job.labels.team == "a" || job.labels.team == "b")')],
        id="a-bracketed-or-is-not-bracketed-twice",
    ),
    pytest.param(
        'pool.cloud && pool.labels.tier == "burst"',
        [("pool.labels.tier", 'has(pool.labels.tier) && pool.labels.tier == "burst"')],
        id="pool-labels",
    ),
    pytest.param(
        "mesh.teams.ads.gpus_in_use > 8.0",
        [("mesh.teams.ads", "has(mesh.teams.ads) && mesh.teams.ads.gpus_in_use > 8.0")],
        id="a-team-without-usage-is-missing",
    ),
    pytest.param(
        'has(job.labels.owner) && job.labels.team == "ads"',
        [("job.labels.team", 'has(job.labels.team) && job.labels.team == "ads"')],
        id="a-guard-of-another-key",
    ),
    pytest.param(
        'has(pool.labels.team) && job.labels.team == "ads"',
        [("job.labels.team", 'has(job.labels.team) && job.labels.team == "ads"')],
        id="a-guard-of-another-map",
    ),
    pytest.param(
        'has(job.labels.team) || job.labels.team == "ads"',
        [("job.labels.team", 'has(job.labels.team) && job.labels.team == "ads"')],
        id="a-true-operand-of-or-guards-nothing",
    ),
    pytest.param(
        'has(job.labels.team) ? false : job.labels.team == "ads"',
        [("job.labels.team",
          'has(job.labels.team) && (has(job.labels.team) ? false : job.labels.team == "ads")')],
        id="the-wrong-branch",
    ),
    pytest.param(
        'mesh.pools.filter(p, mesh.pools[p].labels.tier == "x").size() > 0',
        [("mesh.pools[p].labels.tier",
          'has(mesh.pools[p].labels.tier) && mesh.pools[p].labels.tier == "x"')],
        id="inside-a-macro-the-guard-stays-inside",
    ),
    pytest.param(
        "mesh.pools.map(p, mesh.pools[p].labels.tier).size() > 0",
        [("mesh.pools[p].labels.tier", None)],
        id="a-map-macro-value-has-no-guarded-form",
    ),
    pytest.param('has(job.labels.team) && job.labels.team == "ads"', [], id="has-before"),
    pytest.param('job.labels.team == "ads" && has(job.labels.team)', [], id="has-after"),
    pytest.param(
        '"data-class" in job.labels && job.labels["data-class"] == "x"', [], id="in-guard"
    ),
    pytest.param('"team" in job.labels && job.labels.team == "x"', [], id="in-guards-select"),
    pytest.param('!has(job.labels.team) || job.labels.team == "ads"', [], id="or-not-has"),
    pytest.param('!("team" in job.labels) || job.labels.team == "x"', [], id="or-not-in"),
    pytest.param('has(job.labels.team) ? job.labels.team == "a" : false', [], id="then"),
    pytest.param('!has(job.labels.team) ? false : job.labels.team == "a"', [], id="else"),
    pytest.param(
        'job.kind == "t" && (has(job.labels.a) && has(job.labels.b))'
        " && job.labels.a == job.labels.b",
        [],
        id="proved-by-a-nested-and",
    ),
    pytest.param('mesh.pools["onprem"].expected_wait_s > 1.0', [], id="pool-keys-are-checked"),
    pytest.param("mesh.pools.exists(p, mesh.pools[p].cloud)", [], id="a-computed-key"),
    pytest.param('job.data.sets[0].name == "x"', [], id="a-list-index-is-not-a-map-lookup"),
]  # fmt: skip


@pytest.mark.parametrize(("source", "expected"), UNGUARDED)
def test_unguarded_lookups_and_their_guarded_form(source: str, expected: list[tuple[str, str]]):
    found = compile_checked(source, ROUTING).unguarded
    assert [(u.lookup, u.guarded) for u in found] == expected
    for u in found:
        if u.guarded is not None:  # what it suggests is clean
            start, end = u.span
            fixed = source[:start] + u.guarded + source[end:]
            assert compile_checked(fixed, ROUTING).unguarded == ()


# Boolean atoms over two labels (one a name, one not), and how they combine.
ATOMS = [
    'job.labels.a == "x"',
    'job.labels["b-c"] == "x"',
    "has(job.labels.a)",
    '"a" in job.labels',
    '"b-c" in job.labels',
    'job.kind == "train"',
    "true",
    "false",
]
LABELS = [{}, {"a": "x"}, {"b-c": "x"}, {"a": "y", "b-c": "x"}]


@st.composite
def conditions(draw: st.DrawFn, depth: int = 0) -> str:
    if depth >= 3 or draw(st.booleans()):
        return draw(st.sampled_from(ATOMS))
    shape = draw(st.sampled_from(["and", "or", "not", "if"]))
    a, b = draw(conditions(depth + 1)), draw(conditions(depth + 1))
    if shape == "not":
        return f"!({a})"
    if shape == "if":
        return f"({a}) ? ({b}) : ({draw(conditions(depth + 1))})"
    return f"({a}) {'&&' if shape == 'and' else '||'} ({b})"


@settings(max_examples=300, deadline=None)
@given(conditions())
def test_an_expression_without_unguarded_lookups_never_fails_for_a_missing_key(source: str):
    checked = compile_checked(source, ROUTING)
    if checked.unguarded:
        return
    for labels in LABELS:
        checked.program.execute({"job": {"labels": labels, "kind": "train"}})  # never raises


@settings(max_examples=300, deadline=None)
@given(conditions())
def test_writing_the_guarded_form_removes_the_warning(source: str):
    for u in compile_checked(source, ROUTING).unguarded:
        assert u.guarded is not None
        start, end = u.span
        fixed = compile_checked(source[:start] + u.guarded + source[end:], ROUTING)
        assert (u.operand, u.key) not in {(v.operand, v.key) for v in fixed.unguarded}
