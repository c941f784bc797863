"""The removals of the allocation audit: *gone* instances, and consumers that are not instances.

Rules (docs/service.md, "Allocation audit"): a gone instance loses this
host's part of its allocations (its parts on other hosts stay) and stays
*gone* in the record until Placement confirms it; a consumer that is not an
instance is left alone, and removed after ``[compute]
remove_unknown_allocations_after`` only when no evidence says it may be a
migration record (:func:`agent.audit.evidence.keep_unknown`). A migration
record typed ``MIGRATION`` is never touched
(:meth:`agent.placement.consumers.Consumers.remove_from`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from agent.audit import evidence
from agent.audit.audit_result import AuditResult, failed
from agent.audit.audit_view import AuditView
from agent.audit.consumer_record import ConsumerRecord
from agent.model.allocations import INSTANCE, ByProvider, ConsumerAllocations
from agent.placement.errors import GenerationConflict, PlacementError
from agent.placement.report import ReportClient

LOG = logging.getLogger(__name__)


def ours_of(view: AuditView, consumer: str) -> set[str]:
    """The providers whose part of ``consumer`` the agent decides (and its old sharing one)."""
    return view.owned | set(view.record.shared.get(consumer, {}))


class ShareOf:
    """This host's share of one consumer, decided on each read of it
    (:func:`agent.audit.evidence.this_hosts_share`); the last read and answer kept.

    Attributes:
        held: what the consumer held at the last read (``{provider: {rc: amount}}``).
        providers: the providers of the last answer (its part there is removed).
    """

    def __init__(self, view: AuditView, consumer: str) -> None:
        self.view = view
        self.pools = set(view.record.shared.get(consumer, {}))
        self.held: ByProvider = {}
        self.providers: set[str] = set()

    def __call__(self, held: ConsumerAllocations) -> set[str]:
        view = self.view
        self.held = held.allocations
        self.providers = evidence.this_hosts_share(held, view.owned, view.tree, self.pools)
        return set(self.providers)


Guard = tuple[set[evidence.Owner], bool]
"""What keeps a consumer that may be a migration record
(:func:`agent.audit.evidence.migration_guard`)."""


class _Unchanged:
    """The check a gone consumer's removal makes on the read just before its write: why
    it stays after all ("" when it goes), and what that tells the record."""

    def __init__(self, view: AuditView, consumer: str, guard: Guard) -> None:
        self.view = view
        self.consumer = consumer
        self.guard = guard
        self.seen = view.generation_of(consumer)
        self.own = view.record.wrote.holds(consumer, self.seen)
        self.why = ""
        self.ended = False

    def __call__(self, held: ConsumerAllocations) -> bool:
        if self.own and (held.generation != self.seen or held.consumer_type != INSTANCE):
            self.why = "no longer as the agent wrote it: another writer's, kept for the grace"
            self.ended = True
        elif self.seen is not None and held.generation != self.seen:
            self.why = "another writer wrote it since the audit's read: the wait starts again"
            self.ended = True
        elif self.consumer in self.view.record.inherited:
            self.why = evidence.keep_inherited(held, self.guard[1])
        return bool(self.why)

    def apply(self, record: ConsumerRecord) -> None:
        """Tell the record why the consumer stays (its status says so)."""
        if self.ended:
            record.rewritten_by_others([self.consumer])
        record.removal_deferred(self.consumer, self.why)


class Removals:
    """Removes what the audit's rules say must go (module docstring).

    Args:
        report: the Placement façade.
        clock: seconds since the epoch.
    """

    def __init__(
        self,
        report: ReportClient,
        clock: Callable[[], float],
    ) -> None:
        self.report = report
        self.clock = clock

    def remove_gone(
        self, view: AuditView, consumers: Iterable[str], result: AuditResult, guard: Guard
    ) -> set[str]:
        """Remove this host's share of the gone ``consumers`` (decided:
        :class:`~agent.audit.audit_decision.AuditDecision`); each stays *gone*
        until Placement confirms it, a failure is tried again next audit.

        The decision was made on the view's read; the removal goes ahead only while the
        consumer is as that read had it (one read-edit-write, no replay after a
        conflict): the agent's own write still at the generation it produced and typed
        ``INSTANCE`` (nova 34 writes no type: a consumer it re-created after a
        ``DELETE`` is not the agent's, :mod:`agent.audit.authorship`), another
        writer's still at the generation the read saw (a write since starts the wait
        again), one found without a record not kept by the migration-record evidence
        (``guard``, :func:`agent.audit.evidence.keep_inherited`).

        Returns:
            The providers touched.
        """
        record = view.record
        touched: set[str] = set()
        for consumer in consumers:
            here = view.held.get(consumer, {})
            share = ShareOf(view, consumer)
            check = _Unchanged(view, consumer, guard)
            try:
                removed = self.report.remove_allocations_from(consumer, share, check, retries=0)
            except GenerationConflict:
                check.why = "another writer wrote it during the removal"
                removed = False
            except PlacementError as exc:
                failed(f"consumer {consumer}: allocations not removed", exc, result)
                record.removal_failed(consumer)
                continue
            if check.why:
                check.apply(record)
                continue
            view.own.removed(consumer, share.held, share.providers)
            if not removed and here:
                # Still held here, yet nothing was removed: a migration record.
                record.found_migration(consumer)
                result.unknown.append(consumer)
                continue
            record.removal_confirmed(consumer)
            if removed:
                result.removed.append(consumer)
                LOG.info("instance %s: gone; its allocations on this host removed", consumer)
            touched |= set(here)
            view.save()
        return touched

    def remove_unknown(
        self,
        view: AuditView,
        consumers: Iterable[str],
        guard: Guard,
        result: AuditResult,
    ) -> set[str]:
        """Remove consumers here that are not instances, past the grace (decided), unless
        the evidence read with each keeps it (:func:`agent.audit.evidence.keep_unknown`).

        Args:
            guard: :func:`agent.audit.evidence.migration_guard` of the listing.

        Returns:
            The providers touched.
        """
        record = view.record
        protected, all_kept = guard
        touched: set[str] = set()
        for consumer in consumers:
            why: list[str] = []

            def keep(held: ConsumerAllocations, why: list[str] = why) -> bool:
                why[:] = [evidence.keep_unknown(held, protected, all_kept)]
                return bool(why[0])

            ours = ShareOf(view, consumer)
            try:
                removed = self.report.remove_allocations_from(consumer, ours, keep)
            except PlacementError as exc:
                failed(f"consumer {consumer}: allocations not removed", exc, result)
                continue
            if not removed:
                result.unknown.append(consumer)
                record.left_alone(consumer, why[0] if why else "")
                continue
            view.own.removed(consumer, ours.held, ours.providers)
            first = record.first_seen_unknown(consumer, self.clock())
            record.removal_confirmed(consumer)
            result.removed.append(consumer)
            LOG.info(
                "consumer %s: not an instance of this host for %d s; its allocations here removed",
                consumer,
                int(self.clock() - first),
            )
            touched |= set(view.held.get(consumer, {}))
        return touched
