"""From a :class:`TreeDiff` to Placement writes, one root's subtree at a time.

A flush compares each root's subtree of the driver's tree with the mirror
(:func:`agent.model.tree_diff.diff_trees`) and writes only the differences:
providers created, renamed or re-parented, inventories, traits and
aggregates replaced, providers deleted, in that order (children are created
after their parent and deleted before it). Each write carries the provider
generation of the mirror; after a generation conflict the provider is read
again and the write decided again (:func:`retry_on_conflict`), traits and
aggregates by a three-way merge so another writer's change survives. A
field another writer changed back after the agent overwrote it is yielded:
left as that writer holds it (:mod:`agent.placement.yields`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.model.names import is_custom
from agent.model.provider_tree import ProviderTree
from agent.model.resources import inventory_body
from agent.model.tree_diff import TreeDiff
from agent.model.yields import FieldLedger
from agent.placement import endpoints
from agent.placement.client import PlacementClient
from agent.placement.conflicts import retry_on_conflict
from agent.placement.details import provider_record
from agent.placement.errors import GenerationConflict, InventoryInUse, NotFound, PlacementError
from agent.placement.mirror import Mirror
from agent.placement.pool import Pool
from agent.placement.roots import RootConflict
from agent.placement.yields import Ledgers, record_inventory, record_set, settled_diff

LOG = logging.getLogger(__name__)


@dataclass(slots=True)
class SyncResult:
    """What one flush (``ReportClient.update_from_provider_tree``) did.

    Attributes:
        created: providers created.
        removed: providers deleted.
        inventories: providers whose inventory was written.
        traits: providers whose traits were written.
        aggregates: providers whose aggregates were written.
        reshaped: True when a ``POST /reshaper`` was sent.
        errors: one line per write that failed and was skipped.
        new: UUIDs of the providers created (no allocation can be on them yet).
        yielded: the fields yielded to another writer after this flush
            (``Yielded.to_json``), of every root of the tree.
    """

    created: int = 0
    removed: int = 0
    inventories: int = 0
    traits: int = 0
    aggregates: int = 0
    reshaped: bool = False
    errors: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    yielded: list[dict[str, object]] = field(default_factory=list)

    def add(self, other: SyncResult) -> None:
        """Count ``other``'s writes and errors in this result too."""
        self.new.extend(other.new)
        self.created += other.created
        self.removed += other.removed
        self.inventories += other.inventories
        self.traits += other.traits
        self.aggregates += other.aggregates
        self.errors.extend(other.errors)


@dataclass(slots=True)
class Flush:
    """One root's part of a flush.

    Attributes:
        nodename: the root provider's name.
        mirror: the mirror of that root's tree (updated as writes succeed).
        base: the mirror as the driver's tree was derived from it, the base
            of the three-way merges (taken before a re-read moves the mirror on).
        diff: what differs between the mirror and the driver's tree.
        wanted: UUIDs of the root's subtree in the driver's tree.
        ledger: the root's fields written and yielded (:mod:`agent.placement.yields`).
    """

    nodename: str
    mirror: ProviderTree
    base: ProviderTree
    diff: TreeDiff
    wanted: set[str]
    ledger: FieldLedger

    def is_new(self, uuid: str) -> bool:
        """True for a provider nobody but this flush wrote (created by it or by the listing)."""
        return not self.base.exists(uuid) or not self.base.data(uuid).generation


def merge_sets(base: frozenset[str], desired: frozenset[str], fresh: frozenset[str]) -> set[str]:
    """Three-way merge: our change (``base`` -> ``desired``) applied to ``fresh``.

    Keeps what another writer added or removed meanwhile, so a generation
    conflict does not undo someone else's trait or aggregate.
    """
    return (set(fresh) | (desired - base)) - (base - desired)


def create_provider(
    client: PlacementClient,
    mirror: ProviderTree,
    new_tree: ProviderTree,
    uuid: str,
    result: SyncResult,
) -> None:
    """``POST /resource_providers`` for ``new_tree``'s provider ``uuid``, then add it to ``mirror``.

    Raises:
        PlacementError: Placement refused it (e.g. :class:`~agent.placement.errors.DuplicateName`).
    """
    p = new_tree.data(uuid)
    created = endpoints.create_provider(client, p.name, p.uuid, p.parent_uuid)
    mirror.populate_from_iterable([{**created, "parent_provider_uuid": p.parent_uuid}])
    result.created += 1
    result.new.append(uuid)


