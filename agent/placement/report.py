"""Keep Placement in step with a ProviderTree, writing only what changed.

:class:`ReportClient` is the façade with the spec's method names
(reshape-provider-tree.txt, nova's SchedulerReportClient) that the tracker,
the CLI and the nova import use; each job lives in its own module:

- :mod:`~agent.placement.endpoints`: one typed function per Placement call;
- :mod:`~agent.placement.mirror`: what Placement holds, per compute node,
  with its generations, in memory and in the state directory;
- :mod:`~agent.placement.writer`: the differences with the mirror turned
  into writes (three-way merge of traits and aggregates);
- :mod:`~agent.placement.reshaper`: new providers plus one ``POST /reshaper``;
- :mod:`~agent.placement.consumers`: consumers' allocations, read-edit-write;
- :mod:`~agent.placement.conflicts`: the generation-conflict retry;
- :mod:`~agent.placement.allocation_reads`, :mod:`~agent.placement.own_writes`:
  the rules that save allocation and detail reads (the vouch, the agent's own
  writes, created providers), with each fact read once per cycle.

A cycle is:

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

import time
from collections.abc import Callable
from typing import Any

from agent.model.provider_tree import ProviderTree
from agent.model.resources import Inventory, to_inventories
from agent.placement import endpoints
from agent.placement.client import PlacementClient
from agent.placement.consumers import Consumers
from agent.placement.details import Vouch
from agent.placement.mirror import Mirror
from agent.placement.pool import Pool
from agent.placement.report_allocations import AllocationCalls
from agent.placement.report_session import SessionCalls
from agent.placement.reshaper import reshape
from agent.placement.writer import Flush, SyncResult, Writer
from agent.state.store import StateStore


class ReportClient(AllocationCalls, SessionCalls):
    """Reads and writes one host's providers and allocations in Placement.

    The tree's calls are here; the allocations' are
    :class:`~agent.placement.report_allocations.AllocationCalls`'s, and what callers ask
    of the session and the client's memory (requests counted, the deadline, the state
    kept per node) :class:`~agent.placement.report_session.SessionCalls`'s.

    Args:
        client: the HTTP client.
        state: the state directory (compute node UUIDs, last state seen).
        conflict_retries: retries of a write after a generation conflict.
        sleep: how to wait between conflict retries (tests pass a no-op).
        max_concurrent_requests: independent requests in flight at once (:mod:`.pool`).
    """

    def __init__(
        self,
        client: PlacementClient,
        state: StateStore,
        conflict_retries: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        max_concurrent_requests: int = 1,
    ) -> None:
        self.client = client
        self.state = state
        self.mirror = Mirror(client, state)
        self.pool = Pool(max_concurrent_requests)
        client.limit_in_flight(max_concurrent_requests)
        self.writer = Writer(self.mirror, conflict_retries, sleep, self.pool)
        self.consumers = Consumers(client, conflict_retries, sleep)

    # -- reading ------------------------------------------------------------

    def ensure_root(self, nodename: str) -> str:
        """The compute node's UUID, creating the provider when Placement has none.

        The UUID recorded in the state directory is used if Placement has it;
        otherwise the provider is found by name (and recorded), else created
        with the recorded UUID or :func:`~agent.model.provider_tree.default_root_uuid`.

        Raises:
            RootConflict: Placement has this name under another UUID than the
                recorded one, or the UUID under another name.
            PlacementError, PlacementUnavailable: as the client raises.
        """
        self.mirror.read(nodename)
        return self.mirror.tree(nodename).data(nodename).uuid

    def get_provider_tree_and_ensure_root(
        self, nodename: str, vouch: Vouch | None = None
    ) -> ProviderTree:
        """A copy of what Placement holds for ``nodename``'s tree, root ensured.

        Args:
            vouch: asked about each provider whose generation moved before
                its details are read (:data:`agent.placement.details.Vouch`).

        Returns:
            A :class:`ProviderTree` the caller may edit (generations are
            Placement's); pass it to :meth:`update_from_provider_tree`.

        Raises:
            RootConflict, PlacementError, PlacementUnavailable.
        """
        self.mirror.read(nodename, vouch=vouch)
        return self.mirror.tree(nodename).copy()

    def read_tree(self, nodename: str) -> ProviderTree | None:
        """A copy of what Placement holds for ``nodename``, or None when it has nothing.

        Unlike :meth:`get_provider_tree_and_ensure_root`, never creates the root.
        """
        if not self.mirror.read(nodename, create=False):
            return None
        return self.mirror.tree(nodename).copy()

    def provider_generations(self, nodename: str) -> dict[str, int]:
        """``{provider UUID: generation}`` of ``nodename``'s tree as last read or written.

        Raises:
            KeyError: the tree of ``nodename`` has not been read yet.
        """
        return self.mirror.generations(nodename)

    def forget(self) -> None:
        """Drop what this client remembers (SIGHUP): the next read goes to Placement.

        The state directory's mirror is kept: it is checked against Placement's
        generations on the next read anyway.
        """
        self.mirror.forget()

    # -- writing --------------------------------------------------------------

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
            ``errors``; the rest of the tree is still written. Fields yielded
            to another writer (:mod:`agent.placement.yields`) are left as
            Placement holds them and listed in ``yielded``.

        Raises:
            RootConflict: a root's name is held in Placement by another UUID.
            ReshapeFailed: allocations were given and ``POST /reshaper`` failed.
            PlacementUnavailable: Placement could not be reached; what was
                written stays written, and the next cycle carries on from it.
        """
        result = SyncResult()
        # A root the listing created is as new as one the writer creates.
        result.new.extend(self.mirror.take_created(new_tree))
        flushes: list[Flush] = []
        reshaping = allocations is not None
        try:
            for root_uuid in new_tree.root_uuids:
                flush = self.writer.plan_root(new_tree, root_uuid, reshaping)
                if flush is not None:
                    flushes.append(flush)
            if not flushes:
                return result
            self.writer.ensure_custom_names(new_tree)
            if allocations is not None:
                # Creates the new providers itself, so that a failure can delete
                # them again; re-parenting waits until the reshape is done
                # (undoing it would move generations).
                reshape(self.client, flushes, new_tree, allocations, result)
            for flush in flushes:
                self.writer.write(flush, new_tree, reshaping, result)
        finally:
            # also after a failure part-way: what was written is in the mirror
            self.mirror.flushed([f.nodename for f in flushes], new_tree)
            roots = [new_tree.data(u).name for u in new_tree.root_uuids]
            self.writer.ledgers.save(roots)
            for name in roots:
                result.yielded.extend(y.to_json() for y in self.writer.ledgers.of(name).yields())
        return result

    # -- other providers ----------------------------------------------------------

    def provider_inventory(self, uuid: str) -> dict[str, Inventory]:
        """``GET /resource_providers/{uuid}/inventories`` of a provider outside the trees read."""
        inventories, _ = endpoints.get_inventories(self.client, uuid)
        return to_inventories(inventories)

    def provider_usages(self, uuid: str) -> dict[str, int]:
        """``GET /resource_providers/{uuid}/usages``: ``{resource class: amount in use}``."""
        return endpoints.get_usages(self.client, uuid)

    def sharing_providers(self, aggregates: set[str], resource_class: str | None) -> list[str]:
        """UUIDs of providers that share ``resource_class`` with members of ``aggregates``.

        Rule (resource-providers-allocations.txt, shared storage): a sharing
        provider carries ``MISC_SHARES_VIA_AGGREGATE`` and is in an aggregate
        with the compute node; one with room for a unit (None: any). Sorted: a stable choice.
        """
        if not aggregates:
            return []
        found = endpoints.sharing_providers(self.client, aggregates, resource_class)
        return sorted(p["uuid"] for p in found)
