"""What a provider of a tree holds: generation, inventory, traits, aggregates (read and replace).

:class:`ProviderFields` is the part of :class:`~agent.model.provider_tree.ProviderTree`'s
API that reads and edits one provider's data; the tree supplies the lookup
(``_find``) and the lock. Rules of the tree's module docstring hold: a
generation is only set from what Placement said, and a change drops the
provider's cached snapshot.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from agent.model.provider_data import ProviderNode
from agent.model.resources import Inventory, to_inventories


class ProviderFields(abc.ABC):
    """Generation, inventory, traits and aggregates of the providers of a tree."""

    _lock: threading.RLock

    @abc.abstractmethod
    def _find(self, name_or_uuid: str) -> ProviderNode:
        """The provider with this name or UUID.

        Raises:
            ProviderNotFound: not in the tree.
        """

    # -- generation ---------------------------------------------------------

    def update_generation(self, name_or_uuid: str, generation: int) -> None:
        """Record the generation Placement reported for a provider.

        Raises:
            ProviderNotFound: not in the tree.
        """
        with self._lock:
            node = self._find(name_or_uuid)
            if node.generation != generation:
                node.generation = generation
                node.snapshot = None

    # -- inventory ------------------------------------------------------------

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
            name_or_uuid: the provider.
            inventory: resource class -> :class:`Inventory` or Placement-shaped
                dict; a class left out is removed.
            generation: Placement's new generation, when this mirrors a write.

        Returns:
            True when the inventory changed.

        Raises:
            ProviderNotFound: not in the tree.
            InvalidInventory: a record is out of range; nothing is changed.
        """
        new = to_inventories(inventory)
        with self._lock:
            node = self._find(name_or_uuid)
            changed = dict(node.inventory) != new
            if changed:
                node.inventory = MappingProxyType(new)
                node.snapshot = None
            if generation is not None and generation != node.generation:
                node.generation = generation
                node.snapshot = None
            return changed

    # -- traits ---------------------------------------------------------------

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
        return self._set(name_or_uuid, "traits", frozenset(traits), generation)

    def add_traits(self, name_or_uuid: str, *traits: str) -> bool:
        """Add traits to a provider. Returns True when any was new."""
        with self._lock:
            node = self._find(name_or_uuid)
            return self._set(name_or_uuid, "traits", node.traits | set(traits), None)

    def remove_traits(self, name_or_uuid: str, *traits: str) -> bool:
        """Remove traits from a provider (absent ones are ignored). True when any went."""
        with self._lock:
            node = self._find(name_or_uuid)
            return self._set(name_or_uuid, "traits", node.traits - set(traits), None)

    # -- aggregates -------------------------------------------------------------

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
        return self._set(name_or_uuid, "aggregates", frozenset(aggregates), generation)

    def add_aggregates(self, name_or_uuid: str, *aggregates: str) -> bool:
        """Add aggregate UUIDs to a provider. Returns True when any was new."""
        with self._lock:
            node = self._find(name_or_uuid)
            return self._set(name_or_uuid, "aggregates", node.aggregates | set(aggregates), None)

    def remove_aggregates(self, name_or_uuid: str, *aggregates: str) -> bool:
        """Remove aggregate UUIDs from a provider. Returns True when any went."""
        with self._lock:
            node = self._find(name_or_uuid)
            return self._set(name_or_uuid, "aggregates", node.aggregates - set(aggregates), None)

    def _set(
        self, name_or_uuid: str, attr: str, value: frozenset[str], generation: int | None
    ) -> bool:
        with self._lock:
            node = self._find(name_or_uuid)
            changed = getattr(node, attr) != value
            if changed:
                setattr(node, attr, value)
                node.snapshot = None
            if generation is not None and generation != node.generation:
                node.generation = generation
                node.snapshot = None
            return changed
