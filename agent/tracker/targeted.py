"""Targeted updates: what a batch of driver events changed, written without a full cycle.

An event says *what* changed, never what it now is (drivers.events): the
driver is read again for just that, and only what differs is written
(docs/service.md, "Events"):

- **an instance** (defined, undefined, started, stopped, migrated, a device
  attached): the driver reads that instance alone
  (``ComputeDriver.read_instances``); its allocation is planned by the same
  rule as the cycle's (:func:`agent.shape.planning.plan_allocations`, sticky
  to the NUMA cell it holds, others' allocations taking room first) on the
  tree as last read (no request), and the audit's states and rules apply
  (:mod:`agent.tracker.audit`): one holding nothing here is written (heal),
  one nova is moving is left alone, a drift is rewritten only when the
  operator asked for it. An instance that is gone loses this host's part, if
  the agent knew it (a consumer it never saw is the audit's business).
  Cost: 1 request (the write of a new instance, or the read of a known
  one), 2 when a known one is written.
- **devices of a node** (udev, a node device event, the fake host file):
  the node is discovered again and its tree written like a cycle's (one
  listing, then only the providers that differ; hardware gone while in use
  is kept, :mod:`agent.tracker.retained`), without the allocation audit.

The periodic cycle stays the audit that heals whatever events missed.
Callers hold the node's lock (:class:`agent.tracker.cycle.ResourceTracker`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from agent.model.allocations import ConsumerAllocations
from agent.placement.report import ReportClient
from agent.placement.writer import SyncResult
from agent.tracker.audit import AllocationAudit
from agent.tracker.consumer_record import ConsumerRecord
from agent.tracker.node_view import NodeView, NodeViews
from drivers.records import Instance

LOG = logging.getLogger(__name__)


@dataclass
class EventBatch:
    """Events coalesced into the updates they need (built by the service's queue).

    Attributes:
        instances: nodename -> UUIDs of instances to read again.
        devices: nodenames whose hardware to read again (None: every node).
        addresses: nodename -> the PCI addresses or mdev UUIDs the events
            named, for logs (empty when unknown).
        events: how many events were coalesced into this batch.
    """

    instances: dict[str, set[str]] = field(default_factory=dict)
    devices: set[str | None] = field(default_factory=set)
    addresses: dict[str | None, set[str]] = field(default_factory=dict)
    events: int = 0

    def __bool__(self) -> bool:
        return bool(self.instances or self.devices)


@dataclass
class TargetedOutcome:
    """What the targeted updates of one batch did.

    Attributes:
        written: instances whose allocations were written.
        removed: instances whose allocations on this host were removed.
        providers: providers created, deleted or written (inventories,
            traits, aggregates) by device updates.
        requests: Placement requests made.
        errors: one line per node or instance that failed (the next cycle heals).
    """

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    providers: int = 0
    requests: int = 0
    errors: list[str] = field(default_factory=list)


class TargetedUpdates:
    """Writes what one instance or one node's devices changed (module docstring).

    Args:
        views: the tracker's node views (a node discovered and laid out, or as
            last laid out; gone hardware the last layout kept).
        report: the Placement façade.
        audit: the allocation audit (its record learns what is written here).
    """

    def __init__(self, views: NodeViews, report: ReportClient, audit: AllocationAudit) -> None:
        self.views = views
        self.report = report
        self.audit = audit

    def devices(self, nodename: str, outcome: TargetedOutcome) -> SyncResult:
        """Discover ``nodename`` again and write the providers that differ (counted in ``outcome``).

        Raises:
            ReshapeNeeded: the tree must change shape (fatal outside start-up,
                as in a cycle).
            PlacementError, PlacementUnavailable: a read or write failed.
        """
        sync = self.report.update_from_provider_tree(self.views.look(nodename).tree)
        outcome.providers += sync.created + sync.removed + sync.inventories
        outcome.providers += sync.traits + sync.aggregates
        outcome.errors.extend(sync.errors)
        return sync

    def instances(self, nodename: str, uuids: Collection[str], outcome: TargetedOutcome) -> None:
        """Bring the allocations of the instances ``uuids`` of ``nodename`` in step.

        The audit's states and rules, on the record as the last cycle left
        it (:mod:`agent.tracker.audit`): a found instance is recorded before
        any write; one holding nothing here is written many per ``POST
        /allocations``, the refused and those holding something here are read
        alone (*moving*: nothing written; drift: rewritten only with
        ``rewrite_differing_allocations``); a gone one loses this host's part.
        Failures of one instance are logged and added to ``outcome.errors``.

        Raises:
            PlacementUnavailable: Placement cannot be reached.
        """
        look = self.views.cached(nodename)
        found, unreadable = self.views.adapter.read_instances(nodename, uuids)
        view = self.audit.view(nodename, look.owned, look.tree.get_provider_uuids())
        view.produces = look.produces
        vanished = {u for u in set(uuids) - set(found) - unreadable if view.record.known(u)}
        plans = _plans(look, view.record, found)
        result = self.audit.instances(view, set(found), vanished, plans, look.keep)
        outcome.written.extend(result.written)
        outcome.removed.extend(result.removed)
        outcome.errors.extend(result.errors)


def _plans(
    look: NodeView, record: ConsumerRecord, found: Mapping[str, Instance]
) -> dict[str, ConsumerAllocations]:
    """What each found instance should hold, by the cycle's rule, others where Placement
    holds them.

    Each instance planned is remembered in ``record`` (generation dropped:
    read again next cycle) so the next one planned sees it.
    """
    plans: dict[str, ConsumerAllocations] = {}
    for uuid in sorted(found):
        held = record.by_consumer(look.owned)
        plan = look.plan([found[uuid]], held).get(uuid)
        if plan is not None:
            plans[uuid] = plan
            if not held.get(uuid):
                record.held.planned_here(uuid, plan.on(look.owned), look.owned)
    return plans
