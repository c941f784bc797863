"""The in-memory tree of resource providers: what the host should look like.

Contract: DESIGN.md ("Contracts") and ``reshape-provider-tree.txt``. A
driver edits a :class:`ProviderTree` in ``update_provider_tree``; the report
client compares it with what Placement holds and writes the difference.

Rules kept here:

- Provider names and UUIDs are unique across the whole tree (Placement
  refuses a duplicate name with ``placement.duplicate_name``).
- A child's UUID defaults to ``uuid5(root UUID, child name)`` so it is the
  same after a restart without any local state.
- Generations are only ever set from what Placement said; nothing here
  increments them.
- Lookup by name or by UUID is a dict access for every provider, roots and
  children alike; reading one provider copies only that provider.
- Every public method takes the tree's lock, so one tree may be shared by
  threads (the service's cycle and a CLI ``show`` in the same process).
"""

from __future__ import annotations

import threading
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from typing import Any

from agent.model.provider_data import ProviderData, ProviderNode
from agent.model.provider_index import ProviderIndex
from agent.model.resources import Inventory, to_inventories


def child_uuid(root_uuid: str, name: str) -> str:
    """The stable UUID of the child provider ``name`` under root ``root_uuid``.

    ``uuid5(UUID(root_uuid), name)``: the same inputs give the same UUID on
    every host and after every restart (DESIGN.md, "Tree shape").

    Raises:
        ValueError: ``root_uuid`` is not a UUID.
    """
    return str(uuidlib.uuid5(uuidlib.UUID(root_uuid), name))


ROOT_NAMESPACE = uuidlib.UUID("6f1c2b8e-3d6a-5b1e-9a43-0c2d7e5f4a10")
"""Namespace of :func:`default_root_uuid` (fixed forever: changing it renames every node)."""


def default_root_uuid(nodename: str) -> str:
    """The compute node UUID a node gets when the state directory has none.

    ``uuid5(ROOT_NAMESPACE, nodename)``: a host whose state directory was
    wiped finds the same UUID again instead of creating a duplicate provider.
    """
    return str(uuidlib.uuid5(ROOT_NAMESPACE, nodename))


