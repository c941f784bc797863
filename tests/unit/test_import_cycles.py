"""No circle of imports among the modules of ``agent`` and ``drivers``.

A circle (``a -> b -> c -> a``, of any length) has no order of meaning
(which module is the lower?) and breaks when one of its modules moves.
Imports under ``TYPE_CHECKING`` count (issue 26): a type that is needed
both ways belongs in a third module. Read by grimp, the import graph
library import-linter is built on; circles are its strongly connected
components (Tarjan, 1972) with more than one module, or one module that
imports itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

import grimp

Graph = Mapping[str, Iterable[str]]
"""``{module: modules it imports directly}``; names absent as keys import nothing."""


def import_graph(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """``{module: modules it imports directly}`` of every module in grimp's ``graph``."""
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of ``graph`` that hold a circle.

    Tarjan's algorithm, iterative (no recursion limit on deep chains).
    Returns each component as a sorted list of modules, the list sorted;
    a component of one module is kept only if the module imports itself.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            child = next(successors, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return sorted(found)


def cycle_through(graph: Graph, component: list[str]) -> list[str]:
    """One circle inside ``component``: ``[a, b, ..., a]``, the shortest from its first module.

    Breadth-first from ``component[0]`` over edges that stay in the
    component, back to ``component[0]``; a strongly connected component
    always holds one (``ValueError`` if ``component`` is not one).
    """
    start, members = component[0], set(component)
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(set(graph.get(node, ())) & members):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if child not in parent:
                parent[child] = node
                queue.append(child)
    raise ValueError(f"no circle through {start} inside {component}")


def describe(graph: Graph) -> list[str]:
    """One line per circle of ``graph``: its modules, then one path round it."""
    return [
        f"{len(c)} modules {c}: " + " -> ".join(cycle_through(graph, c)) for c in circles(graph)
    ]


def test_no_circle_of_imports_in_agent_and_drivers():
    graph = import_graph(grimp.build_graph("agent", "drivers", exclude_type_checking_imports=False))
    assert len(graph) > 100, "grimp read too few modules: the check would prove nothing"
    found = describe(graph)
    assert not found, "circles of imports:\n" + "\n".join(found)


def test_a_circle_of_three_modules_is_found_with_its_path():
    graph = grimp.ImportGraph()
    for importer, imported in [
        ("pkg.a", "pkg.b"),
        ("pkg.b", "pkg.c"),
        ("pkg.c", "pkg.a"),
        ("pkg.c", "pkg.d"),
        ("pkg.d", "pkg.e"),
    ]:
        graph.add_import(importer=importer, imported=imported)
    as_dict = import_graph(graph)
    assert circles(as_dict) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert cycle_through(as_dict, ["pkg.a", "pkg.b", "pkg.c"]) == [
        "pkg.a",
        "pkg.b",
        "pkg.c",
        "pkg.a",
    ]
    assert describe(as_dict) == [
        "3 modules ['pkg.a', 'pkg.b', 'pkg.c']: pkg.a -> pkg.b -> pkg.c -> pkg.a"
    ]


def test_two_circles_joined_by_one_edge_stay_two_and_a_pair_and_self_import_count():
    graph = {
        "a": {"b"},
        "b": {"a", "c"},
        "c": {"d"},
        "d": {"e"},
        "e": {"c"},
        "f": {"f"},
        "g": {"a"},
    }
    assert circles(graph) == [["a", "b"], ["c", "d", "e"], ["f"]]
    assert cycle_through(graph, ["f"]) == ["f", "f"]
    assert circles({"a": {"b"}, "b": {"c"}}) == []
