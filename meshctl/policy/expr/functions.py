"""What the installed ``cel`` really runs: its functions, methods and operators, with types.

Each overload carries an example that runs in ``cel`` (tests/unit/policy/test_expr_functions.py
runs every one, and checks over every pair of sample values that ``cel`` raises a type error
exactly where no overload here applies). The runtime is the authority, not the CEL spec; where
they differ it is followed: ``1 < 1.5`` and ``1u == 1`` compare across number kinds, ``-true``
is ``false``, ``[1] + {"a": 1}`` appends the map's keys, string conversions take no bool, the
timestamp accessors take no time zone, and the extension libraries (``lowerAscii``,
``split``, ``math.*`` ...) are not there: meshctl never registers ``cel.stdlib``.

A parameter is a type kind, ``num`` (int, uint or double), ``key`` (what a map may be keyed
by: int, uint, bool, string, or an optional holding one), ``map`` (a map or an object:
objects are maps at run time) or ``any``. ``dyn`` fits every parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from meshctl.policy.expr.types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    MAP_KEYS,
    NUMBERS,
    STRING,
    TIMESTAMP,
    TYPE,
    UINT,
    Type,
    join,
    list_of,
    optional_of,
)

Result = Callable[[Sequence[Type]], Type]


@dataclass(frozen=True, slots=True)
class Overload:
    params: tuple[str, ...]  # for a method, the first is its target
    result: Result
    example: str  # a call the installed cel runs, giving the result's kind


def _is(t: Type) -> Result:
    return lambda _: t


def _arg(i: int) -> Result:
    return lambda args: args[i]


def _element(i: int) -> Result:
    return lambda args: args[i].element if args[i].kind != "dyn" else DYN


def _value(i: int) -> Result:
    return lambda args: args[i].value if args[i].kind != "dyn" else DYN


def _concat(args: Sequence[Type]) -> Type:
    return list_of(join([args[0].element, args[1].element]))


def _wrap(args: Sequence[Type]) -> Type:
    return optional_of(args[0])


def _or_value(args: Sequence[Type]) -> Type:
    return join([args[0].element, args[1]])


def accepts(param: str, t: Type) -> bool:
    if t.kind == "dyn" or param == "any":
        return True
    if param == "num":
        return t.kind in NUMBERS
    if param == "key":  # an optional with a value stands for its value
        return t.kind in MAP_KEYS or t.kind == "optional"
    if param == "map":
        return t.kind in ("map", "object")
    return t.kind == param


def resolve(overloads: Sequence[Overload], args: Sequence[Type]) -> Type | None:
    """The result type of a call with ``args``: None when no overload takes them; dyn when
    several with different results might (an argument is dyn)."""
    results = [
        o.result(args)
        for o in overloads
        if len(o.params) == len(args)
        and all(accepts(p, a) for p, a in zip(o.params, args, strict=True))
    ]
    if not results:
        return None
    return results[0] if all(r == results[0] for r in results) else DYN


def _o(params: str, result: Result, example: str) -> Overload:
    return Overload(tuple(params.split()), result, example)


_T = 'timestamp("2026-01-05T12:00:00Z")'
_D = 'duration("90m")'

GLOBALS: Final[Mapping[str, tuple[Overload, ...]]] = {
    "size": (
        _o("string", _is(INT), 'size("ab")'),
        _o("bytes", _is(INT), 'size(b"ab")'),
        _o("list", _is(INT), "size([1, 2])"),
        _o("map", _is(INT), 'size({"a": 1})'),
    ),
    "int": (
        _o("int", _is(INT), "int(1)"),
        _o("uint", _is(INT), "int(1u)"),
        _o("double", _is(INT), "int(1.5)"),
        _o("string", _is(INT), 'int("12")'),
    ),
    "uint": (
        _o("int", _is(UINT), "uint(1)"),
        _o("uint", _is(UINT), "uint(1u)"),
        _o("double", _is(UINT), "uint(1.5)"),
        _o("string", _is(UINT), 'uint("12")'),
    ),
    "double": (
        _o("int", _is(DOUBLE), "double(1)"),
        _o("uint", _is(DOUBLE), "double(1u)"),
        _o("double", _is(DOUBLE), "double(1.5)"),
        _o("string", _is(DOUBLE), 'double("1.5")'),
    ),
    "string": (
        _o("int", _is(STRING), "string(1)"),
        _o("uint", _is(STRING), "string(1u)"),
        _o("double", _is(STRING), "string(1.5)"),
        _o("string", _is(STRING), 'string("a")'),
        _o("bytes", _is(STRING), 'string(b"a")'),
        _o("timestamp", _is(STRING), f"string({_T})"),
        _o("duration", _is(STRING), f"string({_D})"),
    ),
    "bytes": (
        _o("string", _is(BYTES), 'bytes("a")'),
        _o("bytes", _is(BYTES), 'bytes(b"a")'),
    ),
    "timestamp": (
        _o("string", _is(TIMESTAMP), _T),
        _o("timestamp", _is(TIMESTAMP), f"timestamp({_T})"),
    ),
    "duration": (
        _o("string", _is(DURATION), _D),
        _o("duration", _is(DURATION), f"duration({_D})"),
    ),
    "dyn": (_o("any", _is(DYN), "dyn(1)"),),
    "type": (_o("any", _is(TYPE), "type(1)"),),
    "optional.none": (_o("", _is(optional_of(DYN)), "optional.none()"),),
    "optional.of": (_o("any", _wrap, "optional.of(1)"),),
    "optional.ofNonZeroValue": (_o("any", _wrap, "optional.ofNonZeroValue(1)"),),
}

_TIME_PARTS = ("getHours", "getMinutes", "getSeconds", "getMilliseconds")
_DATE_PARTS = (
    "getFullYear",
    "getMonth",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
)

METHODS: Final[Mapping[str, tuple[Overload, ...]]] = {
    "size": (
        _o("string", _is(INT), '"ab".size()'),
        _o("bytes", _is(INT), 'b"ab".size()'),
        _o("list", _is(INT), "[1].size()"),
        _o("map", _is(INT), '{"a": 1}.size()'),
    ),
    **{
        name: (_o("string string", _is(BOOL), f'"abc".{name}("b")'),)
        for name in ("contains", "startsWith", "endsWith", "matches")
    },
    **{name: (_o("timestamp", _is(INT), f"{_T}.{name}()"),) for name in _DATE_PARTS},
    **{
        name: (
            _o("timestamp", _is(INT), f"{_T}.{name}()"),
            _o("duration", _is(INT), f"{_D}.{name}()"),
        )
        for name in _TIME_PARTS
    },
    "hasValue": (_o("optional", _is(BOOL), "optional.of(1).hasValue()"),),
    "value": (_o("optional", _element(0), "optional.of(1).value()"),),
    "or": (_o("optional any", _is(DYN), "optional.none().or(optional.of(1))"),),
    "orValue": (_o("optional any", _or_value, "optional.none().orValue(1)"),),
}

_ORDERED = ("num num", "bool bool", "string string", "bytes bytes", "timestamp timestamp",
            "duration duration")  # fmt: skip
_ORDER_EXAMPLES = ("1 {} 1.5", "false {} true", '"a" {} "b"', 'b"a" {} b"b"', f"{_T} {{}} {_T}",
                   f"{_D} {{}} {_D}")  # fmt: skip


def _ordering(op: str) -> tuple[Overload, ...]:
    return tuple(
        _o(params, _is(BOOL), example.format(op))
        for params, example in zip(_ORDERED, _ORDER_EXAMPLES, strict=True)
    )


def _arithmetic(op: str, kinds: Sequence[str]) -> tuple[Overload, ...]:
    samples = {"int": "7", "uint": "7u", "double": "7.5"}
    return tuple(
        _o(f"{k} {k}", _arg(0), f"{samples[k]} {op} {samples[k].replace('7', '2')}") for k in kinds
    )


OPERATORS: Final[Mapping[str, tuple[Overload, ...]]] = {
    "+": (
        *_arithmetic("+", ("int", "uint", "double")),
        _o("string string", _is(STRING), '"a" + "b"'),
        _o("bytes bytes", _is(BYTES), 'b"a" + b"b"'),
        _o("list list", _concat, '[1] + ["a"]'),
        _o("list map", _concat, '[1] + {"a": 2}'),
        _o("timestamp duration", _is(TIMESTAMP), f"{_T} + {_D}"),
        _o("duration duration", _is(DURATION), f"{_D} + {_D}"),
    ),
    "-": (
        *_arithmetic("-", ("int", "uint", "double")),
        _o("timestamp timestamp", _is(DURATION), f"{_T} - {_T}"),
        _o("timestamp duration", _is(TIMESTAMP), f"{_T} - {_D}"),
        _o("duration duration", _is(DURATION), f"{_D} - {_D}"),
    ),
    "*": _arithmetic("*", ("int", "uint", "double")),
    "/": _arithmetic("/", ("int", "uint", "double")),
    "%": _arithmetic("%", ("int", "uint")),
    **{op: _ordering(op) for op in ("<", "<=", ">", ">=")},
    "==": (_o("any any", _is(BOOL), '1 == "a"'),),
    "!=": (_o("any any", _is(BOOL), '1 != "a"'),),
    "in": (
        _o("any list", _is(BOOL), '1 in [1, "a"]'),
        _o("key map", _is(BOOL), '"a" in {"a": 1}'),
    ),
    "[]": (
        _o("list int", _element(0), "[1, 2][1]"),
        _o("list uint", _element(0), "[1, 2][1u]"),
        _o("map key", _value(0), '{"a": 1}["a"]'),
        _o("optional any", _is(optional_of(DYN)), "optional.none()[1]"),
    ),
    "!_": (_o("bool", _is(BOOL), "!false"),),
    "-_": (
        _o("int", _is(INT), "-(1)"),
        _o("double", _is(DOUBLE), "-(1.5)"),
        _o("bool", _is(BOOL), "-(true)"),
    ),
}

MACROS: Final = ("all", "exists", "exists_one", "existsOne", "filter", "map")
NAMESPACES: Final = frozenset({"optional"})  # `optional.of(x)` names a function, not a field
