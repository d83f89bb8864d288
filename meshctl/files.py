"""Reading meshctl files: YAML with line numbers in, typed documents or precise problems out.

Every problem names the file, the line, the field and what was expected, one line each, so
``meshctl validate`` and every command that reads a file can print them as they are and exit 2.
Nothing here writes anything.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml
from pydantic import BaseModel, ValidationError

from meshctl import filecache
from meshctl.model import API_VERSION, KINDS, Document
from meshctl.model.base import LABEL_KEY_PATTERN, NAME_PATTERN
from meshctl.model.mesh import AWS_REGION, GCP_REGION
from meshctl.problems import InvalidFileError, Problem

Loc = tuple[str | int, ...]
MAX_NODES = 200_000  # YAML values in one file, aliases expanded
D = TypeVar("D", bound=BaseModel)

# Regular expressions are exact but unreadable in an error; say what they mean instead.
_PATTERN_WORDS = {
    NAME_PATTERN: "a name of lower-case letters, digits and '-' (at most 63 characters)",
    LABEL_KEY_PATTERN: "a label key such as rack or example.com/team",
    AWS_REGION: "an AWS region such as us-east-1",
    GCP_REGION: "a GCP region such as us-central1",
}


@dataclass(frozen=True, slots=True)
class Loaded:
    path: str
    line: int
    document: Document
    lines: Mapping[Loc, int]
    # the whole file's text, as read (to point at a line inside a multi-line value)
    text: str

    def line_of(self, *loc: str | int) -> int:
        """The line of the deepest part of ``loc`` that the file spells out."""
        for end in range(len(loc), 0, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return self.line


@dataclass(frozen=True, slots=True)
class _Tree:
    """One YAML document as plain data, with the line on which each path starts."""

    data: Any
    lines: dict[Loc, int]


# --- YAML with lines -------------------------------------------------------------------------


class _Builder:
    """Plain data from a composed YAML node, recording lines and rejecting duplicate keys."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.problems: list[Problem] = []
        self._scalars = yaml.SafeLoader("")
        self._explicit: set[Loc] = set()
        self.built = 0

    def tree(self, node: yaml.Node) -> _Tree:
        lines: dict[Loc, int] = {}
        return _Tree(self._build(node, (), lines), lines)

    def _build(self, node: yaml.Node, loc: Loc, lines: dict[Loc, int]) -> Any:
        self.built += 1
        if self.built > MAX_NODES:  # aliases can make a tiny file expand without end
            raise yaml.YAMLError(
                f"more than {MAX_NODES:,} values (aliases expanding?); expected a smaller file"
            )
        lines[loc] = node.start_mark.line + 1
        if isinstance(node, yaml.SequenceNode):
            return [self._build(item, (*loc, i), lines) for i, item in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, loc, lines)
        return self._scalars.construct_object(node)

    def _mapping(self, node: yaml.MappingNode, loc: Loc, lines: dict[Loc, int]) -> dict[str, Any]:
        written = {id(key) for key, _ in node.value}
        self._scalars.flatten_mapping(node)  # YAML merge keys (<<: *anchor) come first
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self._scalars.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                self._problem(line, loc, f"expected a text key, got {key!r}")
                continue
            if key in out and id(key_node) in written and (*loc, key) in self._explicit:
                self._problem(line, (*loc, key), "duplicate key; each key may appear once")
                continue
            if id(key_node) in written:  # a key spelled out here overrides a merged one
                self._explicit.add((*loc, key))
            out[key] = self._build(value_node, (*loc, key), lines)
            lines[(*loc, key)] = line
        return out

    def _problem(self, line: int, loc: Loc, message: str) -> None:
        self.problems.append(Problem(self.path, line, dotted(loc), message))


# libyaml's parser where PyYAML was built with it (about 8 times faster on the catalogs); the
# pure-Python one otherwise. Both give the same nodes, marks and messages.
_COMPOSER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml_problem(err: yaml.MarkedYAMLError, path: str) -> Problem:
    mark, context = err.problem_mark, err.context_mark
    line = mark.line + 1 if mark is not None else None
    message = f"invalid YAML: {err.problem or err.context}"
    if err.problem and err.context and context is not None:
        message += f" ({err.context} on line {context.line + 1})"
    return Problem(path, line, "", message)


