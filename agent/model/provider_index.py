"""The index of a provider tree: providers by name and by UUID, and loading Placement's records.

The uniqueness rules of :mod:`agent.model.provider_tree` are enforced here
(:meth:`ProviderIndex.add`): a name or UUID once in the tree, and neither
may equal another provider's other key, so a lookup by either is never
ambiguous. The tree holds one index and its own lock; every method here is
called with that lock held.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agent.model.exceptions import ProviderConflict, ProviderNotFound
from agent.model.provider_data import ProviderNode


class ProviderIndex:
    """Providers by name and by UUID, and the roots in the order they were added.

    Attributes:
        roots: root UUID -> node, in the order added.
        by_uuid: UUID -> node, every provider.
        by_name: name -> node, every provider.
    """

    def __init__(self) -> None:
        self.roots: dict[str, ProviderNode] = {}
        self.by_uuid: dict[str, ProviderNode] = {}
        self.by_name: dict[str, ProviderNode] = {}

    def find(self, name_or_uuid: str) -> ProviderNode:
        """The provider with this name or UUID.

        Raises:
            ProviderNotFound: not in the tree.
        """
        node = self.by_uuid.get(name_or_uuid) or self.by_name.get(name_or_uuid)
        if node is None:
            raise ProviderNotFound(name_or_uuid)
        return node

    def add(self, name: str, uuid: str, parent: ProviderNode | None, generation: int | None) -> str:
        """Index a new provider under ``parent`` (None: a root).

        Raises:
            ProviderConflict: the name or UUID is taken, or one would shadow the other.
        """
        if not name:
            raise ProviderConflict("a resource provider needs a name")
        if name in self.by_name:
            raise ProviderConflict(f"a resource provider named {name!r} is already in the tree")
        if uuid in self.by_uuid:
            held_by = self.by_uuid[uuid].name
            raise ProviderConflict(f"UUID {uuid} is already used by resource provider {held_by!r}")
        # Lookups take a name or a UUID: one provider's name equal to another's
        # UUID would make them ambiguous (nova's ProviderTree refuses it too).
        if name in self.by_uuid:
            raise ProviderConflict(
                f"the name {name!r} is the UUID of resource provider "
                f"{self.by_uuid[name].name!r}; choose another name"
            )
        if uuid in self.by_name:
            raise ProviderConflict(
                f"UUID {uuid} is the name of another resource provider; choose another UUID"
            )
        node = ProviderNode(uuid, name, parent, generation)
        self.by_uuid[uuid] = node
        self.by_name[name] = node
        if parent is None:
            self.roots[uuid] = node
        else:
            parent.children[uuid] = node
        return uuid

    def remove(self, node: ProviderNode) -> None:
        """Drop ``node`` and its whole subtree."""
        for sub in list(node.walk()):
            del self.by_uuid[sub.uuid]
            del self.by_name[sub.name]
        if node.parent is None:
            del self.roots[node.uuid]
        else:
            del node.parent.children[node.uuid]
            node.parent.snapshot = None

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
        pending = {p["uuid"]: p for p in providers}
        while pending:
            progressed = False
            for uuid in list(pending):
                rec = pending[uuid]
                parent = rec.get("parent_provider_uuid")
                if parent is not None and parent not in self.by_uuid:
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
        node = self.by_uuid.get(uuid)
        if node is None:
            parent = rec.get("parent_provider_uuid")
            self.add(
                rec["name"],
                uuid,
                self.by_uuid[parent] if parent else None,
                rec.get("generation"),
            )
            node = self.by_uuid[uuid]
        else:
            if rec["name"] != node.name:
                if rec["name"] in self.by_name:
                    raise ProviderConflict(
                        f"a resource provider named {rec['name']!r} is already in the tree"
                    )
                del self.by_name[node.name]
                node.name = rec["name"]
                self.by_name[node.name] = node
            node.generation = rec.get("generation", node.generation)
            node.snapshot = None
        node.load(rec)
