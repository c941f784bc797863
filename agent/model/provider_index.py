"""The index of a provider tree: providers by name and by UUID, and loading Placement's records.

The uniqueness rules of :mod:`agent.model.provider_tree` are enforced here
(:meth:`ProviderIndex._add`): a name or UUID once in the tree, and neither
may equal another provider's other key, so a lookup by either is never
ambiguous.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from agent.model.exceptions import ProviderConflict, ProviderNotFound
from agent.model.provider_data import ProviderNode
from agent.model.resources import to_inventories


class ProviderIndex:
    """Providers by name and by UUID, the roots in the order they were added, one lock."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._roots: dict[str, ProviderNode] = {}
        self._by_uuid: dict[str, ProviderNode] = {}
        self._by_name: dict[str, ProviderNode] = {}

    def _find(self, name_or_uuid: str) -> ProviderNode:
        """The provider with this name or UUID.

        Raises:
            ProviderNotFound: not in the tree.
        """
        node = self._by_uuid.get(name_or_uuid) or self._by_name.get(name_or_uuid)
        if node is None:
            raise ProviderNotFound(name_or_uuid)
        return node

    def _add(
        self, name: str, uuid: str, parent: ProviderNode | None, generation: int | None
    ) -> str:
        """Index a new provider under ``parent`` (None: a root); the caller holds the lock.

        Raises:
            ProviderConflict: the name or UUID is taken, or one would shadow the other.
        """
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
        node = ProviderNode(uuid, name, parent, generation)
        self._by_uuid[uuid] = node
        self._by_name[name] = node
        if parent is None:
            self._roots[uuid] = node
        else:
            parent.children[uuid] = node
        return uuid

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
        """Add one Placement record, or refresh the provider with its UUID."""
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
