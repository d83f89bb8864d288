"""meshctl's modules import one another without cycles, `if TYPE_CHECKING:` imports included.

A cycle is the sign of one class cut into files (a mixin in one file, its subclass in another,
each naming the other): compose instead, and put what two modules share in a third. On a cycle
the test names every module of its strongly connected component and one concrete path
through it, e.g. `a -> b -> a`."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

import grimp
import pytest

pytestmark = pytest.mark.unit

Edges = Callable[[str], Iterable[str]]


def components(nodes: Iterable[str], edges: Edges) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (or one that imports
    itself), each sorted; iterative so a deep import chain cannot exhaust the stack."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    work: list[tuple[str, list[str]]] = []  # the depth-first path: each node, what it has left

    def enter(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        work.append((node, sorted(edges(node))))

    for root in sorted(nodes):
        if root in index:
            continue
        enter(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    enter(nxt)
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1 or node in edges(node):
                    found.append(sorted(members))
    return sorted(found)


def cycle_path(members: list[str], edges: Edges) -> list[str]:
    """The shortest cycle through the component's first module, staying inside it, from the
    first module back to it."""
    inside = set(members)
    start = members[0]
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(edges(node)):
            if nxt == start:
                path = [start]
                while node != start:
                    path.append(node)
                    node = came_from[node]
                return [start, *reversed(path[1:]), start]
            if nxt in inside and nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start} inside {members}")


def describe(members: list[str], edges: Edges) -> str:
    return f"{', '.join(members)}\n    e.g. {' -> '.join(cycle_path(members, edges))}"


def test_the_helpers_find_a_cycle_and_its_path() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e"]}
    cycles = components(graph, lambda module: graph[module])
    assert cycles == [["a", "b", "c"], ["e"]]
    assert cycle_path(["a", "b", "c"], lambda module: graph[module]) == ["a", "b", "c", "a"]
    assert cycle_path(["e"], lambda module: graph[module]) == ["e", "e"]


def test_meshctl_has_no_import_cycles() -> None:
    graph = grimp.build_graph("meshctl", exclude_type_checking_imports=False)

    def edges(module: str) -> set[str]:
        return graph.find_modules_directly_imported_by(module)

    cycles = components(graph.modules, edges)
    found = "\n".join(f"  - {describe(members, edges)}" for members in cycles)
    assert not cycles, f"import cycles in meshctl (TYPE_CHECKING imports included):\n{found}"
