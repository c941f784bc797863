"""Keep Placement in step with a ProviderTree, writing only what changed.

The report client keeps, per compute node, a mirror of what Placement holds
(a :class:`ProviderTree` with Placement's generations) in memory and in the
state directory. A cycle is:

1. :meth:`ReportClient.get_provider_tree_and_ensure_root`: one
   ``GET /resource_providers?in_tree=ROOT``; providers whose generation
   moved (or that are new to the mirror) are re-read, nothing else.
2. The driver edits a copy of the mirror.
3. :meth:`ReportClient.update_from_provider_tree`: the copy is compared with
   the mirror and only the differences are written. With allocations, the
   inventories and allocations go in one ``POST /reshaper``.

So a cycle in which nothing changed costs one request, and a restarted agent
whose host did not change costs the root document plus that one read.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agent.model.allocations import MIGRATION, ConsumerAllocations, ProviderAllocations
from agent.model.exceptions import AgentError, ReshapeFailed
from agent.model.names import is_custom
from agent.model.provider_tree import ProviderTree, default_root_uuid
from agent.model.resources import Inventory, inventory_body, to_inventories
from agent.model.tree_diff import TreeDiff, diff_trees
from agent.placement.client import PlacementClient
from agent.placement.errors import (
    DuplicateName,
    GenerationConflict,
    InventoryInUse,
    NotFound,
    PlacementError,
)
from agent.state.store import StateStore

LOG = logging.getLogger(__name__)

_CREATED_HERE = "_created_here"
"""Marks a listing record of a provider this client has just created (so it is empty)."""


class RootConflict(AgentError):
    """The compute node's name is held in Placement by another UUID than the one recorded."""


@dataclass(slots=True)
class SyncResult:
    """What one :meth:`ReportClient.update_from_provider_tree` did.

    Attributes:
        created: providers created.
        removed: providers deleted.
        inventories: providers whose inventory was written.
        traits: providers whose traits were written.
        aggregates: providers whose aggregates were written.
        reshaped: True when a ``POST /reshaper`` was sent.
        errors: one line per write that failed and was skipped.
    """

    created: int = 0
    removed: int = 0
    inventories: int = 0
    traits: int = 0
    aggregates: int = 0
    reshaped: bool = False
    errors: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Flush:
    """One root's part of a flush: its mirror, the merge base and what differs."""

    nodename: str
    mirror: ProviderTree
    base: ProviderTree
    diff: TreeDiff
    wanted: set[str]


def _record(tree: ProviderTree, uuid: str) -> dict[str, Any]:
    p = tree.data(uuid)
    return {
        "uuid": p.uuid,
        "name": p.name,
        "generation": p.generation,
        "parent_provider_uuid": p.parent_uuid,
        "inventories": inventory_body(p.inventory),
        "traits": sorted(p.traits),
        "aggregates": sorted(p.aggregates),
    }


def merge_sets(base: frozenset[str], desired: frozenset[str], fresh: frozenset[str]) -> set[str]:
    """Three-way merge: our change (``base`` -> ``desired``) applied to ``fresh``.

    Keeps what another writer added or removed meanwhile, so a generation
    conflict does not undo someone else's trait or aggregate.
    """
    return (set(fresh) | (desired - base)) - (base - desired)


