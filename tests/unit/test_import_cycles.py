"""No two modules of ``agent`` and ``drivers`` import each other.

A pair that imports each other has no order of meaning (which one is the
lower?) and breaks when one of them moves. Imports under ``TYPE_CHECKING``
count (issue 26): a type that is needed both ways belongs in a third module.
Read by grimp, the import graph library import-linter is built on.
"""

from __future__ import annotations

import grimp

KNOWN_PAIRS: frozenset[frozenset[str]] = frozenset()


def mutual_imports() -> set[frozenset[str]]:
    """Every pair of modules of ``agent`` and ``drivers`` that import each other directly."""
    graph = grimp.build_graph("agent", "drivers", exclude_type_checking_imports=False)
    pairs = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if module in graph.find_modules_directly_imported_by(imported):
                pairs.add(frozenset({module, imported}))
    return pairs


def test_no_two_modules_import_each_other():
    found = mutual_imports() - KNOWN_PAIRS
    assert not found, "modules importing each other: " + "; ".join(
        " <-> ".join(sorted(p)) for p in sorted(found, key=sorted)
    )
