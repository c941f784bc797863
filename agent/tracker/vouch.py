"""Vouching for a provider whose generation moved: were allocation writes all that moved it?

Placement moves a provider's generation on every write of its inventories,
traits or aggregates, and once per allocation write request that leaves
allocations on it (placement's ``_set_allocations``). nova's scheduler
claims on the compute node at every boot, so the first cycle after it sees
the compute node's generation moved, and the mirror would read the node's
inventories, traits and aggregates again (three requests) although only an
allocation changed (issue 28).

The allocation audit reads the provider's allocations anyway when its
generation moved. Each consumer there whose allocations on the provider are
new or differ from the audit's record was put there by at least one
allocation write naming the provider, so when the generation moved by no
more than the number of such consumers, allocation writes account for every
move and the provider's other details are as the mirror holds them. A move
larger than that (an inventory, trait or aggregate write; a consumer written
and deleted between two cycles; one rewritten with the same amounts) is not
explained, and the details are read, as before.

What this rule assumes: another writer places one consumer on a provider per
request (nova's report client: ``PUT /allocations/{consumer}`` for claims,
``POST /allocations`` in ``move_allocations`` places only the target consumer
on each provider; the agent's own bulk writes are counted exactly,
:mod:`agent.tracker.own_writes`). A request placing k consumers on one
provider counts 1 where the rule counts k, and could hide k - 1 writes of
other details. Those are still found: the mirror reads a vouched provider
before any write of its details (so another writer's trait or aggregate is
never overwritten), and after ``[compute] resource_provider_association_refresh``
seconds (:mod:`agent.placement.mirror`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from agent.model.allocations import ProviderAllocations
from agent.placement.report import ReportClient
from agent.tracker.consumer_record import ConsumerRecord


def explains(
    old: ProviderAllocations, fresh: ProviderAllocations, own: Collection[str] = ()
) -> bool:
    """True when allocation writes account for every move from ``old`` to ``fresh``.

    Args:
        old: the provider's allocations as the audit last recorded them, at
            the generation the mirror's details are known at.
        fresh: ``GET /resource_providers/{uuid}/allocations`` now (microversion
            1.28 or later: with consumer generations).
        own: consumers the agent itself may have written (the record's
            instances and claims). A change of theirs the record does not hold
            is a write of the agent's own its state does not record (killed
            between the write and saving the record): the agent's bulk write
            places many consumers per request, so it explains no move (issue
            33, case 6); the details are read.

    Returns:
        True when the generation moved by no more than the consumers whose
        allocations here are new or differ (module docstring); False when it
        cannot tell (no generations).
    """
    if old.generation is None or fresh.generation is None:
        return False
    moved = fresh.generation - old.generation
    if moved < 0:
        return False  # generations only grow: not the provider the record knew
    if fresh.consumers and not fresh.consumer_generations:
        return False  # a microversion before 1.28
    written = sum(
        1
        for c, amounts in fresh.consumers.items()
        if old.consumers.get(c) != amounts and c not in own
    )
    return moved <= written


class AllocationVouch:
    """A :data:`agent.placement.details.Vouch` for one node, from its audit record.

    Reads the allocations of a provider the mirror asks about (one request,
    which the audit then uses instead of reading them again: :attr:`read`),
    only when the record knows the provider at the generation asked about.

    Args:
        report: the Placement façade.
        load: loads the node's audit record (called once, on the first question).

    Attributes:
        read: ``{provider: its allocations}`` read while vouching.
        record: the record, once loaded (the audit's read takes it: not loaded twice).
    """

    def __init__(self, report: ReportClient, load: Callable[[], ConsumerRecord]) -> None:
        self.report = report
        self._load = load
        self.record: ConsumerRecord | None = None
        self.read: dict[str, ProviderAllocations] = {}

    def __call__(self, moved: Mapping[str, int]) -> dict[str, int | None]:
        """The generation each provider's details are vouched at, or None (read them).

        Reads the allocations of the providers the record knows at the
        generation asked about, in parallel (the report's pool); asks nothing
        about the others.

        Args:
            moved: ``{provider whose listed generation moved: the generation
                the mirror knows its details at}``.

        Raises:
            PlacementError, PlacementUnavailable: a read failed.
        """
        if self.record is None:
            self.record = self._load()
        record = self.record
        comparable = sorted(
            uuid
            for uuid, generation in moved.items()
            if uuid in record.held and record.held[uuid].generation == generation
        )
        found = self.report.pool.map(self.report.provider_allocations, comparable)
        out: dict[str, int | None] = dict.fromkeys(moved)
        own = record.instances | set(record.claims)
        for uuid, fresh in zip(comparable, found, strict=True):
            self.read[uuid] = fresh
            out[uuid] = fresh.generation if explains(record.held[uuid], fresh, own) else None
        return out
