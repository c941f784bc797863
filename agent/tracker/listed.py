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
from collections.abc import Callable, Iterable, Mapping

from agent.model.allocations import ByProvider, ConsumerAllocations, merge_ours
from agent.placement.errors import PlacementError
from agent.placement.report import ReportClient
from agent.tracker import evidence
from agent.tracker.audit_read import AuditView
from agent.tracker.audit_result import AuditDraft, AuditResult, AuditRules, BulkWrites, failed
from agent.tracker.consumer_record import ConsumerRecord
from agent.tracker.removal import ours_of

LOG = logging.getLogger(__name__)


class ListedInstances:
    """Applies the rules of the module docstring to the instances of one audit.

    Args:
        report: the Placement façade.
        rules: the operator's choices.
        checkpoint: saves a view's record when it changed (after each batch of writes).
    """

    def __init__(
        self,
        report: ReportClient,
        rules: AuditRules,
        checkpoint: Callable[[AuditView], None],
    ) -> None:
        self.report = report
        self.rules = rules
        self.checkpoint = checkpoint

    def decide(self, draft: AuditDraft) -> None:
        """Listed instances: in step, drift (written alone when that is the rule), moving.

        Fills ``draft.new`` with those holding nothing here (to write in bulk,
        kept providers left out) and ``draft.one_by_one`` with those last seen
        moving (read alone: still moving?); :meth:`apply` ends it.
        """
        view = draft.view
        record, held = view.record, view.held
        new: dict[str, ConsumerAllocations] = {}
        one_by_one: list[str] = []
        for consumer in sorted(draft.present - draft.unreadable):
            want = draft.expected.get(consumer)
            if held.get(consumer) or consumer in record.shared:
                draft.touched |= self._here(
                    view, consumer, want, held.get(consumer, {}), draft.keep, draft.result
                )
            elif want is None or not want.allocations:
                record.uses_nothing(consumer)
            elif consumer in record.moving:
                one_by_one.append(consumer)
            else:
                new[consumer] = want
        moves = self.pending_moves(
            view, draft.present, {**new, **{c: draft.expected[c] for c in one_by_one}}
        )
        for consumer, why in moves.items():
            new.pop(consumer, None)
            if consumer in one_by_one:
                one_by_one.remove(consumer)
            self.moving(record, consumer, why, draft.result)
        draft.new = _without_kept(new, draft.keep)
        draft.one_by_one = one_by_one

    def apply(self, draft: AuditDraft, bulk: BulkWrites) -> None:
        """Record what the bulk writes did, then read and write alone the refused and the
        once moving (:meth:`settle_one`); the record is saved after each step.

        Raises:
            Exception: ``bulk.error``, after the written batches are recorded
                (the node's audit stops there, as when its own write failed).
        """
        view = draft.view
        self.record_batches(view, draft.new, bulk.written, draft.result, draft.touched)
        if bulk.error is not None:
            raise bulk.error
        for consumer in draft.one_by_one + sorted(bulk.refused):
            want = draft.expected[consumer]
            draft.touched |= self.settle_one(view, consumer, want, draft.keep, draft.result)
        self.checkpoint(view)

    def pending_moves(
        self,
        view: AuditView,
        present: set[str],
        missing: Mapping[str, ConsumerAllocations],
    ) -> dict[str, str]:
        """Instances holding nothing here whose share here nova holds on a migration record.

        Between the conductor's ``replace_allocation_with_migration`` and the
        scheduler's claim on the destination (and when a destination fails
        its checks), the instance's consumer holds nothing anywhere while a
        consumer without type, of the instance's project and user, holds
        exactly its share here: healing it would make nova's claim merge
        the source share into the destination's (``claim_resources``). A
        record matches what the instance held here at the last audit (or its
        plan), and one record explains one instance, by evidence
        (:func:`agent.tracker.evidence.assign_records`). One ``GET
        /allocations/{consumer}`` per record assigned.

        Returns:
            ``{instance: why}`` for those found (they are *moving*).
        """
        others = {
            c: parts
            for c, parts in view.held.items()
            if c not in present and c not in view.record.claims
        }
        before = view.before
        contenders: dict[str, list[str]] = {}
        for consumer, want in missing.items():
            shares = [want.on(view.owned), before.get(consumer)]
            # Last seen moving: the records it may be are those unchanged since then.
            was_moving = consumer in view.record.moving
            contenders[consumer] = sorted(
                c
                for c, parts in others.items()
                if parts in shares or (was_moving and before.get(c) == parts)
            )
        found: dict[str, str] = {}
        owners: dict[str, ConsumerAllocations] = {}
        for consumer, other in evidence.assign_records(
            contenders, view.record.moving, before
        ).items():
            if other not in owners:
                owners[other] = self.report.get_allocations(other)
            why = evidence.holds_its_share(owners[other], missing[consumer], other)
            if why:
                found[consumer] = why
        return found

    def _here(
        self,
        view: AuditView,
        consumer: str,
        want: ConsumerAllocations | None,
        have: ByProvider,
        keep: set[str] | frozenset[str],
        result: AuditResult,
    ) -> set[str]:
        """An instance that holds something here: in step, or drift (module docstring)."""
        record = view.record
        want = want or ConsumerAllocations()
        managed = view.owned - set(keep)
        want_here = {**want.on(managed), **want.without(view.owned)}
        have_here = {rp: a for rp, a in have.items() if rp in managed}
        have_here.update(record.shared.get(consumer, {}))
        have_here = evidence.planned_part(have_here, view.owned, view.produces)
        want_here = evidence.on_held_pools(want_here, have_here, view.tree)
        line = evidence.drift_line(want_here, have_here)
        if not line:
            record.holds_plan(consumer)
            return set()
        if evidence.only_missing(want_here, have_here):
            # Parts of the plan it holds nothing of (a device's, the sharing
            # provider's): added, nothing it holds is changed.
            return self.settle_one(view, consumer, want, keep, result, rewrite=False, add=True)
        if not self.rules.rewrite_drift:
            if record.drifts(consumer, line):
                LOG.warning("instance %s: allocation differs from the plan: %s", consumer, line)
            result.drift.append(consumer)
            return set()
        return self.settle_one(view, consumer, want, keep, result, rewrite=True)

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
        self.checkpoint(view)
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
        wanted = _without_kept(new, keep)
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
                generation of each of its providers by one, :mod:`agent.tracker.own_writes`).
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
            self.checkpoint(view)


def _without_kept(
    new: Mapping[str, ConsumerAllocations], keep: Iterable[str]
) -> dict[str, ConsumerAllocations]:
    """What to write of each new consumer: nothing on providers kept as they are."""
    kept = set(keep)
    return {c: w.with_allocations(w.on(w.providers - kept)) for c, w in new.items()}


def _on_held_pools(
    want: ConsumerAllocations, held: ConsumerAllocations, tree: Iterable[str]
) -> ConsumerAllocations:
    """``want`` with its pool parts on the pools ``held`` has them on
    (:func:`agent.tracker.evidence.on_held_pools`)."""
    nodes = frozenset(tree)
    return want.with_allocations(
        evidence.on_held_pools(want.allocations, held.without(nodes), nodes)
    )
