"""The allocation audit: what every instance should hold against what Placement holds.

Rules (resource-providers-allocations.txt; docs/service.md "Allocation audit"):

- An instance of this host gets the allocation the driver's layout gives it
  (:func:`agent.shape.planning.plan_allocations`). A missing or different one is
  written with the consumer's generation. Parts it holds on providers that
  are not this agent's (outside the tree, or a child without the owner
  trait, e.g. a network agent's bandwidth provider) are kept as they are
  (:func:`agent.model.allocations.merge_ours`).
- An instance that was on this host and is gone loses this host's part of
  its allocations (its allocations elsewhere stay). It stays known until
  the removal is confirmed, so a failed removal is tried again.
- A consumer this agent never saw as an instance (an instance being built,
  another service) is left alone, unless ``[compute]
  remove_unknown_allocations_after`` is set and that many seconds passed
  since it was first seen. A migration record (consumer type ``MIGRATION``)
  is always left alone.

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
in the state directory (``consumers.json``), so a restarted agent reads the
same set and heals what changed while it was down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from agent.model.allocations import (
    ByProvider,
    ConsumerAllocations,
    ProviderAllocations,
    by_consumer,
    clean_by_provider,
    merge_ours,
)
from agent.placement.errors import PlacementError
from agent.placement.report import ReportClient
from agent.state.store import StateStore

LOG = logging.getLogger(__name__)


@dataclass
class AuditRecord:
    """What the audit remembers about one node between cycles (``state_path``).

    Attributes:
        instances: consumer UUIDs of the instances seen on the node, and of
            gone instances whose removal is not yet confirmed.
        unknown: consumer UUID -> when first seen (seconds since the epoch)
            for consumers on the node's providers that are not instances.
        held: the allocations on each provider of the node as last read
            (with the provider generation of that read; None forces a read).
        shared: ``{consumer: {provider: {rc: amount}}}`` each instance holds
            on providers outside the tree (the shared-storage provider), as
            last read or written.
        migrations: unknown consumers found to be migration records (never
            removed, not asked about again while they hold allocations here).
    """

    instances: set[str] = field(default_factory=set)
    unknown: dict[str, float] = field(default_factory=dict)
    held: dict[str, ProviderAllocations] = field(default_factory=dict)
    shared: dict[str, ByProvider] = field(default_factory=dict)
    migrations: set[str] = field(default_factory=set)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None) -> AuditRecord:
        """Parse a stored record; anything malformed gives an empty record (re-read)."""
        if not doc:
            return cls()
        try:
            generations = {str(rp): int(g) for rp, g in doc["generations"].items()}
            return cls(
                instances={str(c) for c in doc["instances"]},
                unknown={str(c): float(t) for c, t in doc["unknown"].items()},
                held={
                    str(rp): ProviderAllocations(
                        generations.get(rp), dict(clean_by_provider(consumers))
                    )
                    for rp, consumers in doc["held"].items()
                },
                shared={str(c): clean_by_provider(a) for c, a in doc.get("shared", {}).items()},
                migrations={str(c) for c in doc.get("migrations", [])},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            LOG.warning("allocation audit state is unusable (%s); reading it from Placement", exc)
            return cls()

    def to_json(self) -> dict[str, Any]:
        """The record as stored in ``consumers.json``."""
        return {
            "instances": sorted(self.instances),
            "unknown": dict(sorted(self.unknown.items())),
            "held": {rp: pa.consumers for rp, pa in sorted(self.held.items())},
            "generations": {
                rp: pa.generation
                for rp, pa in sorted(self.held.items())
                if pa.generation is not None
            },
            "shared": dict(sorted(self.shared.items())),
            "migrations": sorted(self.migrations),
        }

    def by_consumer(self, providers: Iterable[str]) -> dict[str, ByProvider]:
        """``{consumer: {provider: {rc: amount}}}`` over ``providers``."""
        wanted = set(providers)
        return by_consumer({rp: pa for rp, pa in self.held.items() if rp in wanted})


@dataclass
class AuditView:
    """One node's allocations as read at the start of an audit.

    Attributes:
        nodename: the compute node.
        record: the audit record, refreshed from Placement.
        owned: the providers of the node the agent owns.
        stored: the record as it was stored (to write only a changed one).
        reads: providers whose allocations were read.
    """

    nodename: str
    record: AuditRecord
    owned: set[str]
    stored: dict[str, Any]
    reads: int = 0

    @cached_property
    def held(self) -> dict[str, ByProvider]:
        """``{consumer: {provider: {rc: amount}}}`` on the node's owned providers.

        Computed once, after :meth:`AllocationAudit.refresh` has read: the
        planner and :meth:`AllocationAudit.reconcile` both use it.
        """
        return self.record.by_consumer(self.owned)


@dataclass
class AuditResult:
    """What one audit of one node did.

    Attributes:
        written: consumers whose allocations were written.
        removed: consumers whose allocations on this host were removed.
        unknown: consumers left alone because the agent does not know them.
        reads: providers whose allocations were read from Placement.
        errors: one line per allocation that could not be written.
    """

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    reads: int = 0
    errors: list[str] = field(default_factory=list)


class AllocationAudit:
    """Keeps the allocations of one agent's instances right, node by node.

    Args:
        report: the Placement façade.
        state: where the per-node :class:`AuditRecord` is kept.
        remove_unknown_after: seconds (``[compute] remove_unknown_allocations_after``);
            0 never removes unknown consumers.
        clock: seconds since the epoch (tests pass their own).
    """

    def __init__(
        self,
        report: ReportClient,
        state: StateStore,
        remove_unknown_after: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.report = report
        self.state = state
        self.remove_unknown_after = remove_unknown_after
        self.clock = clock

    def record(self, nodename: str) -> AuditRecord:
        """The stored record of ``nodename`` (empty when there is none)."""
        return AuditRecord.from_json(self.state.consumers(nodename))

    def save(self, nodename: str, record: AuditRecord) -> None:
        """Store ``record`` for ``nodename``."""
        self.state.set_consumers(nodename, record.to_json())

    # -- reading -----------------------------------------------------------------

    def refresh(
        self,
        nodename: str,
        owned: set[str],
        cpu_providers: set[str],
        sharing: str | None = None,
    ) -> AuditView:
        """Read what the module docstring says must be read this cycle.

        Args:
            nodename: the compute node (its tree was listed this cycle).
            owned: UUIDs of the providers of the node the agent owns.
            cpu_providers: the owned providers that carry VCPU, PCPU or
                MEMORY_MB inventory (read every cycle).
            sharing: the shared-storage provider DISK_GB goes to, if any.

        Returns:
            An :class:`AuditView` for :meth:`reconcile` and for planning.

        Raises:
            PlacementUnavailable, PlacementError: a read failed (the cycle fails).
        """
        stored = self.state.consumers(nodename) or {}
        record = AuditRecord.from_json(stored)
        view = AuditView(nodename, record, set(owned), stored)
        generations = self.report.provider_generations(nodename)
        for rp in set(record.held) - view.owned:
            del record.held[rp]
        moved = False
        for rp in sorted(cpu_providers & view.owned):
            fresh = self._read(view, rp)
            old = record.held.get(rp)
            moved |= old is None or old != fresh
            record.held[rp] = fresh
        for rp in sorted(view.owned - cpu_providers):
            old = record.held.get(rp)
            if moved or old is None or old.generation != generations.get(rp):
                record.held[rp] = self._read(view, rp)
        if sharing is not None and (moved or self._shared_elsewhere(record, sharing)):
            self._refresh_shared(view, sharing)
        return view

    def _read(self, view: AuditView, rp: str) -> ProviderAllocations:
        view.reads += 1
        return self.report.provider_allocations(rp)

    @staticmethod
    def _shared_elsewhere(record: AuditRecord, sharing: str) -> bool:
        # The sharing provider changed (aggregates moved): read the new one.
        return any(set(parts) - {sharing} for parts in record.shared.values())

    def _refresh_shared(self, view: AuditView, sharing: str) -> None:
        """What this node's consumers hold on the sharing provider, as Placement has it."""
        record = view.record
        ours = record.instances | set(view.held)
        found = self._read(view, sharing).consumers
        for consumer in sorted(ours | set(record.shared)):
            parts = {rp: a for rp, a in record.shared.get(consumer, {}).items() if rp != sharing}
            if consumer in found and consumer in ours:
                parts[sharing] = dict(found[consumer])
            if parts:
                record.shared[consumer] = parts
            else:
                record.shared.pop(consumer, None)

    # -- writing -----------------------------------------------------------------

    def reconcile(
        self,
        view: AuditView,
        expected: Mapping[str, ConsumerAllocations],
        instances: set[str],
        keep: set[str] | frozenset[str] = frozenset(),
    ) -> AuditResult:
        """Write what differs between ``expected`` and ``view``; remove what is gone.

        Args:
            view: from :meth:`refresh` of this cycle.
            expected: ``{consumer: ConsumerAllocations}`` from the driver
                (``ComputeDriver.expected_allocations``).
            instances: every instance UUID the driver lists on the node
                (including those that use nothing).
            keep: owned providers whose existing allocations stay as they are
                (hardware that is gone while instances still use it).

        Returns:
            An :class:`AuditResult`; failures of single consumers are in
            ``errors`` and do not stop the audit.

        Raises:
            PlacementUnavailable: Placement cannot be reached (the cycle fails).
        """
        result = AuditResult(reads=view.reads)
        record = view.record
        touched: set[str] = set()
        held = view.held
        for consumer, want in expected.items():
            touched |= self._heal(view, consumer, want, held.get(consumer, {}), keep, result)
        failed: set[str] = set()
        for consumer in sorted(set(held) | (record.instances - instances)):
            if consumer not in instances:
                touched |= self._remove(view, consumer, instances, held, result, failed)
        record.instances = set(instances) | failed
        record.shared = {c: a for c, a in record.shared.items() if c in record.instances}
        record.unknown = {c: t for c, t in record.unknown.items() if c in held}
        record.migrations &= set(held)
        # Our own writes moved these generations: read them again next time.
        for rp in touched & set(record.held):
            record.held[rp] = ProviderAllocations(None, record.held[rp].consumers)
        if record.to_json() != view.stored:  # a steady host writes nothing
            self.save(view.nodename, record)
        return result

    def _heal(
        self,
        view: AuditView,
        consumer: str,
        want: ConsumerAllocations,
        have: ByProvider,
        keep: set[str] | frozenset[str],
        result: AuditResult,
    ) -> set[str]:
        """Write ``want`` for one instance unless Placement holds it; the providers touched."""
        record = view.record
        managed = view.owned - set(keep)
        outside = want.providers - view.owned
        want_shared = want.on(outside)
        have_shared = record.shared.get(consumer, {})
        have_local = {rp: a for rp, a in have.items() if rp in managed}
        if want.on(managed) == have_local and want_shared == have_shared:
            return set()
        try:
            # What it held on a previous sharing provider is replaced too.
            self.write(consumer, want, view.owned | set(have_shared), keep)
        except PlacementError as exc:
            line = f"instance {consumer}: allocation not written: {exc}"
            LOG.error(line)
            result.errors.append(line)
            return set()
        result.written.append(consumer)
        if want_shared:
            record.shared[consumer] = want_shared
        else:
            record.shared.pop(consumer, None)
        LOG.info("instance %s: allocation written (%s)", consumer, want.on(managed))
        return set(have) | want.providers

    def _remove(
        self,
        view: AuditView,
        consumer: str,
        instances: set[str],
        held: Mapping[str, ByProvider],
        result: AuditResult,
        failed: set[str],
    ) -> set[str]:
        """Remove this host's part of a gone instance or an expired unknown consumer."""
        record = view.record
        if consumer in record.instances:
            reason = "its instance is gone from this host"
        else:
            now = self.clock()
            first = record.unknown.setdefault(consumer, now)
            grace = self.remove_unknown_after
            if consumer in record.migrations or not grace or now - first < grace:
                result.unknown.append(consumer)
                return set()
            reason = f"not an instance of this host for {int(now - first)} s"
        if consumer not in held and consumer not in record.shared:
            return set()
        ours = view.owned | set(record.shared.get(consumer, {}))
        try:
            removed = self.report.remove_allocations_from(consumer, ours)
        except PlacementError as exc:
            line = f"consumer {consumer}: allocations not removed: {exc}"
            LOG.error(line)
            result.errors.append(line)
            if consumer in record.instances:
                failed.add(consumer)  # tried again next cycle
            return set()
        if not removed and consumer in held:
            # Still held here, yet nothing was removed: a migration record.
            record.migrations.add(consumer)
            result.unknown.append(consumer)
            LOG.info("consumer %s is a migration: its allocations here stay", consumer)
            return set()
        record.unknown.pop(consumer, None)
        record.shared.pop(consumer, None)
        result.removed.append(consumer)
        LOG.info("consumer %s: allocations on this host removed (%s)", consumer, reason)
        return set(held.get(consumer, {}))

    def write(
        self,
        consumer: str,
        want: ConsumerAllocations,
        ours: set[str],
        keep: Iterable[str] = (),
    ) -> None:
        """Write ``want`` on this host's providers, keeping what the consumer holds elsewhere.

        The one write path of claims and the audit: a read-edit-write with
        the consumer generation (:meth:`ReportClient.edit_allocations`) of
        :func:`~agent.model.allocations.merge_ours`.

        Args:
            consumer: the consumer UUID.
            want: its allocations on this host's providers (and the sharing one).
            ours: the providers whose part the agent decides.
            keep: providers in ``ours`` whose part stays as held.

        Raises:
            PlacementError: Placement refused the write (e.g. it does not fit).
        """
        kept = set(keep)
        self.report.edit_allocations(consumer, lambda held: merge_ours(held, want, ours, kept))

    # -- claims --------------------------------------------------------------------

    def forget_instance(self, nodename: str, consumer: str) -> set[str]:
        """Drop ``consumer`` from the known instances (its claim is being given back).

        Returns:
            The providers outside the tree it was given allocations on (the
            sharing provider), to clear along with this host's own.
        """
        record = self.record(nodename)
        shared = set(record.shared.pop(consumer, {}))
        record.instances.discard(consumer)
        self.save(nodename, record)
        return shared

    def add_instance(self, nodename: str, consumer: str, shared: ByProvider | None = None) -> None:
        """Count ``consumer`` as an instance of ``nodename`` (a claim).

        Args:
            shared: what the claim allocates on providers outside the tree.
        """
        record = self.record(nodename)
        record.instances.add(consumer)
        record.unknown.pop(consumer, None)
        if shared:
            record.shared[consumer] = shared
        self.save(nodename, record)
