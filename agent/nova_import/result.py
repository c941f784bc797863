"""What an import did (or, dry, would do): made by :mod:`agent.nova_import.flow`, shown by
:mod:`agent.nova_import.render` and the ``import-nova`` command."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.nova_import.refusal import Refusal


@dataclass(slots=True)
class ImportResult:
    """What an import did (or, dry, would do).

    Attributes:
        nodes: nodenames whose tree was imported (or planned).
        created: providers created. inventories, traits, aggregates: providers written.
        allocations_written: consumers whose allocations were written (would be, dry).
        allocations_unchanged: consumers Placement already held as nova says.
        allocations_removed: consumers nova says are gone whose part was removed.
        removed_lines: one line per consumer removed (not dry).
        new_uuids: ``{compute_nodes.id: UUID}`` of rows without a UUID.
        diff: the dry run's lines.
        refusals: rows and consumers not imported.
    """

    nodes: list[str] = field(default_factory=list)
    created: int = 0
    inventories: int = 0
    traits: int = 0
    aggregates: int = 0
    allocations_written: int = 0
    allocations_unchanged: int = 0
    allocations_removed: int = 0
    removed_lines: list[str] = field(default_factory=list)
    new_uuids: dict[int, str] = field(default_factory=dict)
    diff: list[str] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
