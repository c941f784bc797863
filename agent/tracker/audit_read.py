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
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from agent.model.allocations import ByProvider, ConsumerAllocations, ProviderAllocations
from agent.placement.allocation_reads import (
    AllocationReads,
    Known,
    changed_consumers,
)
from agent.placement.errors import NotFound
from agent.placement.own_writes import OwnWrites
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker import evidence, record_json
from agent.tracker.consumer_record import ConsumerRecord

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
        store: the state directory the record is saved in (:meth:`save`).
        before: ``{consumer: {provider: {rc: amount}}}`` on the owned
            providers as the last audit saved them (``stored`` as given, before
            this audit's saves): what each instance held here before
            (:func:`agent.tracker.evidence.last_held`).
    """

    nodename: str
    record: ConsumerRecord
    owned: set[str]
    stored: dict[str, Any]
    tree: frozenset[str] = frozenset()
    produces: frozenset[str] | None = None
    reads: int = 0
    own: OwnWrites = field(default_factory=OwnWrites)
    store: StateStore | None = field(default=None, repr=False, compare=False)
    before: dict[str, ByProvider] = field(init=False)

    @classmethod
    def load(
        cls,
        state: StateStore,
        nodename: str,
        owned: Iterable[str],
        tree: Iterable[str],
        record: ConsumerRecord | None = None,
        stored: dict[str, Any] | None = None,
    ) -> AuditView:
        """The view of ``nodename`` with its record as stored in ``state``, saved there
        (:meth:`save`).

        Args:
            owned: the node's providers the agent owns.
            tree: every provider of the node's tree.
            record: the record, loaded already this cycle from ``stored``.
            stored: the stored record as read this cycle (read from ``state`` when None:
                the state file is read once per cycle).
        """
        stored = stored if stored is not None else state.consumers(nodename) or {}
        loaded = record if record is not None else record_json.load(stored)
        mine = set(owned)
        return cls(nodename, loaded, mine, stored, frozenset(tree) | mine, store=state)

    def save(self, statuses: bool = False) -> None:
        """Save the record in ``store`` when it changed since last stored (write-ahead).

        Args:
            statuses: a change of the consumers' statuses alone is saved too
                (the audit's last save). They say what the last audit found,
                for ``show`` and metrics, and are rebuilt by every audit: the
                write-ahead saves before and between writes skip them, or an
                unchanged node's record was written twice a cycle (issue 28).

        Raises:
            RuntimeError: the view was made without a state store (a programming error).
        """
        if self.store is None:
            raise RuntimeError(f"node {self.nodename}: audit view without a state store")
        doc = record_json.dump(self.record)
        if doc == self.stored:
            return
        if statuses or _but_statuses(doc) != _but_statuses(self.stored):
            self.store.set_consumers(self.nodename, doc)
            self.stored = doc

    def __post_init__(self) -> None:
        self.before = evidence.last_held(self.stored, self.owned)

    @cached_property
    def held(self) -> dict[str, ByProvider]:
        """``{consumer: {provider: {rc: amount}}}`` on the node's owned providers.

        Computed once, after :func:`refresh` has read: the planner and
        :func:`~agent.tracker.audit_decision.decide` both use it.
        """
        return self.record.by_consumer(self.owned)


def known(record: ConsumerRecord) -> Known:
    """What ``record`` says Placement held, as plain data for the Placement layer's reads:
    the providers' allocations, and the consumers the agent itself may have written."""
    return Known(dict(record.held), frozenset(record.instances | set(record.claims)))


def refresh(
    report: ReportClient,
    state: StateStore,
    nodename: str,
    owned: set[str],
    cpu_providers: set[str],
    sharing: str | None = None,
    created: Iterable[str] = (),
    tree: Iterable[str] = (),
    reads: AllocationReads | None = None,
    record: ConsumerRecord | None = None,
    stored: dict[str, Any] | None = None,
) -> AuditView:
    """Read what the module docstring says must be read this cycle.

    Args:
        report: the Placement façade.
        state: the state directory (the node's :class:`ConsumerRecord`).
        nodename: the compute node (its tree was listed this cycle).
        owned: UUIDs of the providers of the node the agent owns.
        cpu_providers: the owned providers that carry VCPU, PCPU or
            MEMORY_MB inventory (read every cycle).
        sharing: the shared-storage provider DISK_GB goes to, if any.
        created: providers this cycle's writes created: recorded empty, not read
            (:meth:`AllocationReads.created`).
        tree: every provider of the node's tree (owned or not).
        reads: this cycle's allocation reads of the node, which the mirror's vouch may
            have begun: what was read is not read again (:class:`AllocationReads`).
        record, stored: the node's record and its stored form as read this cycle
            (default: from ``state``).

    Returns:
        An :class:`AuditView` for planning and :meth:`~.audit.AllocationAudit.begin`.
    Raises:
        PlacementUnavailable, PlacementError: a read failed (the cycle fails).
    """
    view = AuditView.load(state, nodename, owned, tree, record, stored)
    record = view.record
    if reads is None:
        reads = report.allocation_reads(lambda: known(record))
    generations = report.provider_generations(nodename)
    read = _reader(reads, view, generations)
    new = _owned_only(view, reads, created, generations)
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
        _follow_consumers(reads, view, sorted(changed), devices, sharing)
    for rp in devices:
        old = record.held.get(rp)
        if moved or old is None or old.generation != generations.get(rp):
            record.held.read(rp, read(rp))
    _refresh_shared(read, view, _pools_to_read(record, view.tree, sharing, moved))
    return view


def _changed(record: ConsumerRecord, rp: str, fresh: ProviderAllocations) -> set[str] | None:
    """:func:`changed_consumers` of ``rp``; those another writer rewrote are no longer the
    agent's own writes in ``record``, and a removal deferred for them starts again
    (:func:`rewritten`, :meth:`ConsumerRecord.deferral_restarted`).

    docs/service.md, *gone*: another writer's allocation is removed by the next audit
    that *still* finds it gone; one nova wrote since the audit that deferred it is not
    the allocation found gone then, so two momentary absences of the domain with nova's
    write between them (a same-host resize reverted, then a reboot) release nothing
    (issue 33, case 6: *gone* rests on evidence that survives a momentary absence)."""
    old = record.held.get(rp)
    others = rewritten(old, fresh)
    record.rewritten_by_others(others)
    record.deferral_restarted(others)
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
            consumers = {c: a for c, a in held.consumers.items() if c != consumer}
            if rp in now.allocations:
                consumers[consumer] = dict(now.allocations[rp])
            if consumers != held.consumers:
                gens = {c: g for c, g in held.consumer_generations.items() if c != consumer}
                record.held.read(rp, ProviderAllocations(held.generation, consumers, gens))
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
    the host's own providers (its CPU and memory: :func:`agent.tracker.evidence.this_hosts_share`);
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


def _but_statuses(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "states"}
