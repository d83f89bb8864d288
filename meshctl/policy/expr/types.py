"""CEL's types as the checker sees them, and the policy variables' schema turned into types.

A type has a kind (``int``, ``uint``, ``double``, ``bool``, ``string``, ``bytes``,
``timestamp``, ``duration``, ``null``, ``type``, ``list``, ``map``, ``optional``, ``object``,
``dyn``) and, for the containers, parameters: ``list<T>``, ``map<K, V>``, ``optional<T>``. An
``object`` is a map with known fields (``job``, ``job.resources``): at run time it is a plain
map, so whatever takes a map takes it too. ``dyn`` is unknown until run time: the checker lets
it through wherever some type would do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class Type:
    kind: str
    params: tuple[Type, ...] = ()
    label: str = ""  # an object's name (job, job.resources)
    fields: Mapping[str, Type] = field(default_factory=dict, compare=False, hash=False)

    def __str__(self) -> str:
        if self.kind == "object":
            return self.label or "object"
        if self.params:
            return f"{self.kind}<{', '.join(str(p) for p in self.params)}>"
        return self.kind

    @property
    def element(self) -> Type:
        """A list's elements, a map's keys (what a macro ranges over), an optional's value."""
        if self.kind == "object":
            return STRING
        return self.params[0] if self.params else DYN

    @property
    def value(self) -> Type:
        """A map's values (an object's: each field has its own, so dyn)."""
        return self.params[1] if self.kind == "map" else DYN


INT: Final = Type("int")
UINT: Final = Type("uint")
DOUBLE: Final = Type("double")
BOOL: Final = Type("bool")
STRING: Final = Type("string")
BYTES: Final = Type("bytes")
TIMESTAMP: Final = Type("timestamp")
DURATION: Final = Type("duration")
NULL: Final = Type("null")
TYPE: Final = Type("type")
DYN: Final = Type("dyn")
PRIMITIVES: Final = {
    t.kind: t
    for t in (INT, UINT, DOUBLE, BOOL, STRING, BYTES, TIMESTAMP, DURATION, NULL, TYPE, DYN)
}
MAP_KEYS: Final = frozenset({"int", "uint", "bool", "string"})  # what a map may be keyed by
NUMBERS: Final = frozenset({"int", "uint", "double"})


def list_of(element: Type) -> Type:
    return Type("list", (element,))


def map_of(key: Type, value: Type) -> Type:
    return Type("map", (key, value))


def optional_of(value: Type) -> Type:
    return Type("optional", (value,))


def object_of(label: str, fields: Mapping[str, Type]) -> Type:
    return Type("object", label=label, fields=dict(fields))


def join(types: list[Type]) -> Type:
    """One type for values that may be any of ``types`` (list items, ``?:`` branches)."""
    if not types:
        return DYN
    first = types[0]
    if all(t == first for t in types):
        return first
    if all(t.kind == "list" for t in types):
        return list_of(join([t.element for t in types]))
    if all(t.kind == "map" for t in types):
        return map_of(join([t.params[0] for t in types]), join([t.params[1] for t in types]))
    return DYN


def article(t: Type | str) -> str:
    text = str(t)
    return ("an " if text[:1] in "aeiou" else "a ") + text


# --- the schema of variables.py as types ------------------------------------------------------


def from_schema(node: Any, label: str) -> Type:
    """``variables.SCHEMA``'s notation as a type: a leaf names a type (``list<string>``),
    ``{"*": X}`` is a map of string to X, ``{"[]": X}`` a list of X, any other mapping an
    object with those fields."""
    if isinstance(node, str):
        return parse_type(node)
    if "*" in node:
        return map_of(STRING, from_schema(node["*"], label + "[*]"))
    if "[]" in node:
        return list_of(from_schema(node["[]"], label + "[]"))
    return object_of(label, {k: from_schema(v, f"{label}.{k}") for k, v in node.items()})


def parse_type(text: str) -> Type:
    """``int``, ``list<string>``, ``map<string, double>`` -> the type."""
    text = text.strip()
    if text in PRIMITIVES:
        return PRIMITIVES[text]
    head, _, rest = text.partition("<")
    if not rest.endswith(">"):
        raise ValueError(f"unknown type {text!r}")
    params = _split_params(rest[:-1])
    if head == "list" and len(params) == 1:
        return list_of(parse_type(params[0]))
    if head == "map" and len(params) == 2:
        return map_of(parse_type(params[0]), parse_type(params[1]))
    raise ValueError(f"unknown type {text!r}")


def _split_params(text: str) -> list[str]:
    depth, start, out = 0, 0, []
    for i, char in enumerate(text):
        depth += {"<": 1, ">": -1}.get(char, 0)
        if char == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    return [*out, text[start:]]
