"""The type checker: it rejects what is certain to fail, with the column, and never what runs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import cel
import pytest
from conftest import EXAMPLES, ROOT
from expr_strategies import contexts, of, typed
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from meshctl.files import load_path, load_text
from meshctl.model import Job, Mesh, Policy
from meshctl.model.capacity import AcceleratorType, pool_capacity
from meshctl.policy import compile_policies
from meshctl.policy.compiled import Source
from meshctl.policy.expr import ParseError, check, env_of, parse
from meshctl.policy.expr.nodes import Conditional, Logical
from meshctl.policy.facts import (
    PoolFacts,
    TeamUsage,
    VictimFacts,
    job_map,
    mesh_map,
    observed,
    pool_map,
    victim_map,
)
from meshctl.policy.refs import ExpressionError, compile_checked
from meshctl.policy.variables import SCHEMA
from meshctl.problems import InvalidFileError

pytestmark = pytest.mark.unit

ROUTING = ("job", "pool", "mesh", "now")
PREEMPTION = ("job", "pool", "mesh", "now", "victim")

# Each runs in cel (for some jobs at least) and gives a boolean: never rejected. Several lean
# on what the installed cel does where it differs from the CEL spec.
ACCEPTED = [
    pytest.param("job.resources.gpus > 4", id="double-compared-with-int"),
    pytest.param("job.resources.nodes == 2.0", id="int-equals-double"),
    pytest.param("1u < job.resources.gpus", id="uint-compared-with-double"),
    pytest.param("-pool.cloud", id="negated-bool-is-a-bool-here"),
    pytest.param('size(job.data.tags + {"x": 1}) > 0', id="list-plus-map-adds-keys"),
    pytest.param('job.labels.sensitivity != "public"', id="map-lookup-that-may-miss"),
    pytest.param('has(job.labels.team) && job.labels.team == "a"', id="has-then-lookup"),
    pytest.param('"team" in job.labels', id="key-in-map"),
    pytest.param('job["name"] == "x"', id="object-indexed-by-its-field"),
    pytest.param("dyn(job.resources.gpus) + 1 > 0", id="dyn-passes"),
    pytest.param("job.name == 1", id="equality-of-any-two-values"),
    pytest.param("now.getHours() < 8 && now.getDayOfWeek() != 0", id="timestamp-accessors"),
    pytest.param('now - timestamp("2026-01-01T00:00:00Z") > duration("24h")', id="time-math"),
    pytest.param("type(job.resources.nodes) == int", id="type-values"),
    pytest.param("mesh.pools[pool.name].free_gpus >= job.resources.gpus", id="map-by-variable"),
    pytest.param(
        "mesh.pools.filter(p, !mesh.pools[p].cloud).all(p, mesh.pools[p].expected_wait_s > 600.0)",
        id="macros-over-map-keys",
    ),
    pytest.param("job.data.sets.map(d, d.size_gib).exists(s, s > 100.0)", id="map-then-exists"),
    pytest.param("job.data.sets.exists_one(d, d.residency == 'eu')", id="exists-one"),
    pytest.param("job.data.sets.existsOne(d, d.residency == 'eu')", id="exists-one-camel"),
    pytest.param('int("12") > 3 && double("1.5") < 2.0 && string(7) == "7"', id="conversions"),
    pytest.param("optional.of(1).orValue(2) == 1", id="optional"),
    pytest.param("!!job.resources.nodes == 1", id="even-negation-vanishes"),
    pytest.param("(job.resources.nodes > 1 ? 1.5 : 2) > 1", id="branches-of-two-kinds"),
]


@pytest.mark.parametrize("source", ACCEPTED)
def test_accepted(source: str) -> None:
    compile_checked(source, ROUTING)


# The exact message for each, with the column inside the expression.
REJECTED = [
    pytest.param(
        'job.team.startswith("n")',
        "type error at column 10: a string has no method 'startswith'; did you mean 'startsWith'?",
        id="no-such-method-did-you-mean",
    ),
    pytest.param(
        'job.resources.gpus > "4"',
        "type error at column 20: '>' cannot compare double with string; write 4 without"
        " quotes for a number",
        id="double-against-string",
    ),
    pytest.param(
        "job.resources.gpus + 1 > 2.0",
        "type error at column 20: '+' is not defined for double and int; cel does not mix"
        " int, uint and double in arithmetic: write 1.0 for a double, or convert one side with"
        " double(), int() or uint()",
        id="double-plus-int",
    ),
    pytest.param(
        "job.resources.gpus",
        "type error at column 1: the expression gives a double; expected a boolean",
        id="not-a-condition",
    ),
    pytest.param(
        'now.getHours("Europe/Paris") < 8',
        "type error at column 5: getHours() takes no arguments (time zones are not"
        " supported), got (string)",
        id="time-zone-argument",
    ),
    pytest.param(
        'job.name.lowerAscii() == "x"',
        "type error at column 10: a string has no method 'lowerAscii' (its methods: contains,"
        " endsWith, matches, size, startsWith)",
        id="extension-library-absent",
    ),
    pytest.param(
        'string(pool.cloud) == "true"',
        "type error at column 1: string() takes an int, uint, double, string, bytes,"
        " timestamp or duration, got bool",
        id="string-of-bool",
    ),
    pytest.param(
        "1.5 in job.labels",
        "type error at column 5: a map key must be an int, uint, bool or string, got double",
        id="double-as-map-key",
    ),
    pytest.param(
        "job.data.tags.all(t, t)",
        "type error at column 22: the condition of 'all' gives string; expected a boolean",
        id="macro-condition-not-bool",
    ),
    pytest.param(
        "job.name.exists(c, true)",
        "type error at column 10: 'exists' ranges over a list or a map, got string",
        id="macro-over-a-string",
    ),
    pytest.param(
        "job.data.tags[0.5] == 'a'",
        "type error at column 15: a list is indexed by an int, got double",
        id="list-by-double",
    ),
    pytest.param(
        'job.kind == "train" && job.resources.nodes',
        "type error at column 24: '&&' needs booleans on both sides, got int",
        id="and-of-an-int",
    ),
    pytest.param(
        "job.resources.nodes ? true : false",
        "type error at column 1: the condition before '?' gives int; expected a boolean",
        id="int-condition",
    ),
    pytest.param(
        "job.resources.nodes + 1u > 1",
        "type error at column 21: '+' is not defined for int and uint; cel does not mix int,"
        " uint and double in arithmetic: convert one side with double(), int() or uint()",
        id="int-plus-uint",
    ),
    pytest.param(
        "now - 3600 < now",
        "type error at column 5: '-' is not defined for timestamp and int",
        id="timestamp-minus-int",
    ),
    pytest.param(
        "max(job.resources.gpus, 1.0) > 1.0",
        "type error at column 1: no function 'max' (functions: bytes, double, duration, dyn,"
        " int, optional.none, optional.of, optional.ofNonZeroValue, size, string, timestamp,"
        " type, uint)",
        id="no-such-function",
    ),
    pytest.param(
        'startsWith(job.name, "a")',
        "type error at column 1: 'startsWith' is a method, not a function: write x.startsWith(...)",
        id="method-called-as-function",
    ),
    pytest.param(
        "!job.name",
        "type error at column 1: '!' needs a boolean, got string",
        id="not-of-a-string",
    ),
    pytest.param(
        'job.labels.team.startsWith("a") ||\n  job.resources.gpus > "4"',
        "type error at line 2, column 22: '>' cannot compare double with string; write 4"
        " without quotes for a number",
        id="second-line",
    ),
]


@pytest.mark.parametrize(("source", "message"), REJECTED)
def test_rejected(source: str, message: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_checked(source, ROUTING)
    assert str(caught.value) == message


def test_a_rejected_rule_names_the_file_line_of_a_block_scalar() -> None:
    text = (
        "apiVersion: meshctl/v1\nkind: Policy\nmetadata: {name: p}\nspec:\n  pools:\n"
        '    - name: r\n      when: >-\n        job.kind == "train" &&\n'
        '        job.resources.gpus > "4"\n      deny: pool.cloud\n'
    )
    (loaded,) = load_text(text, "p.yaml")
    assert isinstance(loaded.document, Policy)
    with pytest.raises(InvalidFileError) as caught:
        compile_policies([Source("p.yaml", loaded.document, loaded.lines, text)])
    assert str(caught.value).startswith(
        "p.yaml:9: spec.pools[0].when: type error at column 43: '>' cannot compare double"
    )


# --- every expression in the repository's policies still validates ---------------------------


def _policy_files() -> list[Path]:
    roots = [ROOT / "policies", EXAMPLES, ROOT / "tests"]
    return sorted(
        p for root in roots for p in root.rglob("*.yaml") if "kind: Policy\n" in p.read_text()
    )


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=str(p.relative_to(ROOT))) for p in _policy_files()]
)
def test_every_shipped_policy_expression_validates(path: Path) -> None:
    (loaded,) = load_path(path)
    assert isinstance(loaded.document, Policy)
    spec = loaded.document.spec
    expressions = [
        *((r.when, ROUTING) for r in [*spec.pools, *spec.burst]),
        *((r.allow or r.deny or "", ROUTING) for r in spec.pools),
        *((r.to, ROUTING) for r in spec.burst),
        *((r.when, ROUTING) for r in spec.preemption),
        *((r.victims, PREEMPTION) for r in spec.preemption),
    ]
    assert expressions or spec.quotas or spec.budgets or spec.priority_classes
    for source, allowed in expressions:
        compile_checked(source, allowed)


# --- soundness: what the checker accepts never fails with a type error ------------------------

TYPE_ERRORS = ("No such overload", "Unsupported operation", "Unexpected type", "Cannot mix",
               "Undefined variable or function", "cannot be used as a map key")  # fmt: skip


def _accepted(source: str, allowed: tuple[str, ...] = PREEMPTION) -> bool:
    try:
        compile_checked(source, allowed)
    except ExpressionError:
        return False
    return True


def _outcome(program: cel.Program, values: dict[str, object]) -> object:
    """What the program gives; None for a failure that is no type error (a missing key, an
    index past the end, a division by zero, a NaN compared); the message for a type error."""
    try:
        return program.execute(values)
    except Exception as err:
        typed_error = any(t in str(err) for t in TYPE_ERRORS)
        return str(err) if typed_error and not _has_nan(program.source, values) else None


def _has_nan(source: str, values: dict[str, object]) -> bool:
    """Whether some part of ``source`` is NaN (0.0 / 0.0): cel then fails a comparison with
    "No such overload", a fact about the value that no checker can know."""
    for node in [parse(source), *_descendants(parse(source))]:
        try:
            value = cel.compile(source[node.start : node.end]).execute(values)
        except Exception:
            continue
        if isinstance(value, float) and value != value:
            return True
    return False


def _well_typed(source: str) -> bool:
    """Accepted, and without leaning on dyn (a value whose type only shows when it runs:
    there the checker promises nothing)."""
    return _accepted(source) and not check(parse(source), env_of(PREEMPTION, SCHEMA)).dynamic


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(typed(), st.lists(contexts(), min_size=1, max_size=3))
def test_well_typed_expressions_never_fail_with_a_type_error(expr, variables) -> None:
    source = expr[0]
    if not _well_typed(source):
        return
    program = cel.compile(source)
    for values in variables:
        result = _outcome(program, values)
        assert isinstance(result, bool) or result is None, (source, result)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(of("bool"), st.lists(contexts(), min_size=1, max_size=3))
def test_conditions_built_well_typed_are_accepted_and_run(source, variables) -> None:
    # built from the runtime's own overloads: accepted without leaning on dyn, and they run
    assert _well_typed(source), source
    program = cel.compile(source)
    for values in variables:
        result = _outcome(program, values)
        assert isinstance(result, bool) or result is None, (source, result)


# --- completeness: what runs without a type error is never rejected ---------------------------


def _closed(text: str) -> str:
    """The expression with the schema's variables replaced by literals of their types."""
    for path, literal in (
        ("job.resources.nodes", "2"), ("pool.gpus", "8"), ("mesh.pools.onprem.queued_jobs", "3"),
        ("victim.priority", "1"), ("job.resources.gpus", "1.5"),
        ("job.resources.total_gpus", "3.0"), ("job.limits.max_usd_per_hour", "0.0"),
        ("mesh.pools.onprem.expected_wait_s", "600.0"), ("mesh.teams.vision.gpus_in_use", "1.0"),
        ("victim.runtime_s", "60.0"), ("pool.usd_per_gpu_hour", "2.0"), ("job.name", '"j"'),
    ):  # fmt: skip
        text = text.replace(path, literal)
    return text