def _trees(text: str, path: str) -> list[_Tree]:
    builder = _Builder(path)
    try:
        nodes = [n for n in yaml.compose_all(text, Loader=_COMPOSER) if n is not None]
        trees = [builder.tree(node) for node in nodes]
    except yaml.MarkedYAMLError as err:
        raise InvalidFileError([_yaml_problem(err, path)]) from None
    except RecursionError:
        raise InvalidFileError(
            [Problem(path, None, "", "invalid YAML: nested too deeply")]
        ) from None
    except (yaml.YAMLError, ValueError) as err:  # unreadable characters, impossible dates
        position = getattr(err, "position", None)
        line = text.count("\n", 0, position) + 1 if isinstance(position, int) else None
        message = f"invalid YAML: {str(err).splitlines()[0]}"
        raise InvalidFileError([Problem(path, line, "", message)]) from None
    if builder.problems:
        raise InvalidFileError(builder.problems)
    if not trees:
        raise InvalidFileError([Problem(path, None, "", "empty file: expected a meshctl document")])
    return trees


# --- validation --------------------------------------------------------------------------------


def dotted(loc: Loc) -> str:
    """``("spec", "pools", 0, "region")`` -> ``spec.pools[0].region``."""
    out = ""
    for seg in loc:
        out += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if out else str(seg))
    return out


def _document(tree: _Tree, path: str) -> Document:
    data = tree.data
    line = tree.lines.get((), 1)
    if not isinstance(data, dict):
        raise InvalidFileError(
            [Problem(path, line, "", "expected a mapping with apiVersion, kind")]
        )
    head = _header_problems(data, tree.lines, path)
    if head:
        raise InvalidFileError(head)
    model = KINDS[data["kind"]]
    try:
        return model.model_validate(data)
    except ValidationError as err:
        problems = _problems(err, model, tree, path)
        raise InvalidFileError(problems) from None


def _header_problems(data: dict[str, Any], lines: dict[Loc, int], path: str) -> list[Problem]:
    line = lines.get((), 1)
    problems = []
    api, kind = data.get("apiVersion"), data.get("kind")
    if api != API_VERSION:
        got = "nothing" if api is None else repr(api)
        problems.append(
            Problem(
                path,
                lines.get(("apiVersion",), line),
                "apiVersion",
                f"expected {API_VERSION!r}, got {got}",
            )
        )
    if not isinstance(kind, str) or kind not in KINDS:
        got = "nothing" if kind is None else repr(kind)
        problems.append(
            Problem(
                path,
                lines.get(("kind",), line),
                "kind",
                f"expected one of {', '.join(sorted(KINDS))}, got {got}",
            )
        )
    return problems


def _problems(
    err: ValidationError, model: type[BaseModel], tree: _Tree, path: str
) -> list[Problem]:
    merged: dict[tuple[int | None, str], list[str]] = {}
    for error in err.errors():
        loc = tuple(error["loc"])
        if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc = (*loc, str((error.get("ctx") or {}).get("discriminator", "")).strip("'"))
        matched, rest = _split_loc(loc, tree.data)
        missing = error["type"] in ("missing", "union_tag_not_found")
        shown = matched + rest[-1:] if missing else matched
        line = tree.lines.get(matched) or tree.lines.get((), None)
        message = error_message(cast(dict[str, Any], error), model, loc)
        merged.setdefault((line, dotted(shown)), []).append(message)
    return [
        Problem(path, line, field, " or ".join(dict.fromkeys(messages)))
        for (line, field), messages in sorted(
            merged.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1])
        )
    ]


def _split_loc(loc: Loc, data: Any) -> tuple[Loc, Loc]:
    """The part of a pydantic error location present in the file, and what is left over.

    pydantic puts union tags and member names (``aws``, ``list[str]``) in the location;
    they are not in the file, so they are skipped when finding the line and the field.
    """
    matched: list[str | int] = []
    rest: list[str | int] = []
    node = data
    for seg in loc:
        if _has(node, seg):
            node = node[seg]
            matched.append(seg)
        else:
            rest.append(seg)
    return tuple(matched), tuple(rest)


def _has(node: Any, seg: str | int) -> bool:
    if isinstance(node, dict):
        return isinstance(seg, str) and seg in node
    return isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node)


