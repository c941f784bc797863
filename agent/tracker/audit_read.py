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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from agent.model.allocations import ByProvider, ConsumerAllocations, ProviderAllocations
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker import evidence, record_json
from agent.tracker.consumer_record import ConsumerRecord
from agent.tracker.own_writes import OwnWrites
from agent.tracker.vouch import AllocationVouch

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


def refresh(
    report: ReportClient,
    state: StateStore,
    nodename: str,
    owned: set[str],
    cpu_providers: set[str],
    sharing: str | None = None,
    created: Iterable[str] = (),
    tree: Iterable[str] = (),
    earlier: AllocationVouch | None = None,
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
        earlier: what vouching read this cycle (:mod:`agent.tracker.vouch`): the
            record, and providers' allocations, used while their generation holds.

    Returns:
        An :class:`AuditView` for planning and :meth:`~.audit.AllocationAudit.begin`.
    Raises:
        PlacementUnavailable, PlacementError: a read failed (the cycle fails).
    """
    stored = state.consumers(nodename) or {}
    loaded = earlier.record if earlier is not None else None
    record = loaded if loaded is not None else record_json.load(stored)
    view = AuditView(
        nodename, record, set(owned), stored, frozenset(tree) | set(owned), store=state
    )
    generations = report.provider_generations(nodename)
    read = _reader(report, view, generations, earlier.read if earlier is not None else {})
    new = _owned_only(view, created, generations)
    changed: set[str] | None = set()
    for rp in sorted((cpu_providers & view.owned) - new):
        fresh = read(rp)
        found = _changed(record, rp, fresh)
        changed = None if found is None or changed is None else changed | found
        record.held[rp] = fresh
    devices = sorted(view.owned - cpu_providers - new)
    # Reading the changed consumers must cost less than reading every device provider.
    moved = bool(new & cpu_providers) or changed is None or len(changed) > len(devices)
    if not moved and changed:
        _follow_consumers(report, view, sorted(changed), devices, sharing)
    for rp in devices:
        old = record.held.get(rp)
        if moved or old is None or old.generation != generations.get(rp):
            record.held[rp] = read(rp)
    if sharing is not None and (moved or _shared_elsewhere(record, sharing)):
        _refresh_shared(report, view, sharing)
    return view


def changed_consumers(
    old: ProviderAllocations | None, fresh: ProviderAllocations
) -> set[str] | None:
    """The consumers of a CPU and memory provider that may have changed anywhere since ``old``.

    Every write of a consumer's allocations moves its consumer generation
    (Placement API reference, microversion 1.28), and every write that leaves
    a consumer on a provider moves the provider's generation; a consumer
    deleted or moved off disappears from the listing. So: a consumer that
    appeared or disappeared, and, when the provider's generation moved, each
    whose consumer generation moved or was not known (written by the agent
    itself: its write is proven by the provider's generation being the one
    expected, ``own_writes``, and then nothing else wrote here).

    Returns:
        The consumers to read again, or None when ``old`` cannot tell (no
        record, no generation, or a read without consumer generations):
        then every provider is read, as before.
    """
    if old is None or old.generation is None or fresh.generation is None:
        return None
    if fresh.consumers and not fresh.consumer_generations:
        return None  # a microversion before 1.28: nothing to compare
    changed = set(old.consumers) ^ set(fresh.consumers)
    if fresh.generation == old.generation:
        return changed | {c for c in fresh.consumers if fresh.consumers[c] != old.consumers.get(c)}
    for consumer in fresh.consumers:
        before = old.consumer_generations.get(consumer)
        if before is None or before != fresh.consumer_generations.get(consumer):
            changed.add(consumer)
    return changed


def _changed(record: ConsumerRecord, rp: str, fresh: ProviderAllocations) -> set[str] | None:
    """:func:`changed_consumers` of ``rp``; those another writer rewrote are no longer the
    agent's own writes in ``record`` (:func:`rewritten`)."""
    old = record.held.get(rp)
    record.rewritten_by_others(rewritten(old, fresh))
    return changed_consumers(old, fresh)


def rewritten(old: ProviderAllocations | None, fresh: ProviderAllocations) -> set[str]:
    """Consumers of ``old`` another writer wrote since: their amounts here changed, or
    their consumer generation moved from one the record knew. The agent's own writes are
    in the record before its next read (:mod:`agent.tracker.own_writes`), so they are not
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
    report: ReportClient,
    view: AuditView,
    changed: list[str],
    devices: list[str],
    sharing: str | None,
) -> None:
    """Read each changed consumer (in parallel) and put what it holds now in the record.

    A consumer's part removed from a device provider moves no generation
    there, so the record of every device provider and of the sharing
    provider is corrected from the consumer's own allocations; a device
    provider it wrote on moved its generation and is read as usual.
    """
    view.reads += len(changed)
    found = report.pool.map(report.get_allocations, changed)
    record = view.record
    for consumer, now in zip(changed, found, strict=True):
        for rp in devices:
            held = record.held.get(rp)
            if held is None:
                continue
            consumers = {c: a for c, a in held.consumers.items() if c != consumer}
            if rp in now.allocations:
                consumers[consumer] = dict(now.allocations[rp])
            if consumers != held.consumers:
                gens = {c: g for c, g in held.consumer_generations.items() if c != consumer}
                record.held[rp] = ProviderAllocations(held.generation, consumers, gens)
        if sharing is not None:
            _follow_shared(view, consumer, now.allocations, sharing)


def _follow_shared(view: AuditView, consumer: str, now: ByProvider, sharing: str) -> None:
    """``consumer``'s part on the sharing provider as it is now (:func:`_refresh_shared`'s rule)."""
    record = view.record
    held = ConsumerAllocations(allocations=now)
    ours = bool(held.on(view.owned)) and sharing in evidence.this_hosts_share(
        held, view.owned, view.tree, {sharing}
    )
    parts = {rp: a for rp, a in record.shared.get(consumer, {}).items() if rp != sharing}
    if sharing in now and ours:
        parts[sharing] = dict(now[sharing])
    if parts:
        record.shared[consumer] = parts
    else:
        record.shared.pop(consumer, None)


def _owned_only(
    view: AuditView, created: Iterable[str], generations: Mapping[str, int]
) -> set[str]:
    """Narrow the record to the owned providers, the ones created this cycle recorded
    empty (they hold nothing yet); returns those."""
    record = view.record
    for rp in set(record.held) - view.owned:
        del record.held[rp]
    new = set(created) & view.owned
    for rp in new:
        record.held[rp] = ProviderAllocations(generations.get(rp), {})
    return new


def _reader(
    report: ReportClient,
    view: AuditView,
    generations: Mapping[str, int],
    prefetched: Mapping[str, ProviderAllocations],
) -> Callable[[str], ProviderAllocations]:
    """Reads a provider's allocations, or takes them from ``prefetched`` when they were
    read at the provider's generation now (each once)."""
    ready = {
        rp: got
        for rp, got in prefetched.items()
        if got.generation is not None and got.generation == generations.get(rp)
    }

    def read(rp: str) -> ProviderAllocations:
        got = ready.pop(rp, None)
        if got is None:
            return _read(report, view, rp)
        view.reads += 1  # read this cycle, while vouching for its generation
        return got

    return read


def _read(report: ReportClient, view: AuditView, rp: str) -> ProviderAllocations:
    view.reads += 1
    return report.provider_allocations(rp)


def _shared_elsewhere(record: ConsumerRecord, sharing: str) -> bool:
    # The sharing provider changed (aggregates moved): read the new one.
    return any(set(parts) - {sharing} for parts in record.shared.values())


def _refresh_shared(report: ReportClient, view: AuditView, sharing: str) -> None:
    """What this node's consumers hold on the sharing provider, as Placement has it.

    A consumer's part there is this host's share only while it holds something on
    the host's own providers (its CPU and memory: :func:`agent.tracker.evidence.this_hosts_share`);
    a listed instance nova moved elsewhere has its pool part go with the other host.
    """
    record = view.record
    ours = set(view.held)
    found = _read(report, view, sharing).consumers
    for consumer in sorted(ours | set(record.shared)):
        parts = {rp: a for rp, a in record.shared.get(consumer, {}).items() if rp != sharing}
        if consumer in found and consumer in ours:
            parts[sharing] = dict(found[consumer])
        if parts:
            record.shared[consumer] = parts
        else:
            record.shared.pop(consumer, None)


def _but_statuses(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "states"}
