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
  node (devices), the sharing provider and every other pool the record saw
  an instance hold a part on (nova's scheduler may choose any pool of the
  aggregate) are read again, so a part removed from a device provider or
  from shared storage is seen too.
- Otherwise a device provider is read only when its generation (from the
  tree listing the cycle already made) moved.

A steady host therefore costs one read per CPU and memory provider (1 flat,
one per NUMA cell) on top of the tree listing. What the audit knows is kept
in the state directory (``consumers/NODE.json``), so a restarted agent reads the
same set and heals what changed while it was down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from agent.audit import evidence
from agent.audit.audit_view import AuditView, NodeShape, StoredRecord
from agent.audit.consumer_record import ConsumerRecord
from agent.model.allocations import ByProvider, ConsumerAllocations, ProviderAllocations
from agent.placement.allocation_reads import (
    AllocationReads,
    changed_consumers,
)
from agent.placement.errors import NotFound
from agent.placement.report import ReportClient
from agent.state.store import StateStore

LOG = logging.getLogger(__name__)


class AuditReader:
    """The one place an audit's view of a node is built, for every trigger: a cycle, an
    event's instances, a new decision after a conflict (module docstring: what is read).

    Args:
        report: the Placement façade.
        state: the state directory (the nodes' records).
    """

    def __init__(self, report: ReportClient, state: StateStore) -> None:
        self.report = report
        self.state = state

    def stored(self, nodename: str) -> StoredRecord:
        """``nodename``'s record as stored, read when first needed."""
        return StoredRecord(self.state, nodename)

    def reads(self, stored: StoredRecord) -> AllocationReads:
        """A fresh set of the node's allocation reads (nothing read yet), for the mirror's
        vouch and then :meth:`read` (:class:`AllocationReads`)."""
        return self.report.allocation_reads(stored.known)

    def read(
        self,
        shape: NodeShape,
        stored: StoredRecord | None = None,
        reads: AllocationReads | None = None,
        listed: bool = True,
    ) -> AuditView:
        """Read what the module docstring says must be read, into the record.

        Args:
            shape: the node's layout.
            stored: the node's record (default: as stored now).
            reads: the node's allocation reads of this cycle, which the vouch may have
                begun (default: new ones: everything is read).
            listed: the node's tree was listed just before (a cycle): a device provider
                whose listed generation moved is read. Without a listing (an event, a
                decision made again) the generations known are the last cycle's, so a
                device provider is read only when its CPU and memory providers' consumers
                say it changed, or the record knows no generation of it.

        Returns:
            The :class:`AuditView` the audit decides on.

        Raises:
            PlacementUnavailable, PlacementError: a read failed.
        """
        stored = stored or self.stored(shape.nodename)
        view = AuditView.load(
            self.state, shape.nodename, shape.owned, shape.tree, stored.record, stored.doc
        )
        view.produces = shape.produces
        view.shape = shape
        _refresh(self.report, view, shape, reads or self.reads(stored), listed)
        return view

    def again(self, view: AuditView) -> AuditView:
        """A new read of the node for the same record (a decision to make again after a
        conflict, or after the consumer changed under the audit's write): every CPU and
        memory provider read anew.

        Raises:
            RuntimeError: ``view`` was not made by :meth:`read` (a programming error).
        """
        if view.shape is None:
            raise RuntimeError(f"node {view.nodename}: audit view without its node's shape")
        stored = StoredRecord(self.state, view.nodename, view.record, view.stored)
        again = self.read(view.shape, stored, listed=False)
        again.reads += view.reads
        return again


def _refresh(
    report: ReportClient,
    view: AuditView,
    shape: NodeShape,
    reads: AllocationReads,
    listed: bool,
) -> None:
    """Read the node's allocations into ``view.record`` (module docstring)."""
    record = view.record
    generations = report.provider_generations(shape.nodename)
    read = _reader(reads, view, generations)
    new = _owned_only(view, reads, shape.created, generations)
    cpu_providers = set(shape.cpu_providers)
    changed: set[str] | None = set()
    for rp in sorted((cpu_providers & view.owned) - new):
        fresh = read(rp)
        found = _changed(record, rp, fresh)
        changed = None if found is None or changed is None else changed | found
        record.held.read(rp, fresh)
    devices = sorted(view.owned - cpu_providers - new)
    # Reading the changed consumers must cost less than reading every device provider.
    moved = bool(new & cpu_providers) or changed is None or len(changed) > len(devices)
    if not moved and changed:
        _follow_consumers(reads, view, sorted(changed), devices, shape.sharing)
    for rp in devices:
        old = record.held.get(rp)
        unknown = old is None or old.generation is None
        if moved or unknown or (listed and old.generation != generations.get(rp)):
            record.held.read(rp, read(rp))
    _refresh_shared(read, view, _pools_to_read(record, view.tree, shape.sharing, moved))


def _changed(record: ConsumerRecord, rp: str, fresh: ProviderAllocations) -> set[str] | None:
    """:func:`changed_consumers` of ``rp``; those another writer rewrote, or that a read no
    longer finds there, are no longer the agent's own writes in ``record``, and the wait
    of a gone one starts again (:func:`rewritten`, :meth:`ConsumerRecord.rewritten_by_others`).

    docs/service.md, *gone*: another writer's allocation is removed by the next audit
    that *still* finds it gone; one nova wrote since the audit that deferred it is not
    the allocation found gone then, so two momentary absences of the domain with nova's
    write between them (a same-host resize reverted, then a reboot) release nothing
    (issue 33, case 6: *gone* rests on evidence that survives a momentary absence)."""
    old = record.held.get(rp)
    others = rewritten(old, fresh)
    if old is not None:
        others |= set(old.consumers) - set(fresh.consumers)
    record.rewritten_by_others(others)
    return changed_consumers(old, fresh)


