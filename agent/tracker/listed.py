"""The rules for the instances the driver lists: heal what is missing, report drift,
write nothing for what nova is moving (docs/service.md, "Allocation audit").

*instance here*: a missing allocation is written, many per ``POST
/allocations`` with a null consumer generation (Placement refuses it for any
consumer it knows, so nothing is replaced blindly), a refused batch one by
one by a read-edit-write that keeps every part on providers that are not
the agent's; parts of the plan it holds nothing of are added; an allocation
that differs otherwise is drift, rewritten only with ``[compute]
rewrite_differing_allocations``. *moving* (:mod:`agent.tracker.evidence`):
nothing is written. The targeted updates of events use the same rules
(:mod:`agent.tracker.targeted`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from agent.model.allocations import ByProvider, ConsumerAllocations, merge_ours
from agent.placement.errors import PlacementError
from agent.placement.report import ReportClient
from agent.tracker import evidence
from agent.tracker.audit_decision import Alone, without_kept
from agent.tracker.audit_read import AuditView
from agent.tracker.audit_result import AuditDraft, AuditResult, BulkWrites, failed
from agent.tracker.consumer_record import ConsumerRecord
from agent.tracker.removal import ours_of

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

    def apply(self, draft: AuditDraft, bulk: BulkWrites) -> None:
        """Record what the bulk writes did, then read and write alone the instances the
        decision names and the refused (:meth:`settle_one`); the record is saved after
        each step.

        Raises:
            Exception: ``bulk.error``, after the written batches are recorded
                (the node's audit stops there, as when its own write failed).
        """
        view, decision = draft.view, draft.decision
        self.record_batches(view, decision.bulk, bulk.written, draft.result, draft.touched)
        if bulk.error is not None:
            raise bulk.error
        alone = [*decision.alone.items(), *((c, None) for c in sorted(bulk.refused))]
        for consumer, why in alone:
            want = draft.listing.expected[consumer]
            draft.touched |= self.settle_one(
                view,
                consumer,
                want,
                draft.listing.keep,
                draft.result,
                rewrite=why is Alone.REWRITE,
                add=why is Alone.ADD,
            )
        view.save()

    def settle_one(
        self,
        view: AuditView,
        consumer: str,
        want: ConsumerAllocations,
        keep: Iterable[str],
        result: AuditResult,
        rewrite: bool = False,
        add: bool = False,
    ) -> set[str]:
        """Read one listed instance's consumer and write its plan if that is the rule.

        One read-edit-write (:meth:`ReportClient.edit_allocations`): *moving*
        writes nothing; holding nothing here (or nowhere) is healed by the
        merging write; holding something here that differs is drift, written
        only when ``rewrite``, or with ``add`` when what it holds here is all
        in the plan (the missing parts are added). Returns the providers touched.
        """
        record = view.record
        decided: list[str] = []
        sent: list[ConsumerAllocations] = []
        placed: list[ByProvider] = [want.without(view.owned)]
        managed = view.owned - set(keep)

        def edit(held: ConsumerAllocations) -> ConsumerAllocations | None:
            decided[:] = [evidence.moving_reason(held, view.tree, view.owned)]
            plan = _on_held_pools(want, held, view.tree)
            placed[:] = [plan.without(view.owned)]
            have = {**held.on(managed), **held.on(set(placed[0]))}
            missing_only = add and evidence.only_missing(plan.allocations, have)
            if decided[0] or (have and not rewrite and not missing_only):
                sent.clear()
                return None
            ours = ours_of(view, consumer) | set(placed[0])
            sent[:] = [merge_ours(held, plan, ours, keep, produces=view.produces)]
            return sent[0]

        try:
            wrote = self.report.edit_allocations(consumer, edit)
        except PlacementError as exc:
            failed(f"instance {consumer}: allocation not written", exc, result)
            return set()
        if decided and decided[0]:
            self.moving(record, consumer, decided[0], result)
            return set()
        if not wrote or not sent:
            record.already_held(consumer, placed[0])
            return set()
        record.written(consumer, placed[0])
        result.written.append(consumer)
        view.own.put(consumer, sent[0].allocations)
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
        gone) is left for :meth:`settle_one`, consumer by consumer.
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
                view.record.written(consumer, want.without(view.owned), bulk=True)
                result.written.append(consumer)
                touched |= want.providers
            LOG.info("%d instance(s): allocations written together", len(batch))
            view.save()


def _on_held_pools(
    want: ConsumerAllocations, held: ConsumerAllocations, tree: Iterable[str]
) -> ConsumerAllocations:
    """``want`` with its pool parts on the pools ``held`` has them on
    (:func:`agent.tracker.evidence.on_held_pools`)."""
    nodes = frozenset(tree)
    return want.with_allocations(
        evidence.on_held_pools(want.allocations, held.without(nodes), nodes)
    )
