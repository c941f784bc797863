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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from agent.model.exceptions import ProviderConflict, ProviderNotFound
from agent.model.resources import Inventory, to_inventories

_EMPTY_INVENTORY: Mapping[str, Inventory] = MappingProxyType({})


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


class _Provider:
    """Mutable node of the tree; only ever touched under the tree's lock."""

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
        self, uuid: str, name: str, parent: _Provider | None, generation: int | None
    ) -> None:
        self.uuid = uuid
        self.name = name
        self.parent = parent
        self.root: _Provider = parent.root if parent is not None else self
        self.generation = generation
        # dict rather than list: O(1) removal, and insertion order is kept.
        self.children: dict[str, _Provider] = {}
        self.inventory: Mapping[str, Inventory] = _EMPTY_INVENTORY
        self.traits: frozenset[str] = frozenset()
        self.aggregates: frozenset[str] = frozenset()
        self.snapshot: ProviderData | None = None

    def data(self) -> ProviderData:
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

    def walk(self) -> Iterator[_Provider]:
        """This provider then its descendants, parents before children."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            # reversed so that siblings come out in insertion order
            stack.extend(reversed(node.children.values()))


class ProviderTree:
    """A forest of resource providers, indexed by name and by UUID.

    Every method that takes ``name_or_uuid`` accepts either; an unknown one
    raises :class:`ProviderNotFound`.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._roots: dict[str, _Provider] = {}
        self._by_uuid: dict[str, _Provider] = {}
        self._by_name: dict[str, _Provider] = {}

    # -- structure ---------------------------------------------------------

    def _find(self, name_or_uuid: str) -> _Provider:
        node = self._by_uuid.get(name_or_uuid) or self._by_name.get(name_or_uuid)
        if node is None:
            raise ProviderNotFound(name_or_uuid)
        return node

    def _add(self, name: str, uuid: str, parent: _Provider | None, generation: int | None) -> str:
        if not name:
            raise ProviderConflict("a resource provider needs a name")
        if name in self._by_name:
            raise ProviderConflict(f"a resource provider named {name!r} is already in the tree")
        if uuid in self._by_uuid:
            held_by = self._by_uuid[uuid].name
            raise ProviderConflict(f"UUID {uuid} is already used by resource provider {held_by!r}")
        # Lookups take a name or a UUID: one provider's name equal to another's
        # UUID would make them ambiguous (nova's ProviderTree refuses it too).
        if name in self._by_uuid:
            raise ProviderConflict(
                f"the name {name!r} is the UUID of resource provider "
                f"{self._by_uuid[name].name!r}; choose another name"
            )
        if uuid in self._by_name:
            raise ProviderConflict(
                f"UUID {uuid} is the name of another resource provider; choose another UUID"
            )
        node = _Provider(uuid, name, parent, generation)
        self._by_uuid[uuid] = node
        self._by_name[name] = node
        if parent is None:
            self._roots[uuid] = node
        else:
            parent.children[uuid] = node
        return uuid

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
            return self._add(name, uuid, None, generation)

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
            return self._add(name, uuid, parent_node, generation)

    def remove(self, name_or_uuid: str) -> None:
        """Remove a provider and its whole subtree.

        Raises:
            ProviderNotFound: not in the tree.
        """
        with self._lock:
            node = self._find(name_or_uuid)
            for sub in list(node.walk()):
                del self._by_uuid[sub.uuid]
                del self._by_name[sub.name]
            if node.parent is None:
                del self._roots[node.uuid]
            else:
                del node.parent.children[node.uuid]
                node.parent.snapshot = None

    def exists(self, name_or_uuid: str) -> bool:
        """True when a provider with this name or UUID is in the tree."""
        with self._lock:
            return name_or_uuid in self._by_uuid or name_or_uuid in self._by_name

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
            return [n.uuid for root in self._roots.values() for n in root.walk()]

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
            return list(self._roots)

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
            return [n.data() for root in self._roots.values() for n in root.walk()]

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_uuid)

    def populate_from_iterable(self, providers: Iterable[Mapping[str, Any]]) -> None:
        """Add or refresh providers from Placement's provider records.

        Args:
            providers: dicts shaped like one item of ``GET /resource_providers``:
                ``uuid``, ``name``, ``generation`` and ``parent_provider_uuid``
                (None for a root). Parents may come after their children.
                Optional ``inventories`` / ``traits`` / ``aggregates`` keys
                are applied too.

        A provider already in the tree keeps its place and takes the given
        name and generation.

        Raises:
            ProviderNotFound: a parent is neither in ``providers`` nor in the tree.
            ProviderConflict: two providers claim one name.
        """
        with self._lock:
            pending = {p["uuid"]: p for p in providers}
            while pending:
                progressed = False
                for uuid in list(pending):
                    rec = pending[uuid]
                    parent = rec.get("parent_provider_uuid")
                    if parent is not None and parent not in self._by_uuid:
                        continue
                    self._merge(rec)
                    del pending[uuid]
                    progressed = True
                if not progressed:
                    missing = sorted(
                        {p["parent_provider_uuid"] for p in pending.values()} - set(pending)
                    )
                    raise ProviderNotFound(missing[0] if missing else next(iter(pending)))

    def _merge(self, rec: Mapping[str, Any]) -> None:
        uuid = rec["uuid"]
        node = self._by_uuid.get(uuid)
        if node is None:
            parent = rec.get("parent_provider_uuid")
            self._add(
                rec["name"],
                uuid,
                self._by_uuid[parent] if parent else None,
                rec.get("generation"),
            )
            node = self._by_uuid[uuid]
        else:
            if rec["name"] != node.name:
                if rec["name"] in self._by_name:
                    raise ProviderConflict(
                        f"a resource provider named {rec['name']!r} is already in the tree"
                    )
                del self._by_name[node.name]
                node.name = rec["name"]
                self._by_name[node.name] = node
            node.generation = rec.get("generation", node.generation)
            node.snapshot = None
        if "inventories" in rec:
            node.inventory = MappingProxyType(to_inventories(rec["inventories"]))
        if "traits" in rec:
            node.traits = frozenset(rec["traits"])
        if "aggregates" in rec:
            node.aggregates = frozenset(rec["aggregates"])

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

    # -- copying ------------------------------------------------------------------

    def take_from(self, other: ProviderTree) -> None:
        """Hold exactly what ``other`` holds, taking its providers over.

        ``other`` is emptied: the providers move, they are not copied (a
        caller that kept a :meth:`copy` to undo edits hands it back here).
        """
        with self._lock, other._lock:
            self._roots, other._roots = other._roots, {}
            self._by_uuid, other._by_uuid = other._by_uuid, {}
            self._by_name, other._by_name = other._by_name, {}

    def copy(self) -> ProviderTree:
        """An independent tree with the same providers (inventories are shared immutables)."""
        with self._lock:
            other = ProviderTree()
            for root in self._roots.values():
                for node in root.walk():
                    other._add(
                        node.name,
                        node.uuid,
                        other._by_uuid[node.parent.uuid] if node.parent else None,
                        node.generation,
                    )
                    twin = other._by_uuid[node.uuid]
                    twin.inventory = node.inventory
                    twin.traits = node.traits
                    twin.aggregates = node.aggregates
            return other