class ProviderTree:
    """A forest of resource providers, indexed by name and by UUID.

    Every method that takes ``name_or_uuid`` accepts either; an unknown one
    raises :class:`~agent.model.exceptions.ProviderNotFound`. The index
    (:class:`~agent.model.provider_index.ProviderIndex`) finds providers and
    keeps names and UUIDs unique; each provider's node
    (:class:`~agent.model.provider_data.ProviderNode`) owns its changes; the
    tree holds the lock.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._index = ProviderIndex()

    def _find(self, name_or_uuid: str) -> ProviderNode:
        return self._index.find(name_or_uuid)

    def populate_from_iterable(self, providers: Iterable[Mapping[str, Any]]) -> None:
        """Add or refresh providers from Placement's provider records.

        See :meth:`agent.model.provider_index.ProviderIndex.populate_from_iterable`.

        Raises:
            ProviderNotFound: a parent is neither in ``providers`` nor in the tree.
            ProviderConflict: two providers claim one name.
        """
        with self._lock:
            self._index.populate_from_iterable(providers)

    def new_root(self, name: str, uuid: str, generation: int | None = None) -> str:
        """Add a root provider.

        Args:
            name: provider name (the compute node's nodename).
            uuid: provider UUID (kept in the state directory by the agent).
            generation: Placement's generation, if known.

        Returns:
            ``uuid``.

        Raises:
            ProviderConflict: the name or UUID is already in the tree.
            ValueError: ``uuid`` is not a UUID.
        """
        uuid = str(uuidlib.UUID(uuid))
        with self._lock:
            return self._index.add(name, uuid, None, generation)

    def new_child(
        self,
        name: str,
        parent: str,
        uuid: str | None = None,
        generation: int | None = None,
    ) -> str:
        """Add a child provider under ``parent`` (a name or UUID).

        Args:
            name: provider name, e.g. ``host1_NUMA0``.
            parent: name or UUID of the parent provider.
            uuid: provider UUID; defaults to :func:`child_uuid` of the root.
            generation: Placement's generation, if known.

        Returns:
            The child's UUID.

        Raises:
            ProviderNotFound: ``parent`` is not in the tree.
            ProviderConflict: the name or UUID is already in the tree.
        """
        with self._lock:
            parent_node = self._find(parent)
            if uuid is None:
                uuid = child_uuid(parent_node.root.uuid, name)
            else:
                uuid = str(uuidlib.UUID(uuid))
            return self._index.add(name, uuid, parent_node, generation)

    def remove(self, name_or_uuid: str) -> None:
        """Remove a provider and its whole subtree.

        Raises:
            ProviderNotFound: not in the tree.
        """
        with self._lock:
            self._index.remove(self._find(name_or_uuid))

    def exists(self, name_or_uuid: str) -> bool:
        """True when a provider with this name or UUID is in the tree."""
        with self._lock:
            return name_or_uuid in self._index.by_uuid or name_or_uuid in self._index.by_name

    def data(self, name_or_uuid: str) -> ProviderData:
        """An immutable snapshot of one provider (cached until it changes).

        Raises:
            ProviderNotFound: not in the tree.
        """
        with self._lock:
            return self._find(name_or_uuid).data()

    def get_provider_uuids(self, name_or_uuid: str | None = None) -> list[str]:
        """UUIDs of a provider and its descendants, or of every provider.

        Parents always come before their children, so the list is a valid
        order for creating providers (reverse it to delete them).

        Raises:
            ProviderNotFound: ``name_or_uuid`` is not in the tree.
        """
        with self._lock:
            if name_or_uuid is not None:
                return [n.uuid for n in self._find(name_or_uuid).walk()]
            return [n.uuid for root in self._index.roots.values() for n in root.walk()]

    def get_provider_uuids_in_tree(self, name_or_uuid: str) -> list[str]:
        """UUIDs of every provider in the tree that holds ``name_or_uuid``, root first.

        Raises:
            ProviderNotFound: not in the tree.
        """
        with self._lock:
            return [n.uuid for n in self._find(name_or_uuid).root.walk()]

    @property
    def root_uuids(self) -> list[str]:
        """UUIDs of the roots, in the order they were added."""
        with self._lock:
            return list(self._index.roots)

    def children(self, name_or_uuid: str) -> list[str]:
        """UUIDs of the direct children of a provider.

        Raises:
            ProviderNotFound: not in the tree.
        """
        with self._lock:
            return list(self._find(name_or_uuid).children)

    def all_data(self) -> list[ProviderData]:
        """Snapshots of every provider, parents before children."""
        with self._lock:
            return [n.data() for root in self._index.roots.values() for n in root.walk()]

    def __len__(self) -> int:
        with self._lock:
            return len(self._index.by_uuid)

    # -- copying ------------------------------------------------------------------

    def take_from(self, other: ProviderTree) -> None:
        """Hold exactly what ``other`` holds, taking its providers over.

        ``other`` is emptied: the providers move, they are not copied (a
        caller that kept a :meth:`copy` to undo edits hands it back here).
        """
        with self._lock, other._lock:
            self._index, other._index = other._index, ProviderIndex()

    def copy(self) -> ProviderTree:
        """An independent tree with the same providers (inventories are shared immutables)."""
        with self._lock:
            other = ProviderTree()
            index = other._index
            for root in self._index.roots.values():
                for node in root.walk():
                    parent = index.by_uuid[node.parent.uuid] if node.parent else None
                    index.add(node.name, node.uuid, parent, node.generation)
                    index.by_uuid[node.uuid].take_fields(node)
            return other

    # -- one provider's fields (the node makes each change) ---------------------------

    def update_generation(self, name_or_uuid: str, generation: int) -> None:
        """Record the generation Placement reported for a provider.

        Raises:
            ProviderNotFound: not in the tree.
        """
        with self._lock:
            self._find(name_or_uuid).record_generation(generation)

    def has_inventory_changed(
        self, name_or_uuid: str, inventory: Mapping[str, Inventory | Mapping[str, Any]]
    ) -> bool:
        """True when ``inventory`` differs from the provider's in any Placement field.

        Raises:
            ProviderNotFound: not in the tree.
            InvalidInventory: a record of ``inventory`` is out of range.
        """
        new = to_inventories(inventory)
        with self._lock:
            return dict(self._find(name_or_uuid).inventory) != new

    def update_inventory(
        self,
        name_or_uuid: str,
        inventory: Mapping[str, Inventory | Mapping[str, Any]],
        generation: int | None = None,
    ) -> bool:
        """Replace a provider's whole inventory (as ``PUT .../inventories`` does).

        Args:
            inventory: resource class -> :class:`Inventory` or Placement-shaped
                dict; a class left out is removed.
            generation: Placement's new generation, when this mirrors a write.

        Returns:
            True when the inventory changed.

        Raises:
            ProviderNotFound: not in the tree.
            InvalidInventory: a record is out of range; nothing is changed.
        """
        with self._lock:
            return self._find(name_or_uuid).replace_inventory(inventory, generation)

    def has_traits(self, name_or_uuid: str, traits: Iterable[str]) -> bool:
        """True when the provider has every trait of ``traits``."""
        with self._lock:
            return set(traits) <= self._find(name_or_uuid).traits

    def have_traits_changed(self, name_or_uuid: str, traits: Iterable[str]) -> bool:
        """True when ``traits`` is not exactly the provider's trait set."""
        with self._lock:
            return self._find(name_or_uuid).traits != frozenset(traits)

    def update_traits(
        self, name_or_uuid: str, traits: Iterable[str], generation: int | None = None
    ) -> bool:
        """Replace a provider's traits. Returns True when they changed.

        Raises:
            ProviderNotFound: not in the tree.
        """
        with self._lock:
            return self._find(name_or_uuid).replace_traits(traits, generation)

    def add_traits(self, name_or_uuid: str, *traits: str) -> bool:
        """Add traits to a provider. Returns True when any was new."""
        with self._lock:
            node = self._find(name_or_uuid)
            return node.replace_traits(node.traits | set(traits))

    def remove_traits(self, name_or_uuid: str, *traits: str) -> bool:
        """Remove traits from a provider (absent ones are ignored). True when any went."""
        with self._lock:
            node = self._find(name_or_uuid)
            return node.replace_traits(node.traits - set(traits))

    def in_aggregates(self, name_or_uuid: str, aggregates: Iterable[str]) -> bool:
        """True when the provider is in every aggregate of ``aggregates``."""
        with self._lock:
            return set(aggregates) <= self._find(name_or_uuid).aggregates

    def have_aggregates_changed(self, name_or_uuid: str, aggregates: Iterable[str]) -> bool:
        """True when ``aggregates`` is not exactly the provider's aggregate set."""
        with self._lock:
            return self._find(name_or_uuid).aggregates != frozenset(aggregates)

    def update_aggregates(
        self, name_or_uuid: str, aggregates: Iterable[str], generation: int | None = None
    ) -> bool:
        """Replace a provider's aggregates (UUIDs). Returns True when they changed."""
        with self._lock:
            return self._find(name_or_uuid).replace_aggregates(aggregates, generation)

    def add_aggregates(self, name_or_uuid: str, *aggregates: str) -> bool:
        """Add aggregate UUIDs to a provider. Returns True when any was new."""
        with self._lock:
            node = self._find(name_or_uuid)
            return node.replace_aggregates(node.aggregates | set(aggregates))

    def remove_aggregates(self, name_or_uuid: str, *aggregates: str) -> bool:
        """Remove aggregate UUIDs from a provider. Returns True when any went."""
        with self._lock:
            node = self._find(name_or_uuid)
            return node.replace_aggregates(node.aggregates - set(aggregates))
