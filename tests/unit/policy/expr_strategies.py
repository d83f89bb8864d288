"""Hypothesis strategies for CEL expressions and the maps they run over, for the policy tests.

``expressions`` builds text from the grammar with the runtime's quirks in reach (dyn values,
mixed number kinds, a negated bool, a list plus a map), often well typed and often not, so the
checker has both to accept and to reject. ``noisy`` mutates text at the character level, for
the parser's agreement with ``cel.compile``. ``contexts`` builds job, pool, mesh and victim
maps that conform to ``variables.SCHEMA``, with Python floats where it says double.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import strategies as st

from meshctl.policy.variables import SCHEMA

# Typed atoms: (text, type) over the schema's variables and literals.
ATOMS: dict[str, list[str]] = {
    "int": ["job.resources.nodes", "pool.gpus", "mesh.pools.onprem.queued_jobs",
            "size(job.name)", "job.labels.size()", "now.getHours()", "victim.priority", "3",
            "-2", "int(job.resources.gpus)", "mesh.pools[pool.name].gpus"],
    "uint": ["1u", "uint(job.resources.nodes)", "7u"],
    "double": ["job.resources.gpus", "job.resources.total_gpus", "job.limits.max_usd_per_hour",
               "mesh.pools.onprem.expected_wait_s", "mesh.teams.vision.gpus_in_use", "1.5",
               "double(pool.gpus)", "victim.runtime_s", "pool.usd_per_gpu_hour", "-0.5"],
    "string": ["job.name", "job.team", "job.labels.team", "pool.region", '"eu"', '"a"',
               "job.data.sets[0].name", "string(job.resources.nodes)", "victim.pool",
               "mesh.pools.onprem.provider"],
    "bool": ["pool.cloud", "mesh.pools.onprem.cloud", "true", "has(job.labels.team)",
             '"pii" in job.data.tags', "false", "-true"],
    "list": ["job.data.tags", "job.resources.accelerators", "pool.accelerators",
             '["a", "b"]', "[1, 2]", "job.data.sets"],
    "map": ["job.labels", "pool.labels", "mesh.pools", '{"a": 1}'],
    "timestamp": ["now", 'timestamp("2026-01-01T00:00:00Z")'],
    "duration": ['duration("1h")', "now - now"],
    "dyn": ["dyn(job.resources.gpus)", "dyn(job.name)", "dyn(pool.gpus)", "dyn(job.labels)"],
}  # fmt: skip
NUMBERS = ("int", "uint", "double")


def _binary(a: tuple[str, str], b: tuple[str, str], op: str) -> tuple[str, str]:
    return f"({a[0]}) {op} ({b[0]})", _result(op, a[1], b[1])


def _result(op: str, a: str, b: str) -> str:
    """The type the runtime gives (roughly; the checker, not this, is under test)."""
    if op in ("==", "!=", "<", "<=", ">", ">=", "in", "&&", "||"):
        return "bool"
    if a == "dyn" or b == "dyn":
        return "dyn"
    if a == "timestamp" and b == "timestamp":
        return "duration"
    return a


@st.composite
def typed(draw: st.DrawFn, depth: int = 0) -> tuple[str, str]:
    """An expression and (roughly) its type: operators mostly chosen to fit their operands."""
    if depth > 2 or draw(st.integers(0, 3)) == 0:
        kind = draw(st.sampled_from(sorted(ATOMS)))
        return draw(st.sampled_from(ATOMS[kind])), kind
    a = draw(typed(depth + 1))
    b = draw(typed(depth + 1))
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return f"!({a[0]})", "bool"
    if shape == 1:
        return f"({a[0]}) ? ({b[0]}) : ({b[0]})", b[1]
    if shape == 2:
        return f"[{a[0]}, {b[0]}]", "list"
    if shape == 3:
        method = draw(st.sampled_from(["size()", "startsWith(\"a\")", "getHours()",
                                        "exists(x, x == x)", "map(x, x).size()",
                                        "filter(x, true).size()", "all(x, true)"]))  # fmt: skip
        return f"({a[0]}).{method}", "dyn"
    if shape == 4:
        fn = draw(st.sampled_from(["size", "int", "double", "string", "uint", "dyn", "type"]))
        return f"{fn}({a[0]})", "dyn"
    if shape == 5:
        return f"({a[0]})[{b[0]}]", "dyn"
    ops = ["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "in", "&&", "||"]
    fitting = [o for o in ops if _fits(o, a[1], b[1])]
    op = draw(st.sampled_from(fitting or ops)) if shape < 9 else draw(st.sampled_from(ops))
    return _binary(a, b, op)


def _fits(op: str, a: str, b: str) -> bool:
    if "dyn" in (a, b):
        return True
    if op in ("==", "!="):
        return True
    if op in ("&&", "||"):
        return a == b == "bool"
    if op == "in":
        return b in ("list", "map")
    if op in ("<", "<=", ">", ">="):
        return (a in NUMBERS and b in NUMBERS) or a == b != "list"
    if op == "+":
        return a == b and a != "bool"
    return a == b and a in NUMBERS


def conditions() -> st.SearchStrategy[str]:
    """Expressions meant to be conditions: most give a bool, some do not."""
    return typed().map(lambda t: t[0])


# --- character-level noise, for the parser --------------------------------------------------

PIECES = ["a", "b", "job", "x", "in", "true", "null", "if", "has", "all", "map", "size", "1",
          "0", "-", "!", "1u", "1.5", ".5", "0x1F", "1e3", '"s"', "'s'", 'b"x"', 'r"x"',
          '"""t"""', '"\\n"', '"\\q"', '"open', ".", ",", ":", "?", "(", ")", "[", "]", "{",
          "}", "+", "*", "/", "%", "==", "!=", "<", "<=", "&&", "||", " ", "\n", "// c\n",
          "Foo", "=", "&", "`", "9223372036854775808", "18446744073709551616u"]  # fmt: skip


@st.composite
def noisy(draw: st.DrawFn) -> str:
    """Generated expressions, half of them with a few pieces inserted or characters dropped."""
    text = draw(conditions())
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            text = text[:at] + draw(st.sampled_from(PIECES)) + text[at:]
        else:
            text = text[:at] + text[at + 1 :]
    return text


# --- maps conforming to the schema ------------------------------------------------------------

_WORDS = st.sampled_from(["", "a", "eu", "pii", "onprem", "vision"])
_LEAVES: dict[str, st.SearchStrategy[Any]] = {
    "int": st.integers(-3, 50),
    "double": st.floats(-100, 1e4, allow_nan=False).map(float),
    "string": _WORDS,
    "bool": st.booleans(),
    "timestamp": st.datetimes(dt.datetime(2020, 1, 1), dt.datetime(2030, 1, 1)).map(
        lambda t: t.replace(tzinfo=dt.UTC)
    ),
    "list<string>": st.lists(_WORDS, max_size=3),
}


def value(node: Any) -> st.SearchStrategy[Any]:
    """Values of a schema node: leaves, ``{"*": X}`` maps, ``{"[]": X}`` lists, objects."""
    if isinstance(node, str):
        return _LEAVES[node]
    if "*" in node:
        keys = st.sampled_from(["team", "x", "onprem", "aws", "vision", "tier"])
        return st.dictionaries(keys, value(node["*"]), max_size=3)
    if "[]" in node:
        return st.lists(value(node["[]"]), max_size=2)
    return st.fixed_dictionaries({k: value(v) for k, v in node.items()})


def contexts() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({name: value(node) for name, node in SCHEMA.items()})


# --- well-typed by construction ----------------------------------------------------------------

_OF: dict[str, list[str]] = {
    "bool": ["pool.cloud", "mesh.pools.onprem.cloud", "true", "has(job.labels.team)",
             '"pii" in job.data.tags', "-pool.cloud", '"team" in job.labels'],
    "int": ["job.resources.nodes", "pool.gpus", "size(job.name)", "now.getHours()",
            "victim.priority", "3", "-2", "mesh.pools[pool.name].gpus", "job.labels.size()"],
    "uint": ["1u", "7u", "uint(pool.gpus)"],
    "double": ["job.resources.gpus", "job.limits.max_usd_per_hour", "victim.runtime_s",
               "mesh.pools.onprem.expected_wait_s", "mesh.teams.vision.gpus_in_use", "1.5",
               "pool.usd_per_gpu_hour"],
    "string": ["job.name", "job.labels.team", "pool.region", '"eu"', "victim.pool",
               "job.data.sets[0].name", "mesh.pools.onprem.provider"],
    "list": ["job.data.tags", "job.resources.accelerators", "pool.accelerators", '["a", "eu"]'],
    "timestamp": ["now", 'timestamp("2026-01-01T00:00:00Z")'],
    "duration": ['duration("1h")', 'duration("90s")'],
}  # fmt: skip


@st.composite
def of(draw: st.DrawFn, kind: str, depth: int = 0) -> str:
    """An expression of ``kind`` built only from what the runtime accepts for its operands."""
    if depth > 2 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(_OF[kind]))
    sub = lambda k: of(k, depth + 1)  # noqa: E731
    options = _SHAPES[kind]
    shape = draw(st.sampled_from(options))
    parts = [draw(sub(k)) for k in shape[1]]
    return shape[0].format(*parts)


_NUM = ("int", "uint", "double")
_SHAPES: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "bool": [
        *(("({}) " + op + " ({})", (a, b)) for op in ("<", ">=") for a in _NUM for b in _NUM),
        ("({}) == ({})", ("string", "int")),
        ("({}) < ({})", ("string", "string")),
        ("({}) in ({})", ("string", "list")),
        ("!({})", ("bool",)),
        ("({}) && ({})", ("bool", "bool")),
        ("({}) || ({})", ("bool", "bool")),
        ("({}) ? ({}) : ({})", ("bool", "bool", "bool")),
        ("({}).startsWith({})", ("string", "string")),
        ("({}).exists(x, x.endsWith({}))", ("list", "string")),
        ("({}).all(x, size(x) > ({}))", ("list", "int")),
        ("mesh.pools.exists(p, mesh.pools[p].free_gpus > ({}))", ("double",)),
        ("({}) < ({})", ("timestamp", "timestamp")),
        ("({}) >= ({})", ("duration", "duration")),
        ("has(job.labels.x) && ({})", ("bool",)),
    ],
    "int": [
        *(("({}) " + op + " ({})", ("int", "int")) for op in ("+", "-", "*", "/", "%")),
        ("size({})", ("string",)),
        ("size({})", ("list",)),
        ("int({})", ("double",)),
        ("int({})", ("uint",)),
        ("({}).getMinutes()", ("duration",)),
        ("({}).getDayOfWeek()", ("timestamp",)),
        ("({}) ? ({}) : ({})", ("bool", "int", "int")),
    ],
    "uint": [("({}) + ({})", ("uint", "uint")), ("({}) * ({})", ("uint", "uint"))],
    "double": [
        *(("({}) " + op + " ({})", ("double", "double")) for op in ("+", "-", "*", "/")),
        ("double({})", ("int",)),
        ("-({})", ("double",)),
        ("({}) ? ({}) : ({})", ("bool", "double", "double")),
    ],
    "string": [
        ("({}) + ({})", ("string", "string")),
        ("string({})", ("int",)),
        ("string({})", ("double",)),
        ("string({})", ("timestamp",)),
    ],
    "list": [
        ("({}) + ({})", ("list", "list")),
        ("({}).filter(x, x != ({}))", ("list", "string")),
        ("({}).map(x, x + ({}))", ("list", "string")),
    ],
    "timestamp": [
        ("({}) + ({})", ("timestamp", "duration")),
        ("({}) - ({})", ("timestamp", "duration")),
    ],
    "duration": [
        ("({}) - ({})", ("timestamp", "timestamp")),
        ("({}) + ({})", ("duration", "duration")),
    ],
}
