"""One resource provider: its immutable snapshot, and the mutable node that owns its changes.

:class:`ProviderNode` is the one place a provider's generation, inventory,
traits and aggregates change (as openstack/placement's ``objects/consumer.py``
keeps a consumer's transitions on one type): every change drops the cached
snapshot, and a generation is only ever set from what Placement said.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from agent.model.resources import Inventory, to_inventories

_EMPTY_INVENTORY: Mapping[str, Inventory] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ProviderData:
    """An immutable snapshot of one resource provider.

    Attributes:
        uuid: the provider's UUID.
        name: the provider's name (unique in Placement).
        generation: Placement's generation, or None when Placement has not
            been read for this provider yet.
        parent_uuid: the parent's UUID; None for a root.
        root_uuid: the UUID of the root of this provider's tree.
        inventory: resource class -> :class:`Inventory` (read-only mapping).
        traits: trait names.
        aggregates: aggregate UUIDs.
    """

    uuid: str
    name: str
    generation: int | None
    parent_uuid: str | None
    root_uuid: str
    inventory: Mapping[str, Inventory]
    traits: frozenset[str]
    aggregates: frozenset[str]


class ProviderNode:
    """Mutable node of a :class:`~agent.model.provider_tree.ProviderTree` (under its lock)."""

    __slots__ = (
        "aggregates",
        "children",
        "generation",
        "inventory",
        "name",
        "parent",
        "root",
        "snapshot",
        "traits",
        "uuid",
    )

    def __init__(
        self, uuid: str, name: str, parent: ProviderNode | None, generation: int | None
    ) -> None:
        self.uuid = uuid
        self.name = name
        self.parent = parent
        self.root: ProviderNode = parent.root if parent is not None else self
        self.generation = generation
        # dict rather than list: O(1) removal, and insertion order is kept.
        self.children: dict[str, ProviderNode] = {}
        self.inventory: Mapping[str, Inventory] = _EMPTY_INVENTORY
        self.traits: frozenset[str] = frozenset()
        self.aggregates: frozenset[str] = frozenset()
        self.snapshot: ProviderData | None = None

    def data(self) -> ProviderData:
        """The immutable snapshot, cached until a field changes (``snapshot = None``)."""
        if self.snapshot is None:
            self.snapshot = ProviderData(
                uuid=self.uuid,
                name=self.name,
                generation=self.generation,
                parent_uuid=self.parent.uuid if self.parent is not None else None,
                root_uuid=self.root.uuid,
                inventory=self.inventory,
                traits=self.traits,
                aggregates=self.aggregates,
            )
        return self.snapshot

    # -- transitions (the tree's lock is held) -------------------------------------

    def record_generation(self, generation: int | None) -> None:
        """Take the generation Placement reported (None: nothing was reported)."""
        if generation is not None and generation != self.generation:
            self.generation = generation
            self.snapshot = None

    def replace_inventory(
        self, inventory: Mapping[str, Inventory | Mapping[str, Any]], generation: int | None
    ) -> bool:
        """Replace the whole inventory (``PUT .../inventories``); True when it changed.

        Raises:
            InvalidInventory: a record is out of range; nothing is changed.
        """
        new = to_inventories(inventory)
        changed = dict(self.inventory) != new
        if changed:
            self.inventory = MappingProxyType(new)
            self.snapshot = None
        self.record_generation(generation)
        return changed

    def replace_traits(self, traits: Iterable[str], generation: int | None = None) -> bool:
        """Replace the trait set; True when it changed."""
        return self._replace_set("traits", frozenset(traits), generation)

    def replace_aggregates(self, aggregates: Iterable[str], generation: int | None = None) -> bool:
        """Replace the aggregate set (UUIDs); True when it changed."""
        return self._replace_set("aggregates", frozenset(aggregates), generation)

    def _replace_set(self, attr: str, new: frozenset[str], generation: int | None) -> bool:
        changed = new != getattr(self, attr)
        if changed:
            setattr(self, attr, new)
            self.snapshot = None
        self.record_generation(generation)
        return changed

    def load(self, record: Mapping[str, Any]) -> None:
        """Take what a Placement record carries (``inventories``, ``traits``, ``aggregates``)."""
        if "inventories" in record:
            self.replace_inventory(record["inventories"], None)
        if "traits" in record:
            self.replace_traits(record["traits"])
        if "aggregates" in record:
            self.replace_aggregates(record["aggregates"])

    def take_fields(self, other: ProviderNode) -> None:
        """Hold ``other``'s inventory, traits and aggregates (a copy of a tree)."""
        self.inventory = other.inventory
        self.traits = other.traits
        self.aggregates = other.aggregates
        self.snapshot = None

    def walk(self) -> Iterator[ProviderNode]:
        """This provider then its descendants, parents before children."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            # reversed so that siblings come out in insertion order
            stack.extend(reversed(node.children.values()))
