"""No circle of imports among the modules of ``agent`` and ``drivers``.

A circle (``a -> b -> c -> a``, of any length) has no order of meaning
(which module is the lower?) and breaks when one of its modules moves.
Imports under ``TYPE_CHECKING`` count (issue 26): a type that is needed
both ways belongs in a third module. Read by grimp, the import graph
library import-linter is built on; circles are its strongly connected
components with more than one module (a module with those that both import
it and are imported by it, grimp's downstream and upstream sets), or one
module that imports itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import grimp


def graph_of(edges: Mapping[str, Sequence[str]]) -> grimp.ImportGraph:
    """A grimp graph of ``{module: modules it imports directly}`` (the tests' own graphs)."""
    graph = grimp.ImportGraph()
    for importer, imported in edges.items():
        graph.add_module(importer)
        for module in imported:
            graph.add_import(importer=importer, imported=module)
    return graph


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of ``graph`` that hold a circle.

    A module's component is itself with the modules it reaches and that reach
    it (grimp's ``find_upstream_modules`` and ``find_downstream_modules``); a
    component of one module is kept only if the module imports itself.
    Returns each component as a sorted list of modules, the list sorted.
    """
    found: set[tuple[str, ...]] = set()
    for module in graph.modules:
        others = graph.find_upstream_modules(module) & graph.find_downstream_modules(module)
        if others or module in graph.find_modules_directly_imported_by(module):
            found.add(tuple(sorted(others | {module})))
    return sorted(list(c) for c in found)


def cycle_through(graph: grimp.ImportGraph, component: list[str]) -> list[str]:
    """One circle inside ``component``: ``[a, b, ..., a]``, the shortest from its first module.

    The shortest of grimp's ``find_shortest_chain`` back to ``component[0]`` from each
    module it imports in the component (``ValueError`` if ``component`` holds no circle).
    """
    start, members = component[0], set(component)
    imported = graph.find_modules_directly_imported_by(start)
    if start in imported:
        return [start, start]
    chains = [
        chain
        for module in sorted(imported & members)
        if (chain := graph.find_shortest_chain(importer=module, imported=start))
    ]
    if not chains:
        raise ValueError(f"no circle through {start} inside {component}")
    return [start, *min(chains, key=len)]


def describe(graph: grimp.ImportGraph) -> list[str]:
    """One line per circle of ``graph``: its modules, then one path round it."""
    return [
        f"{len(c)} modules {c}: " + " -> ".join(cycle_through(graph, c)) for c in circles(graph)
    ]


def test_no_circle_of_imports_in_agent_and_drivers():
    graph = grimp.build_graph("agent", "drivers", exclude_type_checking_imports=False)
    assert len(graph.modules) > 100, "grimp read too few modules: the check would prove nothing"
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
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert cycle_through(graph, ["pkg.a", "pkg.b", "pkg.c"]) == [
        "pkg.a",
        "pkg.b",
        "pkg.c",
        "pkg.a",
    ]
    assert describe(graph) == [
        "3 modules ['pkg.a', 'pkg.b', 'pkg.c']: pkg.a -> pkg.b -> pkg.c -> pkg.a"
    ]


def test_two_circles_joined_by_one_edge_stay_two_and_a_pair_and_self_import_count():
    graph = graph_of(
        {
            "a": {"b"},
            "b": {"a", "c"},
            "c": {"d"},
            "d": {"e"},
            "e": {"c"},
            "f": {"f"},
            "g": {"a"},
        }
    )
    assert circles(graph) == [["a", "b"], ["c", "d", "e"], ["f"]]
    assert cycle_through(graph, ["f"]) == ["f", "f"]
    assert circles(graph_of({"a": {"b"}, "b": {"c"}})) == []
