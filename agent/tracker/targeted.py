"""Targeted updates: what a batch of driver events changed, written without a full cycle.

An event says *what* changed, never what it now is (drivers.events): the
driver is read again for just that, and only what differs is written
(docs/service.md, "Events"):

- **an instance** (defined, undefined, started, stopped, migrated, a device
  attached): the driver reads that instance alone
  (``ComputeDriver.read_instances``); its allocation is planned by the same
  rule as the cycle's (:func:`agent.shape.planning.plan_allocations`, sticky
  to the NUMA cell it holds, others' allocations taking room first) on the
  tree as last read, and the audit decides by its one procedure on a new read
  of the node's allocations (:meth:`agent.audit.audit.AllocationAudit.instances`,
  issue 39): one holding nothing here is written (heal), one nova is moving is
  left alone, a drift is rewritten only when the operator asked for it; an
  instance gone loses this host's part only while the agent's own write (an
  event never counts as an audit of another writer's allocation). Cost: one
  read per CPU and memory provider, one per consumer it names as changed,
  and the writes.
- **devices of a node** (udev, a node device event, the fake host file):
  the node is discovered again and its tree written like a cycle's (one
  listing, then only the providers that differ; hardware gone while in use
  is kept, :mod:`agent.tracker.retained`), without the allocation audit.

The periodic cycle stays the audit that heals whatever events missed.
Callers hold the node's lock (:class:`agent.tracker.cycle.ResourceTracker`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field

from agent.audit.audit import AllocationAudit
from agent.audit.audit_decision import Listing
from agent.placement.report import ReportClient
from agent.placement.writer import SyncResult
from agent.tracker.node_view import NodeViews

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

        The allocation audit's one procedure (:meth:`AllocationAudit.instances`, issue
        39), scoped to these instances: the node's allocations read anew (each CPU and
        memory provider, and the consumers they name as changed: the same evidence a
        cycle decides on), the instances read from the driver and planned by the
        cycle's rule, the others of the record taken as still listed. A found
        instance is recorded before any write; one holding nothing here is written,
        unless nova is moving it (its CPU and memory elsewhere, or its share here on
        nova's migration record); a drift is rewritten only with
        ``rewrite_differing_allocations``; a vanished one becomes *gone*, its part here
        removed only while it is the agent's own write: an event never counts as an
        audit of another writer's allocation. Failures of one instance are logged and
        added to ``outcome.errors``.

        Raises:
            PlacementUnavailable: Placement cannot be reached.
        """
        look = self.views.cached(nodename)
        found, unreadable = self.views.adapter.read_instances(nodename, uuids)
        view = self.audit.reader.read(look.shape(), listed=False)
        scope = frozenset(uuids)
        present = (view.record.instances - scope) | set(found) | set(unreadable)
        listing = Listing(
            expected=look.plan(list(found.values()), view.held),
            present=frozenset(present),
            keep=frozenset(look.keep),
            owners={u: (i.project_id, i.user_id) for u, i in found.items()},
            unreadable=frozenset(unreadable),
            scope=scope,
        )
        result = self.audit.instances(view, listing)
        outcome.written.extend(result.written)
        outcome.removed.extend(result.removed)
        outcome.errors.extend(result.errors)