@settings(max_examples=400, deadline=None)
@given(typed())
@example(("!(!((true) || (job.resources.gpus)))", "bool"))  # `true || 1.5` runs, and is refused
def test_a_closed_expression_that_runs_everywhere_is_accepted(expr) -> None:
    # Only for expressions with no variables left, each of whose nodes runs on its own: then
    # "it runs" is a fact, not a hope. (`false && 1` runs but `1` alone is no condition: the
    # checker, like CEL's, wants booleans on both sides, and the condition of `?:`; such
    # shapes, which the generator makes too, are left out.)
    source = _closed(expr[0])
    try:
        tree = parse(source)
        program = cel.compile(source)
    except (ParseError, ValueError):
        return
    if program.variables():
        return
    values: dict[int, object] = {}
    nodes = [tree, *_descendants(tree)]
    for node in nodes:
        piece = source[node.start : node.end]
        try:
            values[id(node)] = cel.compile(piece).execute({})
        except Exception:
            return
    if any(not isinstance(values[id(n)], bool) for n in _wanted_booleans(nodes)):
        return
    if isinstance(program.execute({}), bool):
        assert _accepted(source), source


def _wanted_booleans(nodes):
    """The operands of ``&&`` and ``||`` and the conditions of ``?:`` among ``nodes``."""
    for node in nodes:
        if isinstance(node, Logical):
            yield from node.operands
        elif isinstance(node, Conditional):
            yield node.cond


