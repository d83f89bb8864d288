"""YAML with lines: the documents of a file as plain data, with the line each value starts on.

Duplicate keys, aliases that expand without end and unreadable text are problems naming the
file and line (``InvalidFileError``), never a traceback. ``meshctl.files`` comes here only when
a file is not in the cache of files already checked (``meshctl.files.cache``): PyYAML is about 10 ms
of a command's start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from meshctl.problems import InvalidFileError, Loc, Problem, dotted

MAX_NODES = 200_000  # YAML values in one file, aliases expanded


@dataclass(frozen=True, slots=True)
class Tree:
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

    def tree(self, node: yaml.Node) -> Tree:
        lines: dict[Loc, int] = {}
        return Tree(self._build(node, (), lines), lines)

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


def trees(text: str, path: str) -> list[Tree]:
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
