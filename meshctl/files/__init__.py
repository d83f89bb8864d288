"""Reading meshctl files: YAML with line numbers in, typed documents or precise problems out.

Every problem names the file, the line, the field and what was expected, one line each, so
``meshctl validate`` and every command that reads a file can print them as they are and exit 2.
Nothing here writes anything.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pydantic import BaseModel, ValidationError

from meshctl.files import cache as filecache
from meshctl.model import API_VERSION, KINDS, Document
from meshctl.model.base import LABEL_KEY_PATTERN, NAME_PATTERN
from meshctl.model.mesh import AWS_REGION, GCP_REGION
from meshctl.problems import InvalidFileError, Loc, Problem, dotted

if TYPE_CHECKING:
    from meshctl.files.yamllines import Tree

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


# --- validation --------------------------------------------------------------------------------


def _document(tree: Tree, path: str) -> Document:
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


def _problems(err: ValidationError, model: type[BaseModel], tree: Tree, path: str) -> list[Problem]:
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
    import difflib

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
    from meshctl.files.yamllines import trees  # PyYAML: only for a file not in the cache

    loaded: list[Loaded] = []
    problems: list[Problem] = []
    for tree in trees(text, path):
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