def _descendants(node):
    from meshctl.policy.expr.nodes import children

    out, stack = [], list(children(node))
    while stack:
        child = stack.pop()
        out.append(child)
        stack.extend(children(child))
    return out


# --- the maps the engine builds are what the schema says they are ----------------------------


def _conforms(value: object, node: object, path: str) -> list[str]:
    leaf = {"int": int, "double": float, "string": str, "bool": bool, "timestamp": dt.datetime}
    if isinstance(node, str):
        if node.startswith("list<"):
            return [] if isinstance(value, list) else [f"{path}: not a list"]
        want = leaf[node]
        ok = isinstance(value, want) and (want is not int or not isinstance(value, bool))
        return [] if ok else [f"{path}: {type(value).__name__}, schema says {node}"]
    assert isinstance(node, dict)
    if not isinstance(value, dict | list):
        return [f"{path}: {type(value).__name__}"]
    if "*" in node:
        assert isinstance(value, dict)
        return [e for k, v in value.items() for e in _conforms(v, node["*"], f"{path}.{k}")]
    if "[]" in node:
        assert isinstance(value, list)
        return [e for i, v in enumerate(value) for e in _conforms(v, node["[]"], f"{path}[{i}]")]
    assert isinstance(value, dict)
    missing = [f"{path}.{k}: missing" for k in node if k not in value]
    return missing + [e for k, v in value.items() for e in _conforms(v, node[k], f"{path}.{k}")]


