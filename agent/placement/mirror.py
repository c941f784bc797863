"""The mirror of what Placement holds: one :class:`ProviderTree` per compute node.

The mirror carries Placement's generations, lives in memory and in the state
directory (``seen_providers``, the compute node UUIDs), and is brought up to
date by one ``GET /resource_providers?in_tree=ROOT``: only providers whose
generation moved, or that are new to the mirror, are read in detail, and a
provider's details are kept only when its three reads agree on one
generation (:func:`read_provider_details`). So a cycle in which nothing
changed costs one request, and a restarted agent whose host did not change
costs the same.

A moved generation that the allocations read in the same cycle explain
keeps the details without their reads (:mod:`agent.placement.details`,
:mod:`agent.placement.allocation_reads`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from agent.model.exceptions import AgentError
from agent.model.names import is_custom
from agent.model.provider_tree import ProviderTree
from agent.placement import endpoints
from agent.placement.client import PlacementClient
from agent.placement.details import (
    Vouch,
    Vouched,
    provider_record,
    read_provider_details,
    restored,
)
from agent.placement.endpoints import ProviderRecord
from agent.placement.roots import CREATED_HERE, ComputeNodes
from agent.state.store import StateStore

LOG = logging.getLogger(__name__)

_LISTED = ("uuid", "name", "generation", "parent_provider_uuid")
"""The fields of a listing record the mirror keeps."""


def _unchanged(mirror: ProviderTree, listing: list[ProviderRecord]) -> bool:
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


def _sorted_out(
    mirror: ProviderTree, listing: list[ProviderRecord], expired: set[str]
) -> tuple[list[str], dict[str, int], list[str]]:
    """The listed providers whose details must be read (new to the mirror, or their vouch
    expired), those whose generation moved (``{uuid: (the mirror's generation, the listed
    one)}``) and those as the mirror holds them; a provider this client just created is in
    none (it holds nothing yet)."""
    stale: list[str] = []
    moved: dict[str, tuple[int, int]] = {}
    kept: list[str] = []
    for rec in listing:
        uuid = rec["uuid"]
        if rec.get(CREATED_HERE):
            continue
        held = mirror.data(uuid).generation if mirror.exists(uuid) else None
        if held is None or uuid in expired:
            stale.append(uuid)
        elif held != rec["generation"]:
            moved[uuid] = (held, rec["generation"])
        else:
            kept.append(uuid)
    return stale, moved, kept


class Mirror:
    """What Placement holds for this host's trees, as last read or written.

    Args:
        client: the HTTP client.
        state: the state directory (compute node UUIDs, last state seen).

    Attributes:
        trees: ``{nodename: ProviderTree}`` read so far (generations are Placement's).
        known_classes, known_traits: custom classes and traits Placement holds, kept
            apart as Placement does (``mdev_class = CUSTOM_NVIDIA_12``, the type's trait).
        read_this_cycle: roots listed since the last flush.
        roots: finds or creates each node's compute node (:mod:`agent.placement.roots`).
        created_roots: ``{nodename: root UUID}`` of the roots the last listing
            of that node created (``POST /resource_providers``), until a flush
            reports them as new (:meth:`take_created`).
        expected: ``{provider: (generation, generation after the agent's own
            allocation writes)}``, checked by the next listing (:meth:`expect`).
        vouched: the providers whose details rest on a vouch (its
            ``refresh_after`` is ``[compute] resource_provider_association_refresh``).
    """

    def __init__(self, client: PlacementClient, state: StateStore) -> None:
        self.client = client
        self.state = state
        self.vouched = Vouched()
        self.trees: dict[str, ProviderTree] = {}
        self.known_classes: set[str] = set()
        self.known_traits: set[str] = set()
        self.read_this_cycle: set[str] = set()
        self.roots = ComputeNodes(client, state)
        # Set and dict operations are atomic: nodes synced in parallel touch
        # different providers.
        self.created_roots: dict[str, str] = {}
        self.expected: dict[str, tuple[int, int]] = {}

    def tree(self, nodename: str) -> ProviderTree:
        """The mirror of ``nodename``'s tree (not a copy).

        Raises:
            KeyError: the tree of ``nodename`` has not been read yet.
        """
        return self.trees[nodename]

    def cached(self, nodename: str) -> ProviderTree | None:
        """A copy of ``nodename``'s tree as last read or written; no request.

        For an event's targeted update, which needs the providers' UUIDs and
        inventories but not a fresh listing (the write it may make carries
        the consumer generation read just before it).

        Returns:
            The tree, or None when it was not read yet in this process.
        """
        tree = self.trees.get(nodename)
        return None if tree is None else tree.copy()

    def expect(self, nodename: str, moves: Mapping[str, int]) -> dict[str, tuple[int, int]]:
        """Expect the agent's own allocation writes in ``nodename``'s next listing; no request.

        Placement moves a provider's generation by one per allocation write
        request naming it (placement's ``_set_allocations``). A provider that
        the next listing shows at exactly the mirror's generation plus
        ``moves`` was written by nobody else meanwhile, so its inventories,
        traits and aggregates are as the mirror holds them and are not read
        again; any other generation is read as usual. The proof a listing
        right after the writes would give, without that listing: the next
        cycle lists the tree anyway.

        Args:
            moves: provider -> allocation write requests of the agent that
                named it since the mirror's generation was taken.

        Returns:
            ``{provider: (mirror's generation, expected generation)}`` for the
            providers of the tree whose generation the mirror knows.

        Raises:
            KeyError: the tree was not read yet.
        """
        tree = self.trees[nodename]
        out: dict[str, tuple[int, int]] = {}
        for uuid, count in moves.items():
            old = tree.data(uuid).generation if tree.exists(uuid) else None
            if old is not None and count > 0:
                out[uuid] = self.expected[uuid] = (old, old + count)
        return out

    def _take_expected(self, mirror: ProviderTree, listing: list[ProviderRecord]) -> bool:
        """Move the mirror's generations to the listed ones :meth:`expect` predicted.

        Each expectation is used by one listing only. A listed generation
        beyond the expected one was moved by others too: the agent's own writes
        are taken all the same (allocation writes change no inventory, trait or
        aggregate), and the rest is left to be vouched for or read. Returns
        True when a generation moved.
        """
        moved = False
        for rec in listing:
            expected = self.expected.pop(rec["uuid"], None)
            if expected is None or not mirror.exists(rec["uuid"]):
                continue
            old, new = expected
            if mirror.data(rec["uuid"]).generation == old <= new <= rec["generation"]:
                mirror.update_generation(rec["uuid"], new)
                moved = True
        return moved

    def take_created(self, tree: ProviderTree) -> list[str]:
        """The roots of ``tree`` that their node's last listing created (each told once).

        A root created by that listing holds no allocation yet: the
        allocation audit records it empty instead of reading it. Only the
        last listing counts (a later one that found the root clears it).
        """
        out = []
        for uuid in tree.root_uuids:
            name = tree.data(uuid).name
            if self.created_roots.get(name) == uuid:
                del self.created_roots[name]
                out.append(uuid)
        return out

    def flushed(self, written: Iterable[str], tree: ProviderTree) -> None:
        """Save the trees of ``written``; list ``tree``'s roots again before their next flush.

        Only this tree's roots are unmarked: other nodes, synced in parallel,
        may be between their own listing and flush.
        """
        for nodename in written:
            self.save(nodename)
        for root_uuid in tree.root_uuids:
            self.read_this_cycle.discard(tree.data(root_uuid).name)

    def generations(self, nodename: str) -> dict[str, int]:
        """``{provider UUID: generation}`` of ``nodename``'s tree as last read or written.

        Raises:
            KeyError: the tree of ``nodename`` has not been read yet.
        """
        return {
            p.uuid: p.generation
            for p in self.trees[nodename].all_data()
            if p.generation is not None
        }

    def forget(self) -> None:
        """Drop what is held in memory; the state directory's copy is checked on the next read."""
        self.trees.clear()
        self.known_classes.clear()
        self.known_traits.clear()
        self.vouched.clear()

    def save(self, nodename: str) -> None:
        """Write ``nodename``'s mirror to the state directory.

        A vouched provider is stored with its vouch (:meth:`Vouched.to_json`),
        so a restarted agent keeps it, and its age, rather than read the
        details again (issue 33) or trust them for longer.
        """
        mirror = self.trees[nodename]
        records = [
            provider_record(mirror, u, self.vouched.to_json(u)) for u in mirror.get_provider_uuids()
        ]
        self.state.set_seen_providers(nodename, records)

    def reread(self, tree: ProviderTree, uuid: str) -> None:
        """Read one provider's details into ``tree``, no longer vouched for (raises as
        :func:`read_provider_details`)."""
        read_provider_details(self.client, tree, uuid)
        self.vouched.discard(uuid)

    def verify(self, tree: ProviderTree, uuids: Iterable[str]) -> list[str]:
        """Read again the details of those of ``uuids`` that rest on a vouch; returns them.

        Before a write that bases itself on them (a flush, a reshape): a vouch
        is an inference from allocations, a write must rest on a read. Raises
        as :meth:`reread`.
        """
        read = [u for u in dict.fromkeys(uuids) if u in self.vouched and tree.exists(u)]
        for uuid in read:
            self.reread(tree, uuid)
        return read

    def _from_state(self, nodename: str) -> ProviderTree:
        mirror = ProviderTree()
        records = restored(self.state.seen_providers(nodename), self.vouched)
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

    def read(
        self,
        nodename: str,
        create: bool = True,
        uuid: str | None = None,
        vouch: Vouch | None = None,
    ) -> bool:
        """List ``nodename``'s tree and bring the mirror up to date; False when it has none.

        Args:
            nodename: the root provider's name.
            create: create the root when Placement has none by this name.
            uuid: the UUID to create it with when the state directory records
                none (default: :func:`~agent.model.provider_tree.default_root_uuid`).
            vouch: asked about each provider whose generation moved before its
                details are read (module docstring); None: they are read.

        Raises:
            RootConflict: the name and the recorded UUID disagree with Placement.
            PlacementError, PlacementUnavailable: as the client raises.
        """
        self.read_this_cycle.add(nodename)
        self.created_roots.pop(nodename, None)
        mirror = self.trees.get(nodename)
        if mirror is None:
            mirror = self._from_state(nodename)
        listing = self._listing(nodename, create, uuid)
        if not listing:
            return False
        proven = self._take_expected(mirror, listing)
        expired = self.vouched.expired(mirror)
        if not expired and _unchanged(mirror, listing):
            self.trees[nodename] = mirror
            self._remember_custom(mirror)
            if proven:
                self.save(nodename)
            return True
        fresh, _ = self._refreshed(mirror, listing, expired, vouch)
        self.trees[nodename] = fresh
        self._remember_custom(fresh)
        for uuid in set(mirror.get_provider_uuids()) - set(fresh.get_provider_uuids()):
            self.vouched.discard(uuid)
        # Saved with the vouched generations too: a restart lists the same and reads nothing.
        self.save(nodename)
        return True

    def _listing(self, nodename: str, create: bool, uuid: str | None) -> list[ProviderRecord]:
        """The listing of ``nodename``'s tree, the root found or created; recorded in the state."""
        stored = self.state.root_uuid(nodename)
        listing: list[ProviderRecord] = []
        if stored:
            listing = endpoints.list_tree(self.client, stored)
        if not listing:
            listing = self.roots.find_or_create(nodename, stored, create, uuid)
            if listing and listing[0].get(CREATED_HERE):
                self.created_roots[nodename] = listing[0]["uuid"]
            if not listing:
                return []
        root_uuid = next(r["uuid"] for r in listing if r["parent_provider_uuid"] is None)
        if root_uuid != stored:
            self.state.set_root_uuid(nodename, root_uuid)
        self.roots.identity(nodename, root_uuid)
        return listing

    def _refreshed(
        self,
        mirror: ProviderTree,
        listing: list[ProviderRecord],
        expired: set[str],
        vouch: Vouch | None,
    ) -> tuple[ProviderTree, list[str]]:
        """The tree ``listing`` shows, and the providers read again (their generation
        moved and nobody vouched for them, or their vouch expired)."""
        fresh = ProviderTree()
        fresh.populate_from_iterable({k: r[k] for k in _LISTED} for r in listing)
        stale, moved, kept = _sorted_out(mirror, listing, expired)
        vouched = vouch(moved, mirror) if vouch is not None and moved else {}
        for uuid, (held, _) in moved.items():
            at = vouched.get(uuid)
            if at is None:
                stale.append(uuid)
                continue
            self.vouched.add(uuid, held)
            fresh.update_generation(uuid, at)
            kept.append(uuid)
        for uuid in kept:
            old = mirror.data(uuid)
            fresh.update_inventory(uuid, old.inventory)
            fresh.update_traits(uuid, old.traits)
            fresh.update_aggregates(uuid, old.aggregates)
        for uuid in stale:
            self.reread(fresh, uuid)
        return fresh, stale

    def _remember_custom(self, tree: ProviderTree) -> None:
        # Names Placement already holds need no PUT /resource_classes or /traits.
        for p in tree.all_data():
            self.known_classes.update(n for n in p.inventory if is_custom(n))
            self.known_traits.update(n for n in p.traits if is_custom(n))