def error_message(error: dict[str, Any], model: type[BaseModel], loc: Loc) -> str:
    """One pydantic error of ``model`` at ``loc`` in meshctl's words: ``expected ..., got
    ...`` (a file's problems, and a job built from flags)."""
    kind, ctx, got = error["type"], error.get("ctx") or {}, error.get("input")
    if kind in ("missing", "union_tag_not_found"):
        return "required field is missing"
    if kind == "union_tag_invalid":
        tags = str(ctx.get("expected_tags", "")).split(", ")
        return f"expected {', '.join(tags[:-1])} or {tags[-1]}, got {ctx.get('tag')!r}"
    if kind == "extra_forbidden":
        return _unknown_field(str(loc[-1]), _fields_at(model, loc[:-1]))
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", error["msg"]))
    if kind == "literal_error":
        return f"expected {ctx['expected']}, got {got!r}"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern"))
        return f"expected {_PATTERN_WORDS.get(pattern, 'text matching ' + pattern)}, got {got!r}"
    msg = str(error["msg"])
    if msg.startswith("Input should be "):
        return f"expected {msg.removeprefix('Input should be ')}, got {got!r}"
    return f"{msg[:1].lower()}{msg[1:]}"


def _unknown_field(name: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown field {name!r}; did you mean {close[0]!r}?"
    if allowed:
        return f"unknown field {name!r}; expected one of: {', '.join(allowed)}"
    return f"unknown field {name!r}"


def _fields_at(model: type[BaseModel], loc: Loc) -> list[str]:
    """The field names of the model found by following ``loc`` from ``model``."""
    current: Any = model
    for seg in loc:
        current = _step(current, seg)
        if current is None:
            return []
    return list(current.model_fields) if _is_model(current) else []


def _step(tp: Any, seg: str | int) -> Any:
    for candidate in _members(tp):
        if _is_model(candidate) and isinstance(seg, str):
            if seg in candidate.model_fields:
                return candidate.model_fields[seg].annotation
            if seg in _tags(candidate):
                return candidate
        origin = typing.get_origin(candidate)
        if origin is list and isinstance(seg, int):
            return typing.get_args(candidate)[0]
        if origin is dict and isinstance(seg, str):
            return typing.get_args(candidate)[1]
    return None


def _members(tp: Any) -> Iterator[Any]:
    if typing.get_origin(tp) is typing.Annotated:
        yield from _members(typing.get_args(tp)[0])
    elif typing.get_origin(tp) in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            yield from _members(arg)
    else:
        yield tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _tags(model: type[BaseModel]) -> set[str]:
    """The literal values a model's fields take: the tags of a discriminated union."""
    tags: set[str] = set()
    for info in model.model_fields.values():
        if typing.get_origin(info.annotation) is typing.Literal:
            tags.update(str(a) for a in typing.get_args(info.annotation))
    return tags | {model.__name__}


# --- the public entry points -------------------------------------------------------------------


def load_text(text: str, path: str = "<text>") -> list[Loaded]:
    """Every document in ``text``; all problems in all documents at once, or the documents."""
    loaded: list[Loaded] = []
    problems: list[Problem] = []
    for tree in _trees(text, path):
        try:
            loaded.append(
                Loaded(path, tree.lines.get((), 1), _document(tree, path), tree.lines, text)
            )
        except InvalidFileError as err:
            problems.extend(err.problems)
    if problems:
        raise InvalidFileError(problems)
    return loaded


MAX_FILE_BYTES = 4 * 2**20  # far above any real mesh or policy; stops a runaway file early


def load_path(path: Path | str) -> list[Loaded]:
    name = str(path)
    try:
        size = Path(path).stat().st_size
        if size > MAX_FILE_BYTES and Path(path).is_file():
            message = (
                f"file is {size / 2**20:.1f} MiB; expected at most {MAX_FILE_BYTES // 2**20} MiB"
            )
            raise InvalidFileError([Problem(name, None, "", message)])
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidFileError([Problem(name, None, "", "no such file")]) from None
    except IsADirectoryError:
        raise InvalidFileError(
            [Problem(name, None, "", "is a directory, expected a file")]
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
        raise InvalidFileError([Problem(name, None, "", f"cannot read: {reason}")]) from None
    return filecache.cached(name, text, load_text)


def load_one(path: Path | str, model: type[D]) -> D:
    """The single document of kind ``model`` in the file at ``path``."""
    docs = load_path(path)
    kind = model.__name__
    if len(docs) != 1 or not isinstance(docs[0].document, model):
        found = ", ".join(type(d.document).__name__ for d in docs)
        raise InvalidFileError(
            [Problem(str(path), docs[0].line, "kind", f"expected one {kind} document, got {found}")]
        )
    return docs[0].document