def test_the_engines_maps_conform_to_the_schema() -> None:
    (mesh_doc,) = load_path(EXAMPLES / "mesh.yaml")
    assert isinstance(mesh_doc.document, Mesh)
    job = Job.model_validate(
        {
            "metadata": {"name": "j", "labels": {"team": "a"}},
            "spec": {
                "kind": "train",
                "entrypoint": "x",
                "resources": {"gpus": 2, "nodes": 2, "topology": {"domain": "rack"}},
                "data": [{"name": "d", "location": "s3://x", "tags": ["pii"], "size_gib": 10}],
                "limits": {"max_usd_per_hour": 3, "max_runtime_s": "1h"},
            },
        }
    )
    pool = PoolFacts("p", "aws", "us-east-1", {"tier": "burst"}, ("L4",), 8, 1, free_gpus=2,
                     accelerator_types=(AcceleratorType("nvidia", "L4", 24),))  # fmt: skip
    # the controller and the simulator hand in plain ints: the maps still say double
    moment = observed(
        type("M", (), {"pools": (pool,)})(), {"p": 1}, {"p": 4}, 3, {"p": 60}, {"p": 7}, {"t": 2}
    )
    moment = type(moment)(moment.pools, {"t": TeamUsage(1, 2, 3)})
    plain = Job.model_validate(
        {"metadata": {"name": "p"}, "spec": {"kind": "batch", "entrypoint": "x"}}
    )
    found = [
        *_conforms(job_map(plain, ""), SCHEMA["job"], "job"),
        *_conforms(job_map(job, "research"), SCHEMA["job"], "job"),
        *_conforms(victim_map(VictimFacts(job, 5, "p", 60, 0), "x"), SCHEMA["victim"], "victim"),
        *_conforms(pool_map(pool), SCHEMA["pool"], "pool"),
        *_conforms(mesh_map(moment), SCHEMA["mesh"], "mesh"),
    ]
    assert found == []
    assert pool_capacity(mesh_doc.document.spec.pools[0], {}).gpus == 16


def test_the_checker_types_every_variable_of_the_schema() -> None:
    env = env_of(sorted(SCHEMA), SCHEMA)
    assert {name: str(t) for name, t in env.items()} == {
        "job": "job",
        "mesh": "mesh",
        "now": "timestamp",
        "pool": "pool",
        "victim": "victim",
    }
    checked = check(parse("job.data.sets[0].tags.exists(t, t == victim.pool)"), env)
    assert (str(checked.type), checked.problems, checked.dynamic) == ("bool", [], False)
    assert check(parse("dyn(job.name) > 1"), env).dynamic
