"""Targeted updates: what a batch of driver events changed, written without a full cycle.

An event says *what* changed, never what it now is (drivers.events): the
driver is read again for just that, and only what differs is written
(docs/service.md, "Events"):

- **an instance** (defined, undefined, started, stopped, migrated, a device
  attached): the driver reads that instance alone
  (``ComputeDriver.read_instances``); its allocation is planned by the same
  rule as the cycle's (:func:`agent.shape.planning.plan_allocations`, sticky
  to the NUMA cell it holds, others' allocations taking room first) on the
  tree as last read (no request), then compared with what Placement holds
  (``GET /allocations/{consumer}``) and written only when it differs, by the
  merging write of claims and the audit. An instance that is gone loses this
  host's part, if the agent knew it as an instance (a consumer it never saw
  is the audit's business). Cost: 1 request, 2 when something is written.
- **devices of a node** (udev, a node device event, the fake host file):
  the node is discovered again and its tree written like a cycle's (one
  listing, then only the providers that differ; hardware gone while in use
  is kept, :mod:`agent.tracker.retained`), without the allocation audit.

The periodic cycle stays the audit that heals whatever events missed.
Callers hold the node's lock (:class:`agent.tracker.cycle.ResourceTracker`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from agent.model import ownership
from agent.model.allocations import ConsumerAllocations, ProviderAllocations, merge_ours
from agent.model.provider_tree import ProviderTree
from agent.placement.report import ReportClient
from agent.placement.writer import SyncResult
from agent.shape.planning import plan_allocations
from agent.tracker.audit import AllocationAudit
from agent.tracker.audit_read import AuditRecord
from agent.tracker.retained import retain_gone_hardware
from agent.tracker.sharing import SharingProviders
from drivers.base import ComputeDriver
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


def _unchanged(held: ConsumerAllocations, merged: ConsumerAllocations) -> bool:
    return (merged.allocations, merged.project_id, merged.user_id) == (
        held.allocations,
        held.project_id,
        held.user_id,
    )


class TargetedUpdates:
    """Writes what one instance or one node's devices changed (module docstring).

    Args:
        driver: the compute driver.
        report: the Placement façade.
        audit: the allocation audit (its record learns what is written here).
        sharing: finds a node's shared-storage provider.
        owner_trait: ``[compute] owner_trait``.
        retained: nodename -> providers of gone hardware the last layout kept
            (their allocations stay as held); shared with the tracker, which
            sets it every cycle.
    """

    def __init__(
        self,
        driver: ComputeDriver,
        report: ReportClient,
        audit: AllocationAudit,
        sharing: SharingProviders,
        owner_trait: str,
        retained: dict[str, set[str]],
    ) -> None:
        self.driver = driver
        self.report = report
        self.audit = audit
        self.sharing = sharing
        self.owner_trait = owner_trait
        self.retained = retained

    def devices(self, nodename: str, outcome: TargetedOutcome) -> SyncResult:
        """Discover ``nodename`` again and write the providers that differ (counted in ``outcome``).

        Raises:
            ReshapeNeeded: the tree must change shape (fatal outside start-up,
                as in a cycle).
            PlacementError, PlacementUnavailable: a read or write failed.
        """
        tree = self.report.get_provider_tree_and_ensure_root(nodename)
        before = tree.copy()
        self.driver.update_provider_tree(tree, nodename)
        keep = retain_gone_hardware(self.report, self.owner_trait, nodename, before, tree)
        self.retained[nodename] = keep
        sync = self.report.update_from_provider_tree(tree)
        outcome.providers += sync.created + sync.removed + sync.inventories
        outcome.providers += sync.traits + sync.aggregates
        outcome.errors.extend(sync.errors)
        return sync

    def instances(self, nodename: str, uuids: Collection[str], outcome: TargetedOutcome) -> None:
        """Bring the allocations of the instances ``uuids`` of ``nodename`` in step.

        Failures of one instance are logged and added to ``outcome.errors``.

        Raises:
            PlacementUnavailable: Placement cannot be reached.
        """
        tree = self.report.mirror.cached(nodename)
        if tree is None:  # no cycle read it yet in this process
            tree = self.report.get_provider_tree_and_ensure_root(nodename)
        owned = ownership.owned(tree, nodename, self.owner_trait)
        found, unreadable = self.driver.read_instances(nodename, uuids)
        record = self.audit.record(nodename)
        new: dict[str, ConsumerAllocations] = {}
        planner = self._planner(nodename, tree, owned, record) if found else None
        for uuid in sorted(set(uuids) - unreadable):
            instance = found.get(uuid)
            try:
                if instance is None:
                    self._gone(nodename, uuid, owned, record, outcome)
                    continue
                assert planner is not None  # an instance was found
                plan = planner(instance)
                if plan is not None and _unknown_here(uuid, owned, record):
                    new[uuid] = plan  # written together below
                    _remember(record, uuid, plan.on(owned), owned)  # the next plan sees it
                else:
                    self._present(nodename, uuid, plan, owned, record, outcome)
            except Exception as exc:  # one instance must not stop the others
                _failed(uuid, exc, outcome)
        try:
            self._write_new(nodename, new, owned, record, outcome)
        except Exception as exc:  # Placement refused otherwise than with a 409
            for uuid in new:
                _failed(uuid, exc, outcome)
        self.audit.save(nodename, record)

    def _write_new(
        self,
        nodename: str,
        new: Mapping[str, ConsumerAllocations],
        owned: set[str],
        record: AuditRecord,
        outcome: TargetedOutcome,
    ) -> None:
        """Instances Placement is believed not to know, many per ``POST /allocations``.

        A batch Placement refuses (one of them holds something elsewhere: a
        migration coming in) is written one by one with the merging write.
        """
        if not new:
            return
        batches, refused = self.report.write_new_allocations(new)
        for batch in batches:
            for uuid in batch:
                self._present(nodename, uuid, None, owned, record, outcome)
                shared = new[uuid].without(owned)
                if shared:
                    record.shared[uuid] = shared
                outcome.written.append(uuid)
            LOG.info("%d instance(s): allocations written together on events", len(batch))
        for uuid in refused:
            try:
                self._present(nodename, uuid, new[uuid], owned, record, outcome)
            except Exception as exc:  # one instance must not stop the others
                _failed(uuid, exc, outcome)

    def _planner(
        self, nodename: str, tree: ProviderTree, owned: set[str], record: AuditRecord
    ) -> Callable[[Instance], ConsumerAllocations | None]:
        """What an instance should hold, by the cycle's rule, others where Placement holds them.

        The node's hardware and its sharing provider are looked up once per
        batch, not per instance; what the others hold is read from ``record``
        at each call, so an instance planned earlier in the batch counts.
        """
        host = self.driver.laid_out_resources(nodename)
        sharing = self.sharing.lookup(tree, nodename)
        policy = self.driver.policy

        def plan(instance: Instance) -> ConsumerAllocations | None:
            held = record.by_consumer(owned)
            plans = plan_allocations([instance], host, tree, policy, sharing, held)
            return plans.get(instance.uuid)

        return plan

    def _present(
        self,
        nodename: str,
        uuid: str,
        plan: ConsumerAllocations | None,
        owned: set[str],
        record: AuditRecord,
        outcome: TargetedOutcome,
    ) -> None:
        record.instances.add(uuid)
        record.unknown.pop(uuid, None)
        if plan is None:
            return  # uses nothing: nothing to hold
        keep = set(self.retained.get(nodename, ()))
        ours = owned | set(record.shared.get(uuid, {}))

        def edit(held: ConsumerAllocations) -> ConsumerAllocations | None:
            merged = merge_ours(held, plan, ours, keep)
            return None if _unchanged(held, merged) else merged

        if self.report.edit_allocations(uuid, edit):
            outcome.written.append(uuid)
            LOG.info("instance %s: allocation written on event (%s)", uuid, plan.on(owned))
        shared = plan.without(owned)
        if shared:
            record.shared[uuid] = shared
        else:
            record.shared.pop(uuid, None)
        _remember(record, uuid, plan.on(owned), owned)

    def _gone(
        self,
        nodename: str,
        uuid: str,
        owned: set[str],
        record: AuditRecord,
        outcome: TargetedOutcome,
    ) -> None:
        if uuid not in record.instances:
            return  # never known as an instance here: the audit's rules decide
        ours = owned | set(record.shared.get(uuid, {}))
        if self.report.remove_allocations_from(uuid, ours):
            outcome.removed.append(uuid)
            LOG.info("instance %s: gone from %s; its allocations here removed", uuid, nodename)
        record.instances.discard(uuid)
        record.shared.pop(uuid, None)
        _remember(record, uuid, {}, owned)


def _remember(
    record: AuditRecord, uuid: str, held: Mapping[str, Mapping[str, int]], owned: set[str]
) -> None:
    """Write ``uuid``'s new part into the audit's record of each provider, to be read again.

    The next planning sees the instance where it now is; the generation is
    dropped so that the next cycle reads those providers from Placement.
    """
    for rp in owned:
        known = record.held.get(rp)
        if known is None and rp not in held:
            continue
        consumers = dict(known.consumers) if known is not None else {}
        if rp in held:
            consumers[uuid] = dict(held[rp])
        elif uuid not in consumers:
            continue
        else:
            del consumers[uuid]
        record.held[rp] = ProviderAllocations(None, consumers)


def _unknown_here(uuid: str, owned: set[str], record: AuditRecord) -> bool:
    """True when the audit knows nothing of ``uuid`` here: not an instance, holding nothing."""
    if uuid in record.instances or uuid in record.shared:
        return False
    return not any(uuid in record.held[rp].consumers for rp in owned if rp in record.held)


def _failed(uuid: str, exc: Exception, outcome: TargetedOutcome) -> None:
    line = f"instance {uuid}: targeted update failed: {type(exc).__name__}: {exc}"
    LOG.error("%s", line)
    outcome.errors.append(line)