class ReportClient:
    """Reads and writes one host's providers and allocations in Placement.

    Args:
        client: the HTTP client.
        state: the state directory (compute node UUIDs, last state seen).
        conflict_retries: retries of a write after a generation conflict.
        sleep: how to wait between conflict retries (tests pass a no-op).
    """

    def __init__(
        self,
        client: PlacementClient,
        state: StateStore,
        conflict_retries: int = 3,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.state = state
        self.conflict_retries = conflict_retries
        self._sleep = sleep
        self._seen: dict[str, ProviderTree] = {}
        self._known_custom: set[str] = set()
        # Roots listed since the last flush: the flush lists any other root first.
        self._read_this_cycle: set[str] = set()

    # -- reading ------------------------------------------------------------

    def _mirror_from_state(self, nodename: str) -> ProviderTree:
        mirror = ProviderTree()
        records = self.state.seen_providers(nodename)
        if records:
            try:
                mirror.populate_from_iterable(records)
            except (AgentError, KeyError, TypeError, ValueError) as exc:
                LOG.warning(
                    "state of %s in %s is unusable (%s); reading it from Placement",
                    nodename,
                    self.state.path,
                    exc,
                )
                mirror = ProviderTree()
        return mirror

    def _save_mirror(self, nodename: str) -> None:
        mirror = self._seen[nodename]
        self.state.set_seen_providers(
            nodename, [_record(mirror, u) for u in mirror.get_provider_uuids()]
        )

    def ensure_root(self, nodename: str) -> str:
        """The compute node's UUID, creating the provider when Placement has none.

        The UUID recorded in the state directory is used if Placement has it;
        otherwise the provider is found by name (and recorded), else created
        with the recorded UUID or :func:`default_root_uuid`.

        Raises:
            RootConflict: Placement has this name under another UUID than the
                recorded one, or the UUID under another name.
            PlacementError, PlacementUnavailable: as the client raises.
        """
        self._read_tree(nodename)
        return self._seen[nodename].data(nodename).uuid

    def get_provider_tree_and_ensure_root(self, nodename: str) -> ProviderTree:
        """A copy of what Placement holds for ``nodename``'s tree, root ensured.

        Returns:
            A :class:`ProviderTree` the caller may edit (generations are
            Placement's); pass it to :meth:`update_from_provider_tree`.

        Raises:
            RootConflict, PlacementError, PlacementUnavailable.
        """
        self._read_tree(nodename)
        return self._seen[nodename].copy()

    def read_tree(self, nodename: str) -> ProviderTree | None:
        """A copy of what Placement holds for ``nodename``, or None when it has nothing.

        Unlike :meth:`get_provider_tree_and_ensure_root`, never creates the root.
        """
        if not self._read_tree(nodename, create=False):
            return None
        return self._seen[nodename].copy()

    def _list_tree(self, root_uuid: str) -> list[dict[str, Any]]:
        """``GET /resource_providers?in_tree=ROOT``: every provider of one tree."""
        return self.client.get("/resource_providers", params={"in_tree": root_uuid})[
            "resource_providers"
        ]

    def _read_tree(self, nodename: str, create: bool = True, uuid: str | None = None) -> bool:
        """List ``nodename``'s tree and bring the mirror up to date; False when it has none.

        Args:
            create: create the root when Placement has none by this name.
            uuid: the UUID to create it with when the state directory records
                none (default: :func:`default_root_uuid`).
        """
        self._read_this_cycle.add(nodename)
        mirror = self._seen.get(nodename)
        if mirror is None:
            mirror = self._mirror_from_state(nodename)
        stored = self.state.root_uuid(nodename)
        listing: list[dict[str, Any]] = []
        if stored:
            listing = self._list_tree(stored)
        if not listing:
            listing = self._find_or_create_root(nodename, stored, create, uuid)
            if not listing:
                return False
        root_uuid = next(r["uuid"] for r in listing if r["parent_provider_uuid"] is None)
        if root_uuid != stored:
            self.state.set_root_uuid(nodename, root_uuid)
        if self._unchanged(mirror, listing):
            self._seen[nodename] = mirror
            self._remember_custom(mirror)
            return True
        fresh = ProviderTree()
        stale = []
        fresh.populate_from_iterable(
            {k: r[k] for k in ("uuid", "name", "generation", "parent_provider_uuid")}
            for r in listing
        )
        for rec in listing:
            uuid = rec["uuid"]
            if rec.get(_CREATED_HERE):
                continue  # a provider this client just created holds nothing yet
            if mirror.exists(uuid) and mirror.data(uuid).generation == rec["generation"]:
                old = mirror.data(uuid)
                fresh.update_inventory(uuid, old.inventory)
                fresh.update_traits(uuid, old.traits)
                fresh.update_aggregates(uuid, old.aggregates)
            else:
                stale.append(uuid)
        for uuid in stale:
            self._read_provider_details(fresh, uuid)
        self._seen[nodename] = fresh
        self._remember_custom(fresh)
        if stale or fresh.get_provider_uuids() != mirror.get_provider_uuids():
            self._save_mirror(nodename)
        return True

    @staticmethod
    def _unchanged(mirror: ProviderTree, listing: list[dict[str, Any]]) -> bool:
        """True when ``listing`` shows exactly the mirror's providers, generations and parents."""
        if len(listing) != len(mirror):
            return False
        for rec in listing:
            if not mirror.exists(rec["uuid"]):
                return False
            held = mirror.data(rec["uuid"])
            if (held.generation, held.name, held.parent_uuid) != (
                rec["generation"],
                rec["name"],
                rec["parent_provider_uuid"],
            ):
                return False
        return True

    def _find_or_create_root(
        self, nodename: str, stored: str | None, create: bool = True, uuid: str | None = None
    ) -> list[dict[str, Any]]:
        found = self.client.get("/resource_providers", params={"name": nodename})[
            "resource_providers"
        ]
        if found:
            held = found[0]["uuid"]
            if stored and held != stored:
                raise RootConflict(
                    f"compute node {nodename!r}: Placement has resource provider {held} with "
                    f"this name, but {self.state.path}/compute_nodes.json records {stored}. If "
                    f"{held} is this host's compute node, remove {nodename!r} from that file and "
                    "the agent adopts it; if another host already uses this name, give this "
                    "host a unique [DEFAULT] host"
                )
            LOG.info("found compute node %s in Placement by name: %s", nodename, held)
            return self._list_tree(held)
        if not create:
            return []
        uuid = stored or uuid or default_root_uuid(nodename)
        try:
            created = self.client.post("/resource_providers", json={"name": nodename, "uuid": uuid})
        except DuplicateName as exc:
            raise RootConflict(
                f"compute node {nodename!r} could not be created with UUID {uuid}: {exc.detail} "
                "If a provider with this UUID is another host's, give this host a unique "
                "[DEFAULT] host or remove its entry from compute_nodes.json"
            ) from None
        LOG.info("created compute node %s as resource provider %s", nodename, uuid)
        return [{**created, _CREATED_HERE: True}]

    def _read_provider_details(self, tree: ProviderTree, uuid: str) -> None:
        inv = self.client.get("/resource_providers/{uuid}/inventories", uuid=uuid)
        traits = self.client.get("/resource_providers/{uuid}/traits", uuid=uuid)
        aggs = self.client.get("/resource_providers/{uuid}/aggregates", uuid=uuid)
        tree.update_inventory(uuid, inv["inventories"])
        tree.update_traits(uuid, traits["traits"])
        tree.update_aggregates(uuid, aggs["aggregates"])
        # the last read's generation is the newest of the three
        tree.update_generation(uuid, aggs["resource_provider_generation"])

    def _remember_custom(self, tree: ProviderTree) -> None:
        # Names Placement already holds need no PUT /resource_classes or /traits.
        for p in tree.all_data():
            self._known_custom.update(n for n in (*p.inventory, *p.traits) if is_custom(n))

    # -- writing --------------------------------------------------------------

    def _ensure_custom_names(self, tree: ProviderTree) -> None:
        for p in tree.all_data():
            for rc in p.inventory:
                if is_custom(rc) and rc not in self._known_custom:
                    self.client.put("/resource_classes/{name}", name=rc)
                    self._known_custom.add(rc)
            for trait in p.traits:
                if is_custom(trait) and trait not in self._known_custom:
                    self.client.put("/traits/{name}", name=trait)
                    self._known_custom.add(trait)

    def _retrying(self, mirror: ProviderTree, uuid: str, write: Callable[[], bool]) -> None:
        """Run ``write`` until it succeeds; on a generation conflict re-read and try again.

        ``write`` returns False when, after a re-read, nothing is left to write.
        """
        for attempt in range(self.conflict_retries + 1):
            try:
                write()
                return
            except GenerationConflict:
                if attempt == self.conflict_retries:
                    raise
                LOG.info("generation conflict on provider %s; re-reading and retrying", uuid)
                self._sleep(random.uniform(0, 0.1 * 2**attempt))
                self._read_provider_details(mirror, uuid)

    def update_from_provider_tree(
        self, new_tree: ProviderTree, allocations: dict[str, dict[str, Any]] | None = None
    ) -> SyncResult:
        """Write to Placement what differs between ``new_tree`` and what it holds.

        Args:
            new_tree: a tree from :meth:`get_provider_tree_and_ensure_root`,
                edited by the driver. It may hold several roots (several
                compute nodes, a sharing provider a driver adds): each root's
                subtree is compared with what Placement holds for that root,
                and a root Placement lacks is created once, with its UUID.
            allocations: None normally. For a reshape: ``{consumer_uuid:
                GET /allocations/{uuid} body}``, the complete final allocations
                of each consumer listed; the inventories of every root and
                these allocations are then written in one atomic ``POST
                /reshaper`` (reshape-provider-tree.txt).

        Returns:
            A :class:`SyncResult`. Writes that Placement refuses for one
            provider (e.g. inventory in use) are logged and listed in
            ``errors``; the rest of the tree is still written.

        Raises:
            RootConflict: a root's name is held in Placement by another UUID.
            ReshapeFailed: allocations were given and ``POST /reshaper`` failed.
            PlacementUnavailable: Placement could not be reached; what was
                written stays written, and the next cycle carries on from it.
        """
        result = SyncResult()
        flushes = []
        try:
            for root_uuid in new_tree.root_uuids:
                flush = self._plan_root(new_tree, root_uuid, reshape=allocations is not None)
                if flush is not None:
                    flushes.append(flush)
            if not flushes:
                return result
            self._ensure_custom_names(new_tree)
            if allocations is not None:
                # Creates the new providers itself, so that a failure can delete
                # them again; re-parenting waits until the reshape is done
                # (undoing it would move generations).
                self._reshape(flushes, new_tree, allocations, result)
            for flush in flushes:
                self._write_node(flush, new_tree, allocations is not None, result)
        finally:
            # also after a failure part-way: what was written is in the mirror
            for flush in flushes:
                self._save_mirror(flush.nodename)
            self._read_this_cycle.clear()
        return result

    def _plan_root(self, new_tree: ProviderTree, root_uuid: str, reshape: bool) -> _Flush | None:
        """What to write for one root's subtree; None when nothing differs."""
        name = new_tree.data(root_uuid).name
        # A root not read since the last flush (a second node, a sharing
        # provider the driver adds) is listed now: its mirror may be stale.
        if name not in self._read_this_cycle:
            self._read_tree(name, uuid=root_uuid)
        mirror = self._seen[name]
        held = mirror.data(name).uuid
        if held != root_uuid:
            raise RootConflict(
                f"root provider {name!r}: Placement holds this name as {held}, the tree "
                f"gives {root_uuid}; give the provider another name or use {held}"
            )
        diff = diff_trees(mirror, new_tree, root_uuid)
        if not diff and not reshape:
            return None
        wanted = set(new_tree.get_provider_uuids(root_uuid))
        # What the driver's tree was derived from: the base of the three-way
        # merges, taken before a conflict's re-read moves the mirror on.
        return _Flush(name, mirror, mirror.copy(), diff, wanted)

    def _write_node(
        self, flush: _Flush, new_tree: ProviderTree, reshaped: bool, result: SyncResult
    ) -> None:
        mirror, diff = flush.mirror, flush.diff
        if not reshaped:
            for uuid in diff.created:
                self._create_provider(mirror, new_tree, uuid, result)
        for uuid in dict.fromkeys(diff.reparented + diff.renamed):
            p = new_tree.data(uuid)
            body = {"name": p.name, "parent_provider_uuid": p.parent_uuid}
            updated = self.client.put("/resource_providers/{uuid}", uuid=uuid, json=body)
            self._move_in_mirror(mirror, uuid, p.name, p.parent_uuid, updated["generation"])
        if not reshaped:
            for uuid in diff.inventory:
                self._write_inventory(mirror, new_tree, uuid, result)
        for kind in ("traits", "aggregates"):
            for uuid in getattr(diff, kind):
                base_tree = flush.base
                base = (
                    getattr(base_tree.data(uuid), kind) if base_tree.exists(uuid) else frozenset()
                )
                self._write_set(mirror, new_tree, uuid, kind, base, result)
        for uuid in diff.removed:
            self._delete_provider(mirror, uuid, result)

    def _create_provider(
        self, mirror: ProviderTree, new_tree: ProviderTree, uuid: str, result: SyncResult
    ) -> None:
        p = new_tree.data(uuid)
        created = self.client.post(
            "/resource_providers",
            json={"name": p.name, "uuid": p.uuid, "parent_provider_uuid": p.parent_uuid},
        )
        mirror.populate_from_iterable([{**created, "parent_provider_uuid": p.parent_uuid}])
        result.created += 1

    def _move_in_mirror(
        self, mirror: ProviderTree, uuid: str, name: str, parent: str | None, generation: int
    ) -> None:
        # A ProviderTree cannot re-parent in place: rebuild the subtree under the new parent.
        records = [_record(mirror, u) for u in mirror.get_provider_uuids(uuid)]
        mirror.remove(uuid)
        records[0].update(name=name, parent_provider_uuid=parent, generation=generation)
        mirror.populate_from_iterable(records)

    def _write_inventory(
        self, mirror: ProviderTree, new_tree: ProviderTree, uuid: str, result: SyncResult
    ) -> None:
        wanted = dict(new_tree.data(uuid).inventory)
        body_inv = inventory_body(wanted)

        def write() -> bool:
            if not mirror.has_inventory_changed(uuid, wanted):
                return False
            resp = self.client.put(
                "/resource_providers/{uuid}/inventories",
                uuid=uuid,
                json={
                    "inventories": body_inv,
                    "resource_provider_generation": mirror.data(uuid).generation,
                },
            )
            mirror.update_inventory(uuid, wanted, generation=resp["resource_provider_generation"])
            return True

        try:
            self._retrying(mirror, uuid, write)
            result.inventories += 1
        except InventoryInUse as exc:
            held = mirror.data(uuid)
            gone = sorted(set(held.inventory) - set(wanted))
            line = (
                f"provider {held.name} ({uuid}): inventory of {', '.join(gone) or 'some class'} "
                f"cannot be removed while allocations use it (held: "
                f"{ {rc: held.inventory[rc].total for rc in gone} }); it stays until they are "
                f"gone. Placement said: {exc.detail}"
            )
            LOG.error(line)
            result.errors.append(line)

    def _write_set(
        self,
        mirror: ProviderTree,
        new_tree: ProviderTree,
        uuid: str,
        kind: str,
        base: frozenset[str],
        result: SyncResult,
    ) -> None:
        desired = frozenset(getattr(new_tree.data(uuid), kind))

        def write() -> bool:
            nonlocal base
            fresh = frozenset(getattr(mirror.data(uuid), kind))
            target = merge_sets(base, desired, fresh)
            base = fresh
            if target == set(fresh):
                return False
            resp = self.client.put(
                "/resource_providers/{uuid}/" + kind,
                uuid=uuid,
                json={
                    kind: sorted(target),
                    "resource_provider_generation": mirror.data(uuid).generation,
                },
            )
            update = mirror.update_traits if kind == "traits" else mirror.update_aggregates
            update(uuid, resp[kind], generation=resp["resource_provider_generation"])
            return True

        try:
            self._retrying(mirror, uuid, write)
            setattr(result, kind, getattr(result, kind) + 1)
        except PlacementError as exc:
            if isinstance(exc, GenerationConflict):
                raise
            line = f"provider {mirror.data(uuid).name} ({uuid}): {kind} not written: {exc}"
            LOG.error(line)
            result.errors.append(line)

    def _delete_provider(self, mirror: ProviderTree, uuid: str, result: SyncResult) -> None:
        name = mirror.data(uuid).name
        try:
            self.client.delete("/resource_providers/{uuid}", uuid=uuid)
        except NotFound:
            pass
        except PlacementError as exc:
            line = f"provider {name} ({uuid}) not deleted: {exc.detail or exc}"
            LOG.error(line)
            result.errors.append(line)
            return
        mirror.remove(uuid)
        result.removed += 1

    def _reshape(
        self,
        flushes: list[_Flush],
        new_tree: ProviderTree,
        allocations: dict[str, dict[str, Any]],
        result: SyncResult,
    ) -> None:
        """Create the new providers, then one ``POST /reshaper``; on failure undo the creations.

        The body names every provider of every root's tree (so an allocation
        another service makes anywhere in them meanwhile is a generation
        conflict, not a lost update) and the providers about to be deleted,
        emptied of the classes the new tree holds elsewhere, so their
        capacity goes in the same transaction as their allocations
        (reshape-provider-tree.txt, "Placement POST /reshaper").

        Raises:
            ReshapeFailed: creating a provider or the reshaper call failed;
                the providers created here are deleted again, so Placement
                holds what it held before (custom resource classes and traits
                created for the new tree stay: they are global and harmless).
                ``__cause__`` is the :class:`PlacementError`; a
                :class:`GenerationConflict` there means "re-read and retry".
        """
        created: list[tuple[ProviderTree, str]] = []
        names = ", ".join(f.nodename for f in flushes)
        try:
            for flush in flushes:
                for uuid in flush.diff.created:
                    self._create_provider(flush.mirror, new_tree, uuid, result)
                    created.append((flush.mirror, uuid))
            body = self._reshaper_body(flushes, new_tree, allocations)
            self.client.post("/reshaper", json=body)
        except PlacementError as exc:
            self._undo_created(created, result)
            raise ReshapeFailed(
                f"POST /reshaper for {names} failed: {exc}. Placement is "
                "unchanged; the agent stops so the failure is seen (see docs/reshape.md)"
            ) from exc
        result.reshaped = True
        # The reshaper answers 204 without generations: read them once per root.
        for flush in flushes:
            mirror = flush.mirror
            for rec in self._list_tree(mirror.data(flush.nodename).uuid):
                uuid = rec["uuid"]
                if not mirror.exists(uuid):
                    continue
                if uuid in body["inventories"]:
                    held = new_tree.data(uuid).inventory if new_tree.exists(uuid) else None
                    if held is None:
                        held = body["inventories"][uuid]["inventories"]
                    mirror.update_inventory(uuid, held)
                mirror.update_generation(uuid, rec["generation"])

    @staticmethod
    def _reshaper_body(
        flushes: list[_Flush],
        new_tree: ProviderTree,
        allocations: dict[str, dict[str, Any]],
    ) -> dict[str, Any]:
        inventories: dict[str, Any] = {}
        wanted = set().union(*(f.wanted for f in flushes))
        # A provider being deleted keeps only the classes that have nowhere else
        # to go in the new tree: the others' allocations were moved, and their
        # capacity must not outlive them until the DELETE.
        elsewhere = {rc for u in wanted for rc in new_tree.data(u).inventory}
        for flush in flushes:
            mirror = flush.mirror
            for uuid in new_tree.get_provider_uuids(mirror.data(flush.nodename).uuid):
                if mirror.exists(uuid):
                    inventories[uuid] = {
                        "inventories": inventory_body(new_tree.data(uuid).inventory),
                        "resource_provider_generation": mirror.data(uuid).generation,
                    }
            for uuid in flush.diff.removed:
                if mirror.exists(uuid):
                    held = mirror.data(uuid)
                    inventories[uuid] = {
                        "inventories": inventory_body(
                            {rc: i for rc, i in held.inventory.items() if rc not in elsewhere}
                        ),
                        "resource_provider_generation": held.generation,
                    }
        return {
            "inventories": inventories,
            "allocations": {
                consumer: reshaper_allocation(rec) for consumer, rec in allocations.items()
            },
        }

    def _undo_created(self, created: list[tuple[ProviderTree, str]], result: SyncResult) -> None:
        # Children first. They hold nothing (the reshaper did not happen), so
        # Placement lets them go; a failure here is logged, not raised, so the
        # reshaper's own error is the one the operator sees.
        for mirror, uuid in reversed(created):
            try:
                self.client.delete("/resource_providers/{uuid}", uuid=uuid)
            except NotFound:
                pass
            except PlacementError as exc:
                LOG.error("provider %s created for a failed reshape not deleted: %s", uuid, exc)
                continue
            if mirror.exists(uuid):
                mirror.remove(uuid)
            result.created -= 1

    # -- allocations --------------------------------------------------------------

    def get_allocations_for_provider_tree(self, nodename: str) -> dict[str, dict[str, Any]]:
        """Every allocation of every consumer that uses a provider of ``nodename``'s tree.

        The algorithm of reshape-provider-tree.txt: ``GET
        /resource_providers/{uuid}/allocations`` for each local provider, then
        ``GET /allocations/{consumer}`` for each consumer found (so
        allocations on sharing providers come along). A consumer whose
        allocations are all on sharing providers is not found (the spec's
        stated limitation).

        Returns:
            ``{consumer_uuid: GET /allocations/{consumer_uuid} body}``.
        """
        if nodename not in self._seen:
            self._read_tree(nodename)
        consumers: dict[str, None] = {}
        for uuid in self._seen[nodename].get_provider_uuids():
            consumers.update(dict.fromkeys(self.provider_allocations(uuid).consumers))
        out = {}
        for consumer in consumers:
            record = self.client.get("/allocations/{consumer}", consumer=consumer)
            # Emptied between the two reads: nothing to move, and no owner to name.
            if record.get("allocations"):
                out[consumer] = record
        return out

    def get_allocations(self, consumer: str) -> ConsumerAllocations:
        """``GET /allocations/{consumer}``: what the consumer holds, with its generation.

        A consumer Placement does not know comes back empty with generation None.
        """
        body = self.client.get("/allocations/{consumer}", consumer=consumer)
        return ConsumerAllocations.from_placement(body)

    def put_allocations(self, consumer: str, allocations: ConsumerAllocations) -> None:
        """Replace a consumer's allocations, honouring its consumer generation.

        The whole consumer is replaced: its parts on other hosts and other
        services' providers too. The agent's own writes go through
        :meth:`edit_allocations` with :func:`agent.model.allocations.merge_ours`
        instead; this is for tools and tests that own the whole consumer.

        Args:
            consumer: the consumer UUID.
            allocations: the consumer's owner, type and allocations (its
                ``generation`` is ignored: the one read just before is sent).

        Raises:
            GenerationConflict: still conflicting after the retries.
            Conflict: the allocation does not fit ("Unable to allocate inventory").
        """
        # edit_allocations writes the generation it read, whatever ``allocations`` carries.
        self.edit_allocations(consumer, lambda _held: allocations)

    def edit_allocations(
        self,
        consumer: str,
        edit: Callable[[ConsumerAllocations], ConsumerAllocations | None],
    ) -> bool:
        """Read ``consumer``'s allocations, let ``edit`` decide the new ones, write them.

        The write carries the consumer generation of the read, whatever
        ``edit`` returns; after a generation conflict (someone else changed
        the consumer meanwhile) the consumer is read again and ``edit``
        applied again, so a concurrent change is never overwritten with stale
        data. This is the one read-edit-write path for consumers.

        Args:
            consumer: the consumer UUID.
            edit: what Placement holds now -> what to write (owner and type
                included), or None for "nothing to do". Called once per attempt.

        Returns:
            True when allocations were written, False when ``edit`` returned
            None or the consumer vanished meanwhile.

        Raises:
            GenerationConflict: still conflicting after the retries.
            Conflict: the allocations do not fit ("Unable to allocate inventory").
            ValueError: ``edit`` gave allocations without an owner for a
                consumer Placement does not know.
        """
        for attempt in range(self.conflict_retries + 1):
            current = self.get_allocations(consumer)
            wanted = edit(current)
            if wanted is None:
                return False
            if not wanted and current.generation is None:
                return False  # nothing held, nothing wanted: no write
            body = replace(
                wanted,
                generation=current.generation,
                project_id=wanted.project_id or current.project_id,
                user_id=wanted.user_id or current.user_id,
            ).to_placement()
            try:
                self.client.put("/allocations/{consumer}", consumer=consumer, json=body)
                return True
            except NotFound:
                return False
            except GenerationConflict:
                if attempt == self.conflict_retries:
                    raise
                self._sleep(random.uniform(0, 0.1 * 2**attempt))
        return False

    def delete_allocations(self, consumer: str) -> bool:
        """Remove every allocation of ``consumer``; a consumer Placement does not know is fine.

        Uses ``PUT`` with empty allocations and the consumer generation (safe
        against a concurrent writer), not the generation-less ``DELETE``.

        Returns:
            True when allocations were removed, False when there were none.
        """
        return self.edit_allocations(
            consumer, lambda held: held.with_allocations({}) if held else None
        )

    def remove_allocations_from(self, consumer: str, providers: set[str]) -> bool:
        """Remove ``consumer``'s allocations on ``providers``, keeping the rest.

        An instance that moved to another host keeps its allocations there;
        only this host's part goes. When nothing else remains the consumer's
        allocations are gone altogether. A consumer Placement does not know is
        fine (nothing to remove), and a migration record (consumer type
        ``MIGRATION``) is never touched: nova holds the source host's part of
        a migration on it and gives it back itself.

        Args:
            consumer: the consumer UUID.
            providers: provider UUIDs (this host's) to clear.

        Returns:
            True when something was removed.

        Raises:
            GenerationConflict: the consumer kept changing under us.
        """

        def edit(held: ConsumerAllocations) -> ConsumerAllocations | None:
            if held.consumer_type == MIGRATION or not held.providers & providers:
                return None
            return held.with_allocations(held.without(providers))

        return self.edit_allocations(consumer, edit)

    def provider_allocations(self, uuid: str) -> ProviderAllocations:
        """``GET /resource_providers/{uuid}/allocations``: every consumer on one provider."""
        body = self.client.get("/resource_providers/{uuid}/allocations", uuid=uuid)
        return ProviderAllocations.from_placement(body)

    def provider_inventory(self, uuid: str) -> dict[str, Inventory]:
        """``GET /resource_providers/{uuid}/inventories`` of a provider outside the trees read."""
        body = self.client.get("/resource_providers/{uuid}/inventories", uuid=uuid)
        return to_inventories(body["inventories"])

    def provider_usages(self, uuid: str) -> dict[str, int]:
        """``GET /resource_providers/{uuid}/usages``: ``{resource class: amount in use}``."""
        return dict(self.client.get("/resource_providers/{uuid}/usages", uuid=uuid)["usages"])

    def sharing_providers(self, aggregates: set[str], resource_class: str) -> list[str]:
        """UUIDs of providers that share ``resource_class`` with members of ``aggregates``.

        Rule (resource-providers-allocations.txt, shared storage): a sharing
        provider carries ``MISC_SHARES_VIA_AGGREGATE`` and is in an aggregate
        with the compute node. Sorted, so the choice among several is stable.
        """
        if not aggregates:
            return []
        body = self.client.get(
            "/resource_providers",
            params={
                "member_of": "in:" + ",".join(sorted(aggregates)),
                "required": "MISC_SHARES_VIA_AGGREGATE",
                "resources": f"{resource_class}:1",
            },
        )
        return sorted(p["uuid"] for p in body["resource_providers"])

    def provider_generations(self, nodename: str) -> dict[str, int]:
        """``{provider UUID: generation}`` of ``nodename``'s tree as last read or written.

        Raises:
            KeyError: the tree of ``nodename`` has not been read yet.
        """
        mirror = self._seen[nodename]
        return {p.uuid: p.generation for p in mirror.all_data() if p.generation is not None}

    def forget(self) -> None:
        """Drop what this client remembers (SIGHUP): the next read goes to Placement.

        The state directory's mirror is kept: it is checked against Placement's
        generations on the next read anyway.
        """
        self._seen.clear()
        self._known_custom.clear()


def reshaper_allocation(record: dict[str, Any]) -> dict[str, Any]:
    """One consumer's ``GET /allocations`` body (spec shape) as ``POST /reshaper`` wants it.

    Drops the per-provider ``generation`` the GET carries and fills
    ``consumer_type`` (required from 1.38) when the record has none.
    """
    return ConsumerAllocations.from_placement(record).to_placement()
