"""Static checks of policy expressions: size, nesting, syntax, variables and field paths."""

from __future__ import annotations

import time

import cel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshctl.policy.refs import (
    MAX_EXPRESSION_CHARS,
    ExpressionError,
    check_source,
    compile_checked,
    tokenize,
)

pytestmark = pytest.mark.unit

ROUTING = ("job", "pool", "mesh", "now")
PREEMPTION = ("job", "pool", "mesh", "now", "victim")
ADMISSION = ("job", "mesh", "now")

VALID = [
    pytest.param(
        'job.criticality != "critical" && mesh.pools["onprem"].expected_wait_s > 600.0',
        ROUTING,
        {"job", "mesh"},
        id="wait-on-named-pool",
    ),
    pytest.param('"pii" in job.data.tags', ROUTING, {"job"}, id="in-list"),
    pytest.param('pool.labels.tier == "burst"', ROUTING, {"pool"}, id="map-field-style-key"),
    pytest.param(
        'victim.kind == "train" && victim.runtime_s > 900.0',
        PREEMPTION,
        {"victim"},
        id="victim-in-preemption",
    ),
    pytest.param(
        'job.data.sets.exists(d, d.residency == "eu")', ROUTING, {"job"}, id="macro-binds"
    ),
    pytest.param("now.getHours() < 8", ROUTING, {"now"}, id="method-on-timestamp"),
    pytest.param('job.name == "job.gpu"', ROUTING, {"job"}, id="path-inside-string"),
    pytest.param("job.name == 'job.gpu.x' || job.team == '''a.b'''", ROUTING, {"job"}, id="quotes"),
    pytest.param('job.name.matches(r"^job\\.gpu$")', ROUTING, {"job"}, id="raw-string"),
    pytest.param('job.name.startsWith("llm-")', ROUTING, {"job"}, id="method-on-string"),
    pytest.param("size(job.labels) > 2", ROUTING, {"job"}, id="global-function"),
    pytest.param('job.labels["team"] == "vision"', ROUTING, {"job"}, id="map-index"),
    pytest.param(
        "mesh.pools[pool.name].free_gpus >= job.resources.gpus",
        ROUTING,
        {"mesh", "pool", "job"},
        id="index-by-expression",
    ),
    pytest.param('"eu" in job.data.sets[0].tags', ROUTING, {"job"}, id="list-index"),
    pytest.param("has(job.resources.gpus)", ROUTING, {"job"}, id="has-macro"),
    pytest.param(
        'job.data.tags.exists(t, t.startsWith("pii"))', ROUTING, {"job"}, id="bound-string"
    ),
    pytest.param(
        "mesh.teams[job.team].gpus_in_use + job.resources.gpus <= 64.0",
        ADMISSION,
        {"mesh", "job"},
        id="team-quota",
    ),
    pytest.param(
        "pool.usd_per_gpu_hour * job.resources.gpus <= job.limits.max_usd_per_hour",
        ROUTING,
        {"pool", "job"},
        id="cost-limit",
    ),
    pytest.param(
        "1.5 + 2e3 + double(1u) + .5 > 0.0 && job.resources.nodes > 0x0",
        ROUTING,
        {"job"},
        id="numbers",
    ),
    pytest.param(
        "job.resources.gpus > 1.0 // job.gpu in a comment\n  && true",
        ROUTING,
        {"job"},
        id="comment",
    ),
    pytest.param(
        "mesh.pools.exists(p, mesh.pools[p].cloud && mesh.pools[p].free_gpus > 0.0)",
        ROUTING,
        {"mesh"},
        id="iterate-map-keys",
    ),
    pytest.param(
        "job.data.sets.map(d, d.size_gib).exists(s, s > 100.0)",
        ROUTING,
        {"job"},
        id="chained-macros",
    ),
    pytest.param(
        "type(job.resources.nodes) == int && !(null == job.name)",
        ROUTING,
        {"job"},
        id="type-names-and-keywords",
    ),
    pytest.param(
        "job.data.sets.all(job, job.residency == 'eu')",
        ROUTING,
        {"job"},
        id="bound-name-shadows-variable",
    ),
    pytest.param(
        'job.resources.accelerators[0] == "h100" && pool.accelerators.exists(a, a == "h100")',
        ROUTING,
        {"job", "pool"},
        id="list-leaf-index",
    ),
]

