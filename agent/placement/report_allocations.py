"""The allocation calls of :class:`agent.placement.report.ReportClient`: consumers read,
edited, written new, removed; one node's reads of a cycle; the agent's own writes proven.

A part of the façade, split by meaning (the tree's calls are :mod:`agent.placement.report`'s,
the session's :mod:`agent.placement.report_session`'s); every call goes through
:mod:`agent.placement.consumers` (read-edit-write with consumer generations).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent.model.allocations import ConsumerAllocations, ProviderAllocations
from agent.placement import consumers
from agent.placement.allocation_reads import AllocationReads, Known
from agent.placement.client import PlacementClient
from agent.placement.consumers import Consumers, Edit
from agent.placement.mirror import Mirror
from agent.placement.own_writes import OwnWrites
from agent.placement.pool import Pool


class AllocationCalls:
    """Consumers' allocations in Placement (the :class:`~agent.placement.report.ReportClient`
    façade's part; fields: the façade's)."""

    client: PlacementClient
    mirror: Mirror
    pool: Pool
    consumers: Consumers

    def get_allocations_for_provider_tree(self, nodename: str) -> dict[str, dict[str, Any]]:
        """Every allocation of every consumer that uses a provider of ``nodename``'s tree.

        The algorithm of reshape-provider-tree.txt (:func:`consumers.allocations_on`);
        a consumer whose allocations are all on sharing providers is not found
        (the spec's stated limitation).

        Returns:
            ``{consumer_uuid: GET /allocations/{consumer_uuid} body}``.
        """
        if nodename not in self.mirror.trees:
            self.mirror.read(nodename)
        return consumers.allocations_on(
            self.client, self.mirror.tree(nodename).get_provider_uuids(), self.pool
        )

    def get_allocations(self, consumer: str) -> ConsumerAllocations:
        """``GET /allocations/{consumer}``: what the consumer holds, with its generation.

        A consumer Placement does not know comes back empty with generation None.
        """
        return consumers.get_allocations(self.client, consumer)

    def read_consumers(self, uuids: Iterable[str]) -> dict[str, ConsumerAllocations]:
        """``{consumer: GET /allocations/{consumer}}`` of each of ``uuids``, read in parallel
        (as many at once as requests may be in flight)."""
        ordered = sorted(set(uuids))
        return dict(zip(ordered, self.pool.map(self.get_allocations, ordered), strict=True))

    def allocation_reads(self, known: Callable[[], Known]) -> AllocationReads:
        """One node's allocation reads for one cycle, shared by the vouch and the audit.

        Args:
            known: loads what the node's last audit recorded (called once, when needed).
        """
        return AllocationReads(self.provider_allocations, self.get_allocations, self.pool, known)

    def own_writes_proven(
        self, nodename: str, own: OwnWrites, held: Mapping[str, ProviderAllocations]
    ) -> dict[str, ProviderAllocations]:
        """``{provider: allocations}`` the agent's own writes lead to, for its record to take
        now; the next listing proves them (:meth:`OwnWrites.confirm`; no request)."""
        return own.confirm(self.mirror, nodename, held)

    def put_allocations(self, consumer: str, allocations: ConsumerAllocations) -> None:
        """Replace a consumer's allocations (all of them), honouring its consumer generation.

        For tools and tests that own the whole consumer; the agent's own
        writes merge (:meth:`edit_allocations`, :func:`~agent.model.allocations.merge_ours`).
        ``allocations.generation`` is ignored: the one read just before is sent.

        Raises:
            GenerationConflict: still conflicting after the retries.
            Conflict: the allocation does not fit ("Unable to allocate inventory").
        """
        self.consumers.edit(consumer, lambda _held: allocations)

    def edit_allocations(self, consumer: str, edit: Edit, retries: int | None = None) -> int | None:
        """Read ``consumer``'s allocations, let ``edit`` decide the new ones, write them.

        The one read-edit-write path (:meth:`Consumers.edit`): after a generation
        conflict the consumer is read and ``edit`` (held -> wanted, or None for
        nothing to do) called again, ``retries`` times (default: the client's
        conflict retries; 0: the conflict is raised at once, for a caller that makes
        its decision again on a new read).

        Returns:
            The consumer generation the write produced; None when ``edit`` returned
            None or the consumer vanished meanwhile.

        Raises:
            GenerationConflict: still conflicting after the retries.
            Conflict: the allocations do not fit ("Unable to allocate inventory").
            ValueError: ``edit`` gave allocations without an owner for a
                consumer Placement does not know.
        """
        return self.consumers.edit(consumer, edit, retries)

    def write_new_allocations(
        self, wanted: Mapping[str, ConsumerAllocations]
    ) -> tuple[list[list[str]], list[str]]:
        """Consumers believed new, many per ``POST /allocations``: ``(batches written, refused)``
        (:meth:`Consumers.write_new`; the refused are left to :meth:`edit_allocations`)."""
        return self.consumers.write_new(wanted)

    def post_new_allocations(self, batch: Mapping[str, ConsumerAllocations]) -> bool:
        """One ``POST /allocations`` of consumers believed new: True when written, False
        when refused with a 4xx (:meth:`Consumers.post_new`; for batches gathered across nodes).

        Raises:
            PlacementUnavailable: Placement cannot be reached.
            PlacementError: a refusal other than a 4xx.
        """
        return self.consumers.post_new(batch)

    def delete_allocations(self, consumer: str) -> bool:
        """Remove every allocation of ``consumer``; a consumer Placement does not know is fine.

        ``PUT`` with no allocations and the consumer generation, not ``DELETE`` (no generation).

        Returns:
            True when allocations were removed, False when there were none.
        """
        return self.consumers.delete(consumer)

    def remove_allocations_from(
        self,
        consumer: str,
        providers: set[str] | Callable[[ConsumerAllocations], set[str]],
        keep_if: Callable[[ConsumerAllocations], bool] | None = None,
        retries: int | None = None,
    ) -> bool:
        """Remove ``consumer``'s allocations on ``providers`` (this host's), keeping the rest.

        ``providers`` may be a function of what Placement holds, called on each
        read (:meth:`Consumers.remove_from`).

        An instance that moved to another host keeps its allocations there;
        a migration record is never touched, nor a consumer ``keep_if``
        (called with what Placement holds) says to keep (:meth:`Consumers.remove_from`).

        Args:
            retries: read-edit-writes after a generation conflict (as
                :meth:`edit_allocations`).

        Returns:
            True when something was removed.

        Raises:
            GenerationConflict: the consumer kept changing under us.
        """
        return self.consumers.remove_from(consumer, providers, keep_if, retries)

    def provider_allocations(self, uuid: str) -> ProviderAllocations:
        """``GET /resource_providers/{uuid}/allocations``: every consumer on one provider."""
        return consumers.provider_allocations(self.client, uuid)
