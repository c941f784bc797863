"""One resource provider: its immutable snapshot and the mutable node a tree holds."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from agent.model.resources import Inventory

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

    def walk(self) -> Iterator[ProviderNode]:
        """This provider then its descendants, parents before children."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            # reversed so that siblings come out in insertion order
            stack.extend(reversed(node.children.values()))