INVALID = [
    pytest.param(
        "a >",
        ROUTING,
        "syntax error at column 4: mismatched input '<EOF>' expecting a value",
        id="syntax-missing-operand",
    ),
    pytest.param(
        "job.name job.team",
        ROUTING,
        "syntax error at column 10: mismatched input 'job' expecting an operator or end of input",
        id="syntax-missing-operator",
    ),
    pytest.param(
        "job.name.startsWith(",
        ROUTING,
        "syntax error at column 21: mismatched input '<EOF>' expecting a value or ')'",
        id="syntax-unclosed-call",
    ),
    pytest.param(
        'job.name == "abc',
        ROUTING,
        "syntax error at column 13: token recognition error at: '\"abc'",
        id="syntax-unclosed-string",
    ),
    pytest.param(
        "job.name ==\n  ",
        ROUTING,
        "syntax error at line 2, column 3: mismatched input '<EOF>' expecting a value",
        id="syntax-second-line",
    ),
    pytest.param(
        "job.labels[1",
        ROUTING,
        "syntax error at column 13: missing ']' at '<EOF>'",
        id="syntax-missing-bracket",
    ),
    pytest.param(
        "jbo.name == 'a'",
        ROUTING,
        "unknown variable 'jbo'; did you mean 'job'?",
        id="unknown-root-suggested",
    ),
    pytest.param(
        "request.size > 1",
        ADMISSION,
        "unknown variable 'request'; expected one of: job, mesh, now",
        id="unknown-root",
    ),
    pytest.param(
        "victim.priority < 10",
        ADMISSION,
        "variable 'victim' is not available here; expected one of: job, mesh, now",
        id="root-not-allowed",
    ),
    pytest.param(
        "job.data.tags.exists(victim, victim == 'a') && victim.pool == 'x'",
        ADMISSION,
        "variable 'victim' is not available here; expected one of: job, mesh, now",
        id="root-not-allowed-outside-binding",
    ),
    pytest.param(
        "job.resources.gpu > 1.0",
        ROUTING,
        "job.resources has no field 'gpu'; did you mean 'gpus'?",
        id="unknown-nested-field",
    ),
    pytest.param(
        "job.gpu > 1.0",
        ROUTING,
        "job has no field 'gpu'; did you mean 'resources.gpus'?",
        id="unknown-field-deeper-suggestion",
    ),
    pytest.param(
        "job.critcality == 'critical'",
        ROUTING,
        "job has no field 'critcality'; did you mean 'criticality'?",
        id="unknown-field-suggested",
    ),
    pytest.param(
        "mesh.zzz",
        ROUTING,
        "mesh has no field 'zzz'; expected one of: pools, teams",
        id="unknown-field-listed",
    ),
    pytest.param(
        "job.name.first == 'a'",
        ROUTING,
        "job.name is a string, it has no field 'first'",
        id="field-on-leaf",
    ),
    pytest.param(
        "now.hour < 8", ROUTING, "now is a timestamp, it has no field 'hour'", id="field-on-root"
    ),
    pytest.param(
        'mesh.pools["onprem"].free_gpu > 0.0',
        ROUTING,
        "mesh.pools[\"onprem\"] has no field 'free_gpu'; did you mean 'free_gpus'?",
        id="field-after-map-index",
    ),
    pytest.param(
        "job.data.sets.exists(d, d.residence == 'eu')",
        ROUTING,
        "d has no field 'residence'; did you mean 'residency'?",
        id="field-of-bound-element",
    ),
    pytest.param(
        "job.data.sets.tags",
        ROUTING,
        "job.data.sets is a list, it has no field 'tags'; expected an index first",
        id="field-on-list",
    ),
    pytest.param(
        "has(job.resources.gpu)",
        ROUTING,
        "job.resources has no field 'gpu'; did you mean 'gpus'?",
        id="has-checked",
    ),
    pytest.param(
        "job.name[0] == 'a'", ROUTING, "job.name is a string, it cannot be indexed", id="index-leaf"
    ),
    pytest.param(
        "x" * (MAX_EXPRESSION_CHARS + 1),
        ROUTING,
        f"expression is {MAX_EXPRESSION_CHARS + 1} characters long; expected at most 4096",
        id="too-long",
    ),
    pytest.param(
        "(" * 10000 + "1" + ")" * 10000,
        ROUTING,
        "brackets nest deeper than 32 levels at column 33; expected at most 32 levels of (), []"
        " and {}",
        id="too-deep",
    ),
    pytest.param(
        "[" * 20 + "{1: (" * 13 + "1",
        ROUTING,
        "brackets nest deeper than 32 levels at column 51; expected at most 32 levels of (), []"
        " and {}",
        id="too-deep-mixed",
    ),
]


