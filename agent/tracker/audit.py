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

What is read each cycle, and why, is :mod:`agent.tracker.audit_read`'s
(:func:`~agent.tracker.audit_read.refresh`); this module writes and removes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from agent.model.allocations import (
    ByProvider,
    ConsumerAllocations,
    ProviderAllocations,
    merge_ours,
)
from agent.placement.errors import PlacementError
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.audit_read import AuditRecord, AuditView
from agent.tracker.own_writes import OwnWrites

LOG = logging.getLogger(__name__)


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
            view: from :func:`agent.tracker.audit_read.refresh` of this cycle.
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
        # Held nowhere we know of: believed new, written many at a time.
        new = {
            c: w
            for c, w in expected.items()
            if w.allocations and not held.get(c) and c not in record.shared
        }
        touched |= _write_new(self, view, new, keep, result)
        for consumer, want in expected.items():
            if consumer not in new:
                touched |= self._heal(view, consumer, want, held.get(consumer, {}), keep, result)
        failed: set[str] = set()
        for consumer in sorted(set(held) | (record.instances - instances)):
            if consumer not in instances:
                touched |= self._remove(view, consumer, instances, held, result, failed)
        record.instances = set(instances) | failed
        record.shared = {c: a for c, a in record.shared.items() if c in record.instances}
        record.unknown = {c: t for c, t in record.unknown.items() if c in held}
        record.migrations &= set(held)
        # Our own writes moved these generations: read them again next time,
        # unless one listing proves nobody else wrote them (agent.tracker.own_writes).
        proven = view.own.confirm(self.report, view.nodename, record)
        for rp in (touched & set(record.held)) - proven:
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
            self.write(consumer, want, view.owned | set(have_shared), keep, view.own)
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
            view.own.removed(consumer, ours)
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
        own: OwnWrites | None = None,
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
            own: where a cycle's audit records its own writes (claims pass none).

        Raises:
            PlacementError: Placement refused the write (e.g. it does not fit).
        """
        kept = set(keep)
        sent: list[ConsumerAllocations] = []

        def edit(held: ConsumerAllocations) -> ConsumerAllocations:
            sent[:] = [merge_ours(held, want, ours, kept)]  # the last try is the one written
            return sent[0]

        if self.report.edit_allocations(consumer, edit) and sent and own is not None:
            own.put(consumer, sent[0].allocations)

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


def _write_new(
    audit: AllocationAudit,
    view: AuditView,
    new: Mapping[str, ConsumerAllocations],
    keep: set[str] | frozenset[str],
    result: AuditResult,
) -> set[str]:
    """Write consumers that hold nothing here in batches; the providers touched.

    A batch Placement refuses (one of them exists after all, e.g. a
    migration's consumer on its source host; or one does not fit) is
    written consumer by consumer by :meth:`_heal`, which merges.
    """
    if not new:
        return set()
    kept = set(keep)
    wanted = {c: w.with_allocations(w.on(w.providers - kept)) for c, w in new.items()}
    batches, refused = audit.report.write_new_allocations(wanted)
    touched: set[str] = set()
    for batch in batches:
        view.own.posted({c: wanted[c].allocations for c in batch})
        for consumer in batch:
            want = wanted[consumer]
            shared = want.on(want.providers - view.owned)
            if shared:
                view.record.shared[consumer] = shared
            result.written.append(consumer)
            touched |= want.providers
        LOG.info("%d instance(s): allocations written together", len(batch))
    for consumer in refused:
        touched |= audit._heal(view, consumer, new[consumer], {}, keep, result)
    return touched
