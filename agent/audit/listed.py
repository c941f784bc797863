"""The rules for the instances the driver lists: heal what is missing, report drift,
write nothing for what nova is moving (docs/service.md, "Allocation audit").

*instance here*: a missing allocation is written, many per ``POST
/allocations`` with a null consumer generation (Placement refuses it for any
consumer it knows, so nothing is replaced blindly), a refused batch one by
one by a read-edit-write that keeps every part on providers that are not
the agent's; parts of the plan it holds nothing of are added; an allocation
that differs otherwise is drift, rewritten only with ``[compute]
rewrite_differing_allocations``. *moving* (:mod:`agent.audit.evidence`):
nothing is written. The targeted updates of events use the same rules
(:mod:`agent.tracker.targeted`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from agent.audit import evidence
from agent.audit.audit_decision import Alone, without_kept
from agent.audit.audit_result import AuditDraft, AuditResult, BulkWrites, failed
from agent.audit.audit_view import AuditView
from agent.audit.consumer_record import ConsumerRecord
from agent.audit.removal import ours_of
from agent.model.allocations import ByProvider, ConsumerAllocations, merge_ours
from agent.placement.errors import GenerationConflict, PlacementError
from agent.placement.report import ReportClient

LOG = logging.getLogger(__name__)


class ListedInstances:
    """Applies the rules of the module docstring to the instances of one audit.

    Args:
        report: the Placement façade.
    """

    def __init__(
        self,
        report: ReportClient,
    ) -> None:
        self.report = report

    def apply(self, draft: AuditDraft, bulk: BulkWrites) -> list[str]:
        """Record what the bulk writes did, then read and write alone the instances the
        decision names (:meth:`settle_one`); the record is saved after each step.

        Returns:
            The consumers to decide again on a new read: those of a batch refused (one of
            them exists after all: a moving instance, an empty consumer; one does not fit)
            and those whose write conflicted or found them changed since the decision
            (issue 39: a retry is a new decision, never a replay of the old edit).

        Raises:
            Exception: ``bulk.error``, after the written batches are recorded
                (the node's audit stops there, as when its own write failed).
        """
        view, decision = draft.view, draft.decision
        self.record_batches(view, decision.bulk, bulk.written, draft.result, draft.touched)
        if bulk.error is not None:
            raise bulk.error
        again = sorted(bulk.refused)
        for consumer, why in decision.alone.items():
            want = draft.listing.expected[consumer]
            settled = self.settle_one(view, consumer, want, draft.listing.keep, draft.result, why)
            if settled is None:
                again.append(consumer)
            else:
                draft.touched |= settled
        view.save()
        return again

    def settle_one(
        self,
        view: AuditView,
        consumer: str,
        want: ConsumerAllocations,
        keep: Iterable[str],
        result: AuditResult,
        why: Alone,
    ) -> set[str] | None:
        """Carry out the decision ``why`` for one listed instance: one read-edit-write.

        The decision was made on the view's read of the node; the write goes ahead
        only while the consumer is as that read had it here (and a write with its
        consumer generation is not refused): *moving* on this read writes nothing;
        :attr:`~Alone.HEAL` merges the plan in; :attr:`~Alone.ADD` adds the plan's parts
        it holds nothing of; :attr:`~Alone.REWRITE` (a drift, the operator asked) writes
        the plan. Returns the providers touched, or None when the consumer changed
        since the decision (a generation conflict, or its part here moved): the
        caller decides again on a new read.
        """
        record = view.record
        edit = _Edit(view, consumer, want, keep, why)
        try:
            generation = self.report.edit_allocations(consumer, edit, retries=0)
        except GenerationConflict:
            return None
        except PlacementError as exc:
            failed(f"instance {consumer}: allocation not written", exc, result)
            return set()
        if edit.stale:
            return None
        if edit.moving:
            self.moving(record, consumer, edit.moving, result)
            return set()
        if generation is None or edit.sent is None:
            record.already_held(consumer, edit.placed)
            return set()
        record.written(consumer, edit.placed, generation)
        result.written.append(consumer)
        view.own.put(consumer, edit.sent.allocations, generation)
        LOG.info("instance %s: allocation written (%s)", consumer, want.on(view.owned))
        view.save()
        return set(want.providers) | set(view.held.get(consumer, {}))

    @staticmethod
    def moving(record: ConsumerRecord, consumer: str, why: str, result: AuditResult) -> None:
        """``consumer`` is found *moving* (logged when it was not already)."""
        if record.found_moving(consumer, why):
            LOG.info("instance %s: moving; nothing written (%s)", consumer, why)
        result.moving.append(consumer)

    def write_missing(
        self,
        view: AuditView,
        new: Mapping[str, ConsumerAllocations],
        keep: set[str] | frozenset[str],
        result: AuditResult,
        touched: set[str],
    ) -> list[str]:
        """Write consumers that hold nothing here in batches; returns those refused.

        A batch Placement refuses with any 4xx (one of them exists after all:
        a moving instance, an empty consumer; one does not fit; a provider is
        gone) is decided again on a new read, consumer by consumer (the caller).
        """
        if not new:
            return []
        wanted = without_kept(new, keep)
        batches, refused = self.report.write_new_allocations(wanted)
        self.record_batches(view, wanted, batches, result, touched)
        return sorted(refused)

    def record_batches(
        self,
        view: AuditView,
        wanted: Mapping[str, ConsumerAllocations],
        batches: Iterable[list[str]],
        result: AuditResult,
        touched: set[str],
    ) -> None:
        """Record consumers written in bulk, saving the record after each request's part.

        Args:
            wanted: ``{consumer: what was written}``.
            batches: this node's consumers of each ``POST /allocations``
                answered with success (one list per request: each moved the
                generation of each of its providers by one, :mod:`agent.placement.own_writes`).
            touched: gets the providers written on.
        """
        for batch in batches:
            view.own.posted({c: wanted[c].allocations for c in batch})
            for consumer in batch:
                want = wanted[consumer]
                view.record.written(consumer, want.without(view.owned), 1, bulk=True)
                result.written.append(consumer)
                touched |= want.providers
            LOG.info("%d instance(s): allocations written together", len(batch))
            view.save()


class _Edit:
    """One listed instance's read-edit-write, deciding on the consumer as read now
    (:meth:`ListedInstances.settle_one`); what it found is kept for the caller.

    Attributes:
        stale: the consumer's part here is not what the decision was made on.
        moving: why it is moving on this read ("" when it is not).
        placed: its part outside the tree as planned on this read.
        sent: what was written, None when nothing was.
    """

    def __init__(
        self,
        view: AuditView,
        consumer: str,
        want: ConsumerAllocations,
        keep: Iterable[str],
        why: Alone,
    ) -> None:
        self.view = view
        self.consumer = consumer
        self.want = want
        self.keep = set(keep)
        self.why = why
        self.basis = view.held.get(consumer, {})
        self.stale = False
        self.moving = ""
        self.placed: ByProvider = want.without(view.owned)
        self.sent: ConsumerAllocations | None = None

    def __call__(self, held: ConsumerAllocations) -> ConsumerAllocations | None:
        view = self.view
        self.sent = None
        if held.on(view.owned) != self.basis:
            self.stale = True  # another writer since the audit's read: decide again
            return None
        self.moving = evidence.moving_reason(held, view.tree, view.owned)
        plan = _on_held_pools(self.want, held, view.tree)
        self.placed = plan.without(view.owned)
        have = {**held.on(view.owned - self.keep), **held.on(set(self.placed))}
        add = self.why is Alone.ADD and evidence.only_missing(plan.allocations, have)
        if self.moving or (have and self.why is not Alone.REWRITE and not add):
            return None
        ours = ours_of(view, self.consumer) | set(self.placed)
        self.sent = merge_ours(held, plan, ours, self.keep, produces=view.produces)
        return self.sent


def _on_held_pools(
    want: ConsumerAllocations, held: ConsumerAllocations, tree: Iterable[str]
) -> ConsumerAllocations:
    """``want`` with its pool parts on the pools ``held`` has them on
    (:func:`agent.audit.evidence.on_held_pools`)."""
    nodes = frozenset(tree)
    return want.with_allocations(
        evidence.on_held_pools(want.allocations, held.without(nodes), nodes)
    )