class Writer:
    """Writes the differences between a driver's tree and the mirror.

    Args:
        mirror: the mirror the writes are based on and recorded in.
        conflict_retries: retries of one provider's write after a generation conflict.
        sleep: how to wait between conflict retries (tests pass a no-op).
    """

    def __init__(
        self,
        mirror: Mirror,
        conflict_retries: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        pool: Pool | None = None,
    ) -> None:
        self.mirror = mirror
        self.conflict_retries = conflict_retries
        self.sleep = sleep
        self.pool = pool or Pool()
        self.ledgers = Ledgers(mirror.state)

    def plan_root(self, new_tree: ProviderTree, root_uuid: str, reshape: bool) -> Flush | None:
        """What to write for one root's subtree of ``new_tree``; None when nothing differs.

        A root not listed since the last flush (a second node, a sharing
        provider the driver adds) is listed first: its mirror may be stale,
        and a root Placement lacks is created with the tree's UUID. Providers
        to be written whose details are only vouched for are read first
        (:meth:`Mirror.verify`; all of the root's for a reshape, which names
        every provider with its generation). Outside a reshape, fields yielded
        to another writer take the held value in ``new_tree``
        (:func:`agent.placement.yields.settle`).

        Args:
            reshape: plan even when nothing differs (the reshaper names every provider).

        Raises:
            RootConflict: Placement holds the root's name under another UUID.
        """
        name = new_tree.data(root_uuid).name
        if name not in self.mirror.read_this_cycle:
            self.mirror.read(name, uuid=root_uuid)
        mirror = self.mirror.tree(name)
        held = mirror.data(name).uuid
        if held != root_uuid:
            raise RootConflict(
                f"root provider {name!r}: Placement holds this name as {held}, the tree "
                f"gives {root_uuid}; give the provider another name or use {held}"
            )
        ledger = self.ledgers.of(name)
        diff = settled_diff(ledger, mirror, new_tree, root_uuid, reshape)
        if not diff and not reshape:
            return None
        # The driver's tree was laid out on this mirror: it stays the merges' base.
        base = mirror.copy()
        writes = mirror.get_provider_uuids(root_uuid) if reshape else _written(diff)
        if self.mirror.verify(mirror, writes):
            diff = settled_diff(ledger, mirror, new_tree, root_uuid, reshape)
            if not diff and not reshape:
                return None
        wanted = set(new_tree.get_provider_uuids(root_uuid))
        return Flush(name, mirror, base, diff, wanted, ledger)

    def ensure_custom_names(self, tree: ProviderTree) -> None:
        """Create ``tree``'s custom resource classes and traits Placement is not known to hold."""
        classes, traits = self.mirror.known_classes, self.mirror.known_traits
        for p in tree.all_data():
            for rc in p.inventory:
                if is_custom(rc) and rc not in classes:
                    endpoints.ensure_resource_class(self.mirror.client, rc)
                    classes.add(rc)
            for trait in p.traits:
                if is_custom(trait) and trait not in traits:
                    endpoints.ensure_trait(self.mirror.client, trait)
                    traits.add(trait)

    def write(
        self, flush: Flush, new_tree: ProviderTree, reshaped: bool, result: SyncResult
    ) -> None:
        """Send one root's writes; after a reshape only what the reshaper did not carry.

        Raises:
            GenerationConflict: still conflicting after the retries.
            PlacementError, PlacementUnavailable: a write other than the
                per-provider ones :class:`SyncResult` lists in ``errors``.
        """
        diff, client = flush.diff, self.mirror.client
        # Writes of different providers run together (the pool); ProviderTree
        # holds its own lock around every call, so they share the mirror safely.
        mirror = flush.mirror

        def each(uuids: list[str], write: Callable[[str, SyncResult], None]) -> None:
            for part in self.pool.map(lambda u: _into(SyncResult(), write, u), uuids):
                result.add(part)

        if not reshaped:  # a child after its parent: one depth at a time
            for level in by_depth(new_tree, diff.created):
                each(level, lambda u, r: create_provider(client, mirror, new_tree, u, r))
        for uuid in dict.fromkeys(diff.reparented + diff.renamed):
            p = new_tree.data(uuid)
            updated = endpoints.update_provider(client, uuid, p.name, p.parent_uuid)
            _move_in_mirror(mirror, uuid, p.name, p.parent_uuid, updated["generation"])
        if not reshaped:
            each(diff.inventory, lambda u, r: self._write_inventory(flush, new_tree, u, r))
        base_tree = flush.base
        for kind in ("traits", "aggregates"):

            def write_set(uuid: str, r: SyncResult, kind: str = kind) -> None:
                held = base_tree.data(uuid) if base_tree.exists(uuid) else None
                base = getattr(held, kind) if held is not None else frozenset()
                self._write_set(flush, new_tree, uuid, kind, base, r)

            each(getattr(diff, kind), write_set)
        for uuid in diff.removed:
            self._delete_provider(mirror, uuid, result)

    def _retrying(self, mirror: ProviderTree, uuid: str, write: Callable[[], bool]) -> None:
        """Run one provider's ``write``; on a generation conflict re-read the provider and retry."""
        retry_on_conflict(
            write,
            retries=self.conflict_retries,
            sleep=self.sleep,
            what=f"provider {uuid}",
            reread=lambda: self.mirror.reread(mirror, uuid),
        )

    def _write_inventory(
        self, flush: Flush, new_tree: ProviderTree, uuid: str, result: SyncResult
    ) -> None:
        mirror = flush.mirror
        wanted = dict(new_tree.data(uuid).inventory)
        body = inventory_body(wanted)

        def write() -> bool:
            if not mirror.has_inventory_changed(uuid, wanted):
                return False
            held = mirror.data(uuid)
            new = endpoints.put_inventories(self.mirror.client, uuid, body, held.generation)
            record_inventory(flush.ledger, uuid, held.inventory, wanted, flush.is_new(uuid))
            mirror.update_inventory(uuid, wanted, generation=new)
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
        flush: Flush,
        new_tree: ProviderTree,
        uuid: str,
        kind: str,
        base: frozenset[str],
        result: SyncResult,
    ) -> None:
        """Write ``kind`` (``"traits"`` or ``"aggregates"``) of one provider by three-way merge."""
        mirror = flush.mirror
        desired = frozenset(getattr(new_tree.data(uuid), kind))

        def write() -> bool:
            nonlocal base
            fresh = frozenset(getattr(mirror.data(uuid), kind))
            target = merge_sets(base, desired, fresh)
            base = fresh
            if target == set(fresh):
                return False
            generation = mirror.data(uuid).generation
            held, new = endpoints.put_set(
                self.mirror.client, uuid, kind, sorted(target), generation
            )
            record_set(flush.ledger, uuid, kind, fresh, held, flush.is_new(uuid))
            update = mirror.update_traits if kind == "traits" else mirror.update_aggregates
            update(uuid, held, generation=new)
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
            endpoints.delete_provider(self.mirror.client, uuid)
        except NotFound:
            pass
        except PlacementError as exc:
            line = f"provider {name} ({uuid}) not deleted: {exc.detail or exc}"
            LOG.error(line)
            result.errors.append(line)
            return
        mirror.remove(uuid)
        result.removed += 1


