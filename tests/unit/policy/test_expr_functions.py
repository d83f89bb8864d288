"""The function table is the installed cel's: every entry runs, and nothing else does.

For each function, method and operator, and every combination of sample values of every kind,
`resolve` finds an overload exactly when cel runs the call without a type error (a value
error, such as a bad number in int("x") or a missing key, still means the overload exists).
"""

from __future__ import annotations

import datetime as dt
import itertools

import cel
import pytest

from meshctl.policy.expr import check, parse
from meshctl.policy.expr import functions as fn
from meshctl.policy.expr.types import PRIMITIVES, Type, list_of, map_of, optional_of

pytestmark = pytest.mark.unit

_T = 'timestamp("2026-01-05T12:00:00Z")'
_D = 'duration("90m")'
# Values of each kind, as CEL text, with a type for the checker's side. Several per kind, so
# that an overload whose value check fails on one (int("a")) still shows with another.
SAMPLES: dict[str, tuple[Type, list[str]]] = {
    "int": (PRIMITIVES["int"], ["2", "0"]),
    "uint": (PRIMITIVES["uint"], ["2u"]),
    "double": (PRIMITIVES["double"], ["2.5"]),
    "bool": (PRIMITIVES["bool"], ["true"]),
    "string": (PRIMITIVES["string"], ['"a"', '"12"', '"90m"', '"2026-01-05T12:00:00Z"']),
    "bytes": (PRIMITIVES["bytes"], ['b"a"']),
    "null": (PRIMITIVES["null"], ["null"]),
    "timestamp": (PRIMITIVES["timestamp"], [_T]),
    "duration": (PRIMITIVES["duration"], [_D]),
    "list": (list_of(PRIMITIVES["int"]), ["[1, 2]", "[]"]),
    "map": (map_of(PRIMITIVES["string"], PRIMITIVES["int"]), ['{"a": 1}', "{1: 2}", "{}"]),
    "type": (PRIMITIVES["type"], ["int"]),
    "optional": (optional_of(PRIMITIVES["int"]), ["optional.of(1)", "optional.none()"]),
}
TYPE_ERRORS = (
    "No such overload",
    "Undefined variable or function",
    "Unsupported operation",
    "Unexpected type",
    "Cannot mix",
    "cannot be used as a map key",
)


def runs(source: str) -> bool | None:
    """True: ran; False: a type error (no overload); None: a value error only."""
    try:
        cel.compile(source).execute({})
    except Exception as err:
        return False if any(t in str(err) for t in TYPE_ERRORS) else None
    return True


def kind_of(value: object) -> str:
    kinds = {bool: "bool", int: "int", float: "double", str: "string", bytes: "bytes",
             list: "list", dict: "map", dt.datetime: "timestamp", dt.timedelta: "duration",
             type(None): "null"}  # fmt: skip
    return kinds.get(type(value), type(value).__name__)


ALL = [
    *((name, "global", o) for name, os in fn.GLOBALS.items() for o in os),
    *((name, "method", o) for name, os in fn.METHODS.items() for o in os),
    *((name, "operator", o) for name, os in fn.OPERATORS.items() for o in os),
]


@pytest.mark.parametrize(
    ("name", "where", "overload"), [pytest.param(*e, id=f"{e[0]}:{e[2].example}") for e in ALL]
)
def test_every_overload_runs_in_cel_and_gives_its_result(name, where, overload):
    value = cel.compile(overload.example).execute({})
    args = [SAMPLES[p][0] if p in SAMPLES else PRIMITIVES["dyn"] for p in overload.params]
    declared = overload.result(args)
    python = {"uint": "int", "type": "string", "optional": "OptionalValue"}
    want = python.get(declared.kind, declared.kind)
    assert declared.kind == "dyn" or kind_of(value) == want, (overload.example, value)


def _call(name: str, where: str, texts: tuple[str, ...]) -> str:
    if where == "global":
        return f"{name}({', '.join(texts)})"
    if where == "method":
        return f"({texts[0]}).{name}({', '.join(texts[1:])})"
    if name == "[]":
        return f"({texts[0]})[{texts[1]}]"
    if name.endswith("_"):
        return f"{name[0]}({texts[0]})"
    return f"({texts[0]}) {name} ({texts[1]})"


def _arities(name: str, where: str) -> list[int]:
    table = {"global": fn.GLOBALS, "method": fn.METHODS, "operator": fn.OPERATORS}[where]
    return sorted({len(o.params) for o in table[name]})


CALLS = [
    *(("global", n) for n in fn.GLOBALS if n != "optional.none"),
    *(("method", n) for n in fn.METHODS),
    *(("operator", n) for n in fn.OPERATORS),
]


@pytest.mark.parametrize(("where", "name"), [pytest.param(*c, id=f"{c[0]}-{c[1]}") for c in CALLS])
def test_an_overload_is_listed_exactly_where_cel_has_one(where, name):
    table = {"global": fn.GLOBALS, "method": fn.METHODS, "operator": fn.OPERATORS}[where]
    wrong = []
    for arity in _arities(name, where):
        for kinds in itertools.product(sorted(SAMPLES), repeat=arity):
            results = [
                runs(_call(name, where, texts))
                for texts in itertools.product(*(SAMPLES[k][1] for k in kinds))
            ]
            exists = any(r is not False for r in results)
            listed = fn.resolve(table[name], [SAMPLES[k][0] for k in kinds]) is not None
            if exists != listed:
                wrong.append((kinds, "cel runs it" if exists else "cel has no overload"))
    assert wrong == []


@pytest.mark.parametrize(
    ("source", "says"),
    [
        pytest.param('"A".lowerAscii()', "a string has no method 'lowerAscii'",
                     id="strings-extension"),
        pytest.param('"a,b".split(",")', "a string has no method 'split'", id="split"),
        pytest.param("max(1, 2)", "no function 'max'", id="max"),
        pytest.param("math.greatest(1, 2)", "unknown variable 'math'", id="math"),
        pytest.param('bool("true")', "no function 'bool'", id="bool-conversion"),
        pytest.param("[1].contains(1)", "a list<int> has no method 'contains'",
                     id="list-contains"),
        pytest.param(f'{_T}.getHours("UTC")', "getHours() takes no arguments",
                     id="time-zone-argument"),
        pytest.param('startsWith("ab", "a")', "'startsWith' is a method, not a function",
                     id="string-function-as-global"),
        pytest.param("string(true)", "string() takes an int", id="string-of-bool"),
        pytest.param(f"int({_T})", "int() takes an int, uint, double or string, got timestamp",
                     id="int-of-timestamp"),
    ],
)  # fmt: skip
def test_what_the_table_leaves_out_does_not_run(source, says):
    # meshctl never registers cel.stdlib: these are not there, and the table does not list
    # them, so the checker refuses them before they can fail at run time
    assert runs(source) is False
    problems = [p.message for p in check(parse(source), {}, want_bool=False).problems]
    assert any(message.startswith(says) for message in problems), problems
