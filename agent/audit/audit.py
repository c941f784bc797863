"""The allocation audit: each consumer of a node in one state, and each state's one rule.

The agent is one writer among several (nova's scheduler and conductor,
neutron, cyborg): it heals what is missing, removes what is provably gone,
and never undoes another writer's work. The states and their reasons are
:mod:`agent.audit.consumer_state`'s, their transitions
:class:`~agent.audit.consumer_record.ConsumerRecord`'s, the decision of
each state's rule :mod:`agent.audit.audit_decision`'s (docs/service.md,
"Allocation audit"); the rules:

- *instance here*: a missing allocation is written (heal): many per ``POST
  /allocations`` with a null consumer generation, which Placement refuses
  for a consumer it knows, so nothing is ever replaced blindly; a refused
  batch is written one by one with the merging write, which keeps parts on
  providers that are not this agent's. An allocation that *differs* from
  the plan is drift: logged once with both sides, counted, reported by
  ``show --check``, and rewritten only with ``[compute]
  rewrite_differing_allocations``. A resource class the plan does not
  produce is never dropped (:func:`~agent.model.allocations.merge_ours`).
- *moving*: nothing is written for it.
- *claimed, building*: kept.
- *gone*: this host's part is removed (other hosts' parts stay), tried again
  every cycle until Placement confirms it.
- *not an instance*: left alone; removed after ``[compute]
  remove_unknown_allocations_after`` only when no evidence says it may be a
  migration record (:func:`agent.audit.evidence.keep_unknown`).

The record is saved before the first write (write-ahead) and after every
batch of writes, so a failure at any instant leaks nothing. One entry per
trigger, each reading top to bottom:

- a cycle: :meth:`AllocationAudit.begin` (record, save, decide) and
  :meth:`AllocationAudit.finish` (apply what the writes in bulk did, then
  the other rules in order), so that the cycle writes the new consumers of
  many nodes together in between (:mod:`agent.tracker.new_allocations`);
- an event's instances: :meth:`AllocationAudit.instances`
  (:mod:`agent.tracker.targeted` reads and plans them);
- a claim and its giving back: :meth:`AllocationAudit.claimed`,
  :meth:`AllocationAudit.claim_given_back`.

The rules' helpers (:class:`~agent.audit.listed.ListedInstances`,
:class:`~agent.audit.removal.Removals`) are private to the audit. A write
refused for one consumer (400, 404, 409 after the retries) fails that
consumer only. What is read each cycle is :mod:`agent.audit.audit_read`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from agent.audit import evidence, record_json
from agent.audit.audit_decision import Listing, decide, migration_records
from agent.audit.audit_read import AuditReader
from agent.audit.audit_result import AuditDraft, AuditResult, AuditRules, BulkWrites
from agent.audit.audit_view import AuditView
from agent.audit.consumer_record import ConsumerRecord
from agent.audit.listed import ListedInstances
from agent.audit.removal import Removals
from agent.model.allocations import ByProvider, ConsumerAllocations
from agent.placement.report import ReportClient
from agent.shape.planning import CPU_MEMORY_CLASSES
from agent.state.store import StateStore

LOG = logging.getLogger(__name__)


AGAIN = 3
"""New decisions on new reads for a consumer whose write conflicted or found it changed
since the decision, within one trigger (as many as a write's conflict retries,
``agent.placement.consumers``); past them it is named in the outcome and decided again by
the next audit."""


class AllocationAudit:
    """Keeps the allocations of one agent's instances right, node by node.

    Args:
        report: the Placement façade.
        state: where the per-node :class:`ConsumerRecord` is kept.
        rules: the operator's choices.
        clock: seconds since the epoch (tests pass their own).

    Attributes:
        reader: builds the view every trigger decides on (:class:`AuditReader`).
    """

    def __init__(
        self,
        report: ReportClient,
        state: StateStore,
        rules: AuditRules | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.report = report
        self.state = state
        self.rules = rules or AuditRules()
        self.clock = clock
        self.reader = AuditReader(report, state)
        self._removals = Removals(report, clock)
        self._listed = ListedInstances(report)

    def record(self, nodename: str) -> ConsumerRecord:
        """The stored record of ``nodename`` (empty when there is none)."""
        return record_json.load(self.state.consumers(nodename))

    def save(self, nodename: str, record: ConsumerRecord) -> None:
        """Store ``record`` for ``nodename``."""
        self.state.set_consumers(nodename, record_json.dump(record))

    def checkpoint(self, view: AuditView, statuses: bool = False) -> None:
        """:meth:`AuditView.save` (write-ahead; ``statuses``: the audit's last save)."""
        view.save(statuses)

    # -- every trigger: begin (decide), the writes in bulk, finish ------------------

    def begin(self, view: AuditView, listing: Listing, periodic: bool = True) -> AuditDraft:
        """The audit up to its writes in bulk, top to bottom: the listing recorded and
        saved (write-ahead), the evidence read, the decision made (a value,
        :func:`agent.audit.audit_decision.decide`) and noted in the record.

        The one procedure of every trigger (issue 39): a periodic audit (``periodic``,
        ``listing.scope`` None) also counts the absences of gone consumers
        (:mod:`agent.audit.absence`), takes a record it starts without as found
        (consumers holding an instance's CPU or memory here, unlisted:
        :meth:`ConsumerRecord.found_without_record`) and gives back claims past
        ``instance_build_timeout``; an event's instances and a decision made again
        after a conflict (:meth:`instances`) decide within their scope, and count no
        absence.

        Args:
            view: from :meth:`AuditReader.read` of this trigger.
            listing: what the driver lists and plans on the node.
            periodic: a periodic audit.

        Returns:
            An :class:`AuditDraft` whose ``decision.bulk`` is to be written in
            bulk, then given to :meth:`finish` with what became of it.

        Raises:
            PlacementUnavailable: Placement cannot be reached.
        """
        record = view.record
        now = self.clock()
        if periodic:
            record.audit_begun()
            if not view.stored:
                record.found_without_record(_unlisted_instances_here(view, listing))
        record.listed(listing.present)
        if periodic:
            record.absences_counted(now)
            for consumer in record.expire_claims(now, self.rules.build_grace):
                LOG.warning("instance %s: claimed but never listed; claim given back", consumer)
        self.checkpoint(view)  # every listed instance is recorded before any write
        reads = self._read(migration_records(view, listing))
        rules = self.rules
        decision = decide(
            view,
            listing,
            reads,
            rules.rewrite_drift,
            rules.remove_unknown_after,
            now,
            grace=rules.absent_grace,
        )
        draft = AuditDraft(view, listing, decision, AuditResult(reads=view.reads))
        self._note(draft, now)
        return draft

    def finish(self, draft: AuditDraft, bulk: BulkWrites, again: int = 0) -> AuditResult:
        """The decision carried out once ``decision.bulk`` was written (or refused, or
        failed), top to bottom: the written recorded, those the decision names written
        alone, the refused and those that changed under a write decided again on a new
        read (:meth:`_again`), the gone removed, the claims reported, the consumers that
        are not instances removed past their grace, the record settled, the own writes'
        generations taken, the record saved.

        Args:
            again: how many decisions were made again before this one.

        Raises:
            Exception: ``bulk.error`` (after the written are recorded and saved).
            PlacementUnavailable: Placement cannot be reached.
        """
        view, result, decision = draft.view, draft.result, draft.decision
        record = view.record
        redo = self._listed.apply(draft, bulk)
        if redo:
            self._again(draft, redo, bulk.refused, again)
        guard = evidence.migration_guard(
            draft.listing.owners, record.moving & draft.listing.present
        )
        touched = draft.touched | self._removals.remove_gone(view, decision.remove, result, guard)
        record.claims_reported()
        touched |= self._removals.remove_unknown(view, decision.unknown_due, guard, result)
        record.settle(set(draft.listing.present), view.held)
        # Our own writes moved these generations: read them again next time,
        # unless the next listing proves nobody else wrote them (agent.placement.own_writes).
        proven = self.report.own_writes_proven(view.nodename, view.own, record.held)
        for rp, allocations in proven.items():
            record.held.read(rp, allocations)
        record.held.read_again(touched - set(proven))
        self.checkpoint(view, statuses=True)
        result.statuses = [record.statuses[c] for c in sorted(record.statuses)]
        return result

    def instances(self, view: AuditView, listing: Listing, again: int = 0) -> AuditResult:
        """The audit of the consumers in ``listing.scope`` alone, by the same procedure as
        a cycle's (:meth:`begin`, the writes in bulk, :meth:`finish`): an event's
        instances (:mod:`agent.tracker.targeted`), or a decision made again after a
        conflict. Counts no absence: an event is never evidence that something is gone.

        Args:
            view: from :meth:`AuditReader.read` (a new read of the node).
            listing: the instances read (others of the record taken as still listed).
            again: how many decisions were made again before this one.

        Returns:
            An :class:`AuditResult` (failures of single consumers in ``errors``).

        Raises:
            Exception: a bulk write that failed otherwise than with a 4xx (after the
                written are recorded); PlacementUnavailable.
        """
        draft = self.begin(view, listing, periodic=False)
        bulk = BulkWrites()
        if draft.decision.bulk:
            try:
                bulk.written, bulk.refused = self.report.write_new_allocations(draft.decision.bulk)
            except Exception as exc:  # a 5xx, Placement unreachable: finish records and raises
                bulk.error = exc
        return self.finish(draft, bulk, again)

    def _again(
        self, draft: AuditDraft, consumers: list[str], refused: list[str], again: int
    ) -> None:
        """Decide again about ``consumers`` on a new read of the node (issue 39: a retry
        after a conflict is a new decision, never a replay of the old edit), up to
        :data:`AGAIN` times; then each is named in the outcome."""
        result = draft.result
        if again >= AGAIN:
            for consumer in consumers:
                line = f"instance {consumer}: changed by another writer at each of {AGAIN} reads"
                LOG.warning("%s; decided again by the next audit", line)
                result.errors.append(line)
            return
        LOG.info("%d instance(s) changed under the audit's writes: deciding again", len(consumers))
        view = self.reader.again(draft.view)
        sub = self.instances(view, draft.listing.again(consumers, refused), again + 1)
        for name in ("written", "removed", "unknown", "moving", "drift", "errors"):
            getattr(result, name).extend(getattr(sub, name))
        result.reads += sub.reads

    def _note(self, draft: AuditDraft, now: float) -> None:
        """What the decision settles without a request, in the record (states, reasons)."""
        record, decision, result = draft.view.record, draft.decision, draft.result
        for consumer in sorted(draft.listing.within(draft.listing.unreadable)):
            record.unreadable(consumer)
        for consumer in sorted(decision.uses_nothing):
            record.uses_nothing(consumer)
        for consumer in sorted(decision.in_step):
            record.holds_plan(consumer)
        for consumer, line in decision.drift.items():
            if record.drifts(consumer, line):
                LOG.warning("instance %s: allocation differs from the plan: %s", consumer, line)
            result.drift.append(consumer)
        for consumer, why in decision.moving.items():
            self._listed.moving(record, consumer, why, result)
        for consumer in decision.deferred:
            absence = record.absent.get(consumer)
            record.removal_deferred(
                consumer,
                absence.left(now, self.rules.absent_grace)
                if absence is not None
                else "found absent by an event: the next periodic audit starts the wait",
            )
        for consumer in decision.confirmed:
            record.removal_confirmed(consumer)
        for consumer in decision.unknown_due + decision.left_alone:
            record.first_seen_unknown(consumer, now)
        for consumer in decision.left_alone:
            record.left_alone(consumer)
            result.unknown.append(consumer)

    def _read(self, consumers: set[str]) -> dict[str, ConsumerAllocations]:
        """``GET /allocations/{consumer}`` of each (in parallel): the evidence a decision
        reads (migration records, the instances contending for one)."""
        return self.report.read_consumers(consumers)

    # -- claims ------------------------------------------------------------------------

    def claimed(self, nodename: str, consumer: str, shared: ByProvider | None = None) -> None:
        """Record a claim of ``consumer`` on ``nodename`` (saved before its write is sent).

        Args:
            shared: what the claim allocates on providers outside the tree.
        """
        record = self.record(nodename)
        record.claimed(consumer, self.clock(), shared)
        self.save(nodename, record)

    def claim_written(self, nodename: str, consumer: str, generation: int | None) -> None:
        """The claim's write of ``consumer`` left it at consumer ``generation`` (the agent's
        own write while it stays there, :mod:`agent.audit.authorship`)."""
        record = self.record(nodename)
        record.claim_written(consumer, generation)
        self.save(nodename, record)

    def claim_given_back(self, nodename: str, consumer: str) -> set[str]:
        """Forget the claim of ``consumer`` (it is being given back).

        Returns:
            The providers outside the tree it was given allocations on (the
            sharing provider), to clear along with this host's own.
        """
        record = self.record(nodename)
        shared = record.claim_given_back(consumer)
        self.save(nodename, record)
        return shared


def _unlisted_instances_here(view: AuditView, listing: Listing) -> list[str]:
    """Consumers holding VCPU, PCPU or MEMORY_MB on the node's owned providers that the
    driver does not list (what every instance holds here: a gone instance, or nova's
    migration record or claim: without a record, not told apart)."""
    return sorted(
        consumer
        for consumer, parts in view.held.items()
        if consumer not in listing.present
        and consumer not in view.record.claims
        and any(CPU_MEMORY_CLASSES & set(amounts) for amounts in parts.values())
    )