@pytest.mark.parametrize(("source", "allowed", "roots"), VALID)
def test_valid_expressions_compile(source: str, allowed: tuple[str, ...], roots: set[str]) -> None:
    compiled = compile_checked(source, allowed)
    assert compiled.source == source
    assert compiled.roots == roots
    assert check_source(source, allowed) == []


@pytest.mark.parametrize(("source", "allowed", "message"), INVALID)
def test_invalid_expressions_say_what_was_expected(
    source: str, allowed: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_checked(source, allowed)
    assert str(caught.value) == message
    assert check_source(source, allowed)[0] == message


def test_compiled_program_runs() -> None:
    compiled = compile_checked('"pii" in job.data.tags && job.resources.gpus > 1.0', ROUTING)
    job = {"data": {"tags": ["pii"]}, "resources": {"gpus": 2.0}}
    assert compiled.program.execute({"job": job}) is True


def test_check_source_lists_every_problem() -> None:
    problems = check_source("job.gpu > 1.0 && victim.runtime_s > 1.0", ADMISSION)
    assert problems == [
        "job has no field 'gpu'; did you mean 'resources.gpus'?",
        "variable 'victim' is not available here; expected one of: job, mesh, now",
    ]


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param({"job": {"x": "string"}}, ["type error at column 7: '>' cannot compare"],
                     id="typed-by-the-schema-given"),
        pytest.param({"job": {"x": "double"}}, [], id="another-schema-another-type"),
        pytest.param({"job": {"y": "double"}}, ["job has no field 'x'; expected one of: y"],
                     id="its-fields"),
    ],
)  # fmt: skip
def test_an_expression_is_checked_against_the_schema_given_each_time(schema, expected) -> None:
    # only variables.SCHEMA's types are built once; any other schema is read afresh
    problems = check_source("job.x > 1.5", ("job",), schema)
    assert [p[: len(e)] for p, e in zip(problems, expected, strict=False)] == expected
    assert len(problems) == len(expected)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("(" * 10000 + "1" + ")" * 10000, id="parens"),
        pytest.param("[" * 100_000, id="open-lists"),
        pytest.param("x" * 1_000_000, id="huge"),
    ],
)
def test_oversized_input_never_reaches_the_parser(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(_: str) -> None:
        raise AssertionError("cel.compile must not see this input")

    monkeypatch.setattr(cel, "compile", fail)
    started = time.perf_counter()
    with pytest.raises(ExpressionError):
        compile_checked(source, ROUTING)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("source", "kinds"),
    [
        pytest.param("a.b", ["ident", "op", "ident"], id="path"),
        pytest.param(".5 + 1.5e3u", ["num", "op", "num"], id="numbers"),
        pytest.param('r"a\\" + b"x"', ["str", "op", "str"], id="raw-and-bytes"),
        pytest.param('"""a\n"b" """', ["str"], id="triple-quoted"),
        pytest.param("'a\\'b' // c.d", ["str"], id="escape-and-comment"),
    ],
)
def test_tokenize_skips_literals(source: str, kinds: list[str]) -> None:
    assert [token.kind for token in tokenize(source)] == kinds


PARTS = [
    "job", "mesh", "victim", ".", "gpus", "resources", "pools", "[", "]", "(", ")", '"x"',
    "exists", ",", "t", "==", "1", "&&", "has", "size", " ", "name", "\n", "'", "r", "//",
]  # fmt: skip


def _problem(source: str, allowed: tuple[str, ...]) -> str | None:
    """The ExpressionError's message, or None when the expression compiles; anything else raises."""
    try:
        compile_checked(source, allowed)
    except ExpressionError as error:
        return str(error)
    return None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_compiles_or_raises_a_one_line_expression_error(source: str) -> None:
    problem = _problem(source, PREEMPTION)
    assert problem is None or (problem and len(problem.splitlines()) == 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(PARTS), max_size=40))
def test_expression_like_text_compiles_or_raises_expression_error(parts: list[str]) -> None:
    problem = _problem("".join(parts), ADMISSION)
    assert problem is None or (problem and len(problem.splitlines()) == 1)
