"""The allocation audit's reading: what it remembers, and what it reads each cycle.

What is read, and why (the smallest read set that sees every out-of-band
change; DESIGN.md "Placement facts"):

- Placement does not move a provider's generation on ``DELETE
  /allocations/{consumer}``, nor on the providers a consumer is moved off by
  a ``PUT``. So the allocations of the providers that every instance holds
  something on, the *CPU and memory providers* (the compute node, or the
  NUMA cells when they carry VCPU/PCPU/MEMORY_MB), are read on every cycle:
  a deleted or emptied consumer disappears from them.
- Any other change to an instance of this host is a write that leaves
  allocations on one of those providers (every instance holds CPUs and
  memory there), which moves its generation. When a CPU and memory
  provider's generation or allocations moved, every other provider of the
  node (devices) and the sharing provider are read again, so a part removed
  from a device provider or from shared storage is seen too.
- Otherwise a device provider is read only when its generation (from the
  tree listing the cycle already made) moved.

A steady host therefore costs one read per CPU and memory provider (1 flat,
one per NUMA cell) on top of the tree listing. What the audit knows is kept
in the state directory (``consumers/NODE.json``), so a restarted agent reads the
same set and heals what changed while it was down.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from agent.model.allocations import ByProvider, ProviderAllocations
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.consumer_record import ConsumerRecord
from agent.tracker.own_writes import OwnWrites

LOG = logging.getLogger(__name__)


@dataclass
class AuditView:
    """One node's allocations as read at the start of an audit.

    Attributes:
        nodename: the compute node.
        record: the audit record, refreshed from Placement.
        owned: the providers of the node the agent owns.
        tree: every provider of the node's tree (owned or not): CPU or memory
            held outside it is held on another compute node.
        produces: the classes the planner gives instances on the owned
            providers (:func:`agent.shape.planning.planned_classes`); others
            held there are kept by every write.
        stored: the record as it was stored (to write only a changed one).
        reads: providers whose allocations were read.
        own: the audit's own allocation writes of this cycle (kept per node,
            so nodes audited in parallel do not mix them).
    """

    nodename: str
    record: ConsumerRecord
    owned: set[str]
    stored: dict[str, Any]
    tree: frozenset[str] = frozenset()
    produces: frozenset[str] | None = None
    reads: int = 0
    own: OwnWrites = field(default_factory=OwnWrites)

    @cached_property
    def held(self) -> dict[str, ByProvider]:
        """``{consumer: {provider: {rc: amount}}}`` on the node's owned providers.

        Computed once, after :func:`refresh` has read: the planner and
        :meth:`AllocationAudit.reconcile` both use it.
        """
        return self.record.by_consumer(self.owned)


def refresh(
    report: ReportClient,
    state: StateStore,
    nodename: str,
    owned: set[str],
    cpu_providers: set[str],
    sharing: str | None = None,
    created: Iterable[str] = (),
    tree: Iterable[str] = (),
) -> AuditView:
    """Read what the module docstring says must be read this cycle.

    A provider created in this very cycle (``created``) holds no allocation
    yet: it is recorded empty, not read (a first start costs no read per
    provider beyond the tree's writes).

    Args:
        report: the Placement façade.
        state: the state directory (the node's :class:`ConsumerRecord`).
        nodename: the compute node (its tree was listed this cycle).
        owned: UUIDs of the providers of the node the agent owns.
        cpu_providers: the owned providers that carry VCPU, PCPU or
            MEMORY_MB inventory (read every cycle).
        sharing: the shared-storage provider DISK_GB goes to, if any.
        created: providers this cycle's writes created.
        tree: every provider of the node's tree (owned or not).

    Returns:
        An :class:`AuditView` for :meth:`AllocationAudit.reconcile` and for planning.

    Raises:
        PlacementUnavailable, PlacementError: a read failed (the cycle fails).
    """
    stored = state.consumers(nodename) or {}
    record = ConsumerRecord.from_json(stored)
    view = AuditView(nodename, record, set(owned), stored, frozenset(tree) | set(owned))
    generations = report.provider_generations(nodename)
    for rp in set(record.held) - view.owned:
        del record.held[rp]
    moved = False
    new = set(created) & view.owned
    for rp in new:
        record.held[rp] = ProviderAllocations(generations.get(rp), {})
    for rp in sorted((cpu_providers & view.owned) - new):
        fresh = _read(report, view, rp)
        old = record.held.get(rp)
        moved |= old is None or old != fresh
        record.held[rp] = fresh
    moved |= bool(new & cpu_providers)
    for rp in sorted(view.owned - cpu_providers - new):
        old = record.held.get(rp)
        if moved or old is None or old.generation != generations.get(rp):
            record.held[rp] = _read(report, view, rp)
    if sharing is not None and (moved or _shared_elsewhere(record, sharing)):
        _refresh_shared(report, view, sharing)
    return view


def _read(report: ReportClient, view: AuditView, rp: str) -> ProviderAllocations:
    view.reads += 1
    return report.provider_allocations(rp)


def _shared_elsewhere(record: ConsumerRecord, sharing: str) -> bool:
    # The sharing provider changed (aggregates moved): read the new one.
    return any(set(parts) - {sharing} for parts in record.shared.values())


def _refresh_shared(report: ReportClient, view: AuditView, sharing: str) -> None:
    """What this node's consumers hold on the sharing provider, as Placement has it."""
    record = view.record
    ours = record.instances | set(view.held)
    found = _read(report, view, sharing).consumers
    for consumer in sorted(ours | set(record.shared)):
        parts = {rp: a for rp, a in record.shared.get(consumer, {}).items() if rp != sharing}
        if consumer in found and consumer in ours:
            parts[sharing] = dict(found[consumer])
        if parts:
            record.shared[consumer] = parts
        else:
            record.shared.pop(consumer, None)