def _move_in_mirror(
    mirror: ProviderTree, uuid: str, name: str, parent: str | None, generation: int
) -> None:
    """Rename or re-parent ``uuid`` in ``mirror``, with the generation Placement answered."""
    # A ProviderTree cannot re-parent in place: rebuild the subtree under the new parent.
    records = [provider_record(mirror, u) for u in mirror.get_provider_uuids(uuid)]
    mirror.remove(uuid)
    records[0].update(name=name, parent_provider_uuid=parent, generation=generation)
    mirror.populate_from_iterable(records)


def _into(result: SyncResult, write: Callable[[str, SyncResult], None], uuid: str) -> SyncResult:
    write(uuid, result)
    return result


def by_depth(tree: ProviderTree, uuids: list[str]) -> list[list[str]]:
    """``uuids`` grouped by their depth in ``tree`` (roots first), each group in given order."""
    levels: dict[int, list[str]] = {}
    for uuid in uuids:
        depth, parent = 0, tree.data(uuid).parent_uuid
        while parent is not None:
            depth, parent = depth + 1, tree.data(parent).parent_uuid
        levels.setdefault(depth, []).append(uuid)
    return [levels[d] for d in sorted(levels)]


def _written(diff: TreeDiff) -> list[str]:
    """The providers ``diff`` writes the details or the place of (not the created ones)."""
    return [
        *diff.removed,
        *diff.reparented,
        *diff.renamed,
        *diff.inventory,
        *diff.traits,
        *diff.aggregates,
    ]
