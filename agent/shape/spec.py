"""What the layout wants one provider to be: a :class:`ProviderSpec`, and its inventories."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent.model.resources import Inventory

ParentOf = Callable[[int | None], str]
"""Name of the provider a device on host NUMA node N (None: unknown) hangs under."""


@dataclass(slots=True)
class ProviderSpec:
    """One provider the host should have (:func:`agent.shape.layout.apply_layout` writes it).

    Attributes:
        name: provider name.
        parent: parent provider name; None for the compute node.
        inventory: resource class -> Inventory.
        traits: traits the agent sets.
        decides: custom traits the agent decides on this provider besides
            ``traits``: removed when present and not in ``traits`` (a GPU's
            provider: the trait of every mdev type the GPU offers).
    """

    name: str
    parent: str | None
    inventory: dict[str, Inventory]
    traits: set[str]
    decides: frozenset[str] = frozenset()


def inventory(rc: str, total: int, reserved: int = 0, ratio: float = 1.0) -> Inventory:
    """One class's inventory: ``max_unit = total`` (compute-node-inventory.rst)."""
    return Inventory(
        total=total, reserved=reserved, max_unit=total, allocation_ratio=ratio, resource_class=rc
    )