def rewritten(old: ProviderAllocations | None, fresh: ProviderAllocations) -> set[str]:
    """Consumers of ``old`` another writer wrote since: their amounts here changed, or
    their consumer generation moved from one the record knew. The agent's own writes are
    in the record before its next read (:mod:`agent.placement.own_writes`), so they are not
    among them, but a consumer nova re-creates with the same amounts (its generation
    starts again) is not seen."""
    if old is None:
        return set()
    return {
        c
        for c, amounts in old.consumers.items()
        if c in fresh.consumers
        and (
            fresh.consumers[c] != amounts
            or fresh.consumer_generations.get(c)
            != old.consumer_generations.get(c, fresh.consumer_generations.get(c))
        )
    }


def _follow_consumers(
    reads: AllocationReads,
    view: AuditView,
    changed: list[str],
    devices: list[str],
    sharing: str | None,
) -> None:
    """Read each changed consumer (in parallel; the vouch may have read them already) and
    put what it holds now in the record.

    A consumer's part removed from a device provider moves no generation
    there, so the record of every device provider and of the sharing
    provider is corrected from the consumer's own allocations; a device
    provider it wrote on moved its generation and is read as usual (or
    derived from these very reads, :mod:`agent.placement.allocation_reads`).
    """
    view.reads += len(changed)
    found = reads.of_consumers(changed)
    record = view.record
    for consumer in changed:
        now = found[consumer]
        for rp in devices:
            held = record.held.get(rp)
            if held is None:
                continue
            derived = held.with_parts(
                rp, {consumer: now.allocations}, held.generation, {consumer: now.generation}
            )
            if derived.consumers != held.consumers:
                record.held.read(rp, derived)
        _follow_shared(view, consumer, now.allocations, sharing)


def _follow_shared(view: AuditView, consumer: str, now: ByProvider, sharing: str | None) -> None:
    """``consumer``'s parts on the sharing provider and on every pool the record saw it
    hold a part on, as they are now (:func:`_refresh_shared`'s rule)."""
    record = view.record
    pools = set(record.shared.get(consumer, {})) | ({sharing} if sharing else set())
    held = ConsumerAllocations(allocations=now)
    share = evidence.this_hosts_share(held, view.owned, view.tree, pools - view.tree)
    parts = {rp: dict(now[rp]) for rp in sorted(share - view.owned)}
    record.pool_parts(consumer, parts if held.on(view.owned) else {})


def _owned_only(
    view: AuditView, reads: AllocationReads, created: Iterable[str], generations: Mapping[str, int]
) -> set[str]:
    """Narrow the record to the owned providers, the ones created this cycle recorded
    empty (they hold nothing yet); returns those."""
    record = view.record
    for rp in set(record.held) - view.owned:
        record.held.read(rp, None)
    new = set(created) & view.owned
    for rp, empty in reads.created(new, generations).items():
        record.held.read(rp, empty)
    return new


def _reader(
    reads: AllocationReads, view: AuditView, generations: Mapping[str, int]
) -> Callable[[str], ProviderAllocations]:
    """Reads a provider's allocations at its listed generation, or takes them from this
    cycle's reads when they are at that generation (the vouch read or derived them)."""

    def read(rp: str) -> ProviderAllocations:
        view.reads += 1
        return reads.provider(rp, generations.get(rp))[0]

    return read


def _shared_elsewhere(record: ConsumerRecord, sharing: str) -> bool:
    # The sharing provider changed (aggregates moved): read the new one.
    return any(set(parts) - {sharing} for parts in record.shared.values())


def _pools_to_read(
    record: ConsumerRecord, tree: Iterable[str], sharing: str | None, moved: bool
) -> set[str]:
    """The pools read this cycle (module docstring): when a CPU and memory provider
    moved, the sharing provider and every provider outside ``tree`` the record saw a
    consumer hold a part on; otherwise the sharing provider alone, and only when the
    record names another (the aggregate's pool changed)."""
    pools = {rp for parts in record.shared.values() for rp in parts} - set(tree) if moved else set()
    if sharing is not None and (moved or _shared_elsewhere(record, sharing)):
        pools.add(sharing)
    return pools


def _refresh_shared(
    read: Callable[[str], ProviderAllocations], view: AuditView, pools: Iterable[str]
) -> None:
    """What this node's consumers hold on ``pools`` (the sharing provider, and every
    pool the record saw a part on), as Placement has it; a pool that is gone holds nothing.

    A consumer's part there is this host's share only while it holds something on
    the host's own providers (its CPU and memory: :func:`agent.audit.evidence.this_hosts_share`);
    a listed instance nova moved elsewhere has its pool part go with the other host.
    Every pool the record names is read, not only the one the plan uses: with
    several pools in the aggregate nova's scheduler may put a disk on any of them,
    and a part remembered there unread would count as held after nova moved it
    (to a migration record, to another pool), so the instance would be healed in
    the conductor's window, kept *gone* after it left, or drift for ever (issue 33,
    "This host's share, by evidence").
    """
    record = view.record
    ours = set(view.held)
    for pool in sorted(pools):
        try:
            found = read(pool).consumers
        except NotFound:
            found = {}
        for consumer in sorted(ours | set(record.shared)):
            parts = {rp: a for rp, a in record.shared.get(consumer, {}).items() if rp != pool}
            if consumer in found and consumer in ours:
                parts[pool] = dict(found[consumer])
            record.pool_parts(consumer, parts)
