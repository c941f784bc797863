"""The allocation audit: each consumer of a node in one state, and each state's one rule.

The agent is one writer among several (nova's scheduler and conductor,
neutron, cyborg): it heals what is missing, removes what is provably gone,
and never undoes another writer's work. The states and their reasons are
:mod:`agent.tracker.consumer_state`'s, their transitions
:class:`~agent.tracker.consumer_record.ConsumerRecord`'s, the decision of
each state's rule :mod:`agent.tracker.audit_decision`'s (docs/service.md,
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
  migration record (:func:`agent.tracker.evidence.keep_unknown`).

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

The rules' helpers (:class:`~agent.tracker.listed.ListedInstances`,
:class:`~agent.tracker.removal.Removals`) are private to the audit. A write
refused for one consumer (400, 404, 409 after the retries) fails that
consumer only. What is read each cycle is :mod:`agent.tracker.audit_read`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from agent.model.allocations import ByProvider, ConsumerAllocations
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker import evidence, record_json
from agent.tracker.audit_decision import (
    Listing,
    contenders,
    decide,
    found_moving,
    migration_records,
)
from agent.tracker.audit_read import AuditView
from agent.tracker.audit_result import AuditDraft, AuditResult, AuditRules, BulkWrites
from agent.tracker.consumer_record import ConsumerRecord
from agent.tracker.listed import ListedInstances
from agent.tracker.removal import Removals

LOG = logging.getLogger(__name__)


class AllocationAudit:
    """Keeps the allocations of one agent's instances right, node by node.

    Args:
        report: the Placement façade.
        state: where the per-node :class:`ConsumerRecord` is kept.
        rules: the operator's choices.
        clock: seconds since the epoch (tests pass their own).
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
        self._removals = Removals(report, clock)
        self._listed = ListedInstances(report)

    def record(self, nodename: str) -> ConsumerRecord:
        """The stored record of ``nodename`` (empty when there is none)."""
        return record_json.load(self.state.consumers(nodename))

    def save(self, nodename: str, record: ConsumerRecord) -> None:
        """Store ``record`` for ``nodename``."""
        self.state.set_consumers(nodename, record_json.dump(record))

    def view(self, nodename: str, owned: set[str], tree: Iterable[str]) -> AuditView:
        """The node's record as last saved, as a view, without reading Placement (targeted updates).

        Args:
            owned: the node's providers the agent owns.
            tree: every provider of the node's tree.
        """
        return AuditView.load(self.state, nodename, owned, tree)

    def checkpoint(self, view: AuditView, statuses: bool = False) -> None:
        """:meth:`AuditView.save` (write-ahead; ``statuses``: the audit's last save)."""
        view.save(statuses)

    # -- a cycle: begin, the cross-node writes, finish -----------------------------

    def begin(self, view: AuditView, listing: Listing) -> AuditDraft:
        """The audit up to its writes in bulk, top to bottom: the listing recorded and
        saved (write-ahead), the migration records read, the decision made (a value,
        :func:`agent.tracker.audit_decision.decide`) and noted in the record.

        Args:
            view: from :func:`agent.tracker.audit_read.refresh` of this cycle.
            listing: what the driver lists and plans on the node.

        Returns:
            An :class:`AuditDraft` whose ``decision.bulk`` is to be written in
            bulk, then given to :meth:`finish` with what became of it.

        Raises:
            PlacementUnavailable: Placement cannot be reached.
        """
        record = view.record
        record.audit_begun()
        record.listed(listing.present)
        now = self.clock()
        for consumer in record.expire_claims(now, self.rules.build_grace):
            LOG.warning("instance %s: claimed but never listed; claim given back", consumer)
        self.checkpoint(view)  # every listed instance is recorded before any write
        records = self._read(migration_records(view, listing))
        decision = decide(
            view, listing, records, self.rules.rewrite_drift, self.rules.remove_unknown_after, now
        )
        draft = AuditDraft(view, listing, decision, AuditResult(reads=view.reads))
        self._note(draft, now)
        return draft

    def finish(self, draft: AuditDraft, bulk: BulkWrites) -> AuditResult:
        """The decision carried out once ``decision.bulk`` was written (or refused, or
        failed), top to bottom: the written recorded, the refused and those the decision
        names read and written alone, the gone removed, the claims reported, the
        consumers that are not instances removed past their grace, the record settled,
        the own writes' generations taken, the record saved.

        Raises:
            Exception: ``bulk.error`` (after the written are recorded and saved).
            PlacementUnavailable: Placement cannot be reached.
        """
        view, result, decision = draft.view, draft.result, draft.decision
        record = view.record
        self._listed.apply(draft, bulk)
        touched = draft.touched | self._removals.remove_gone(view, decision.remove, result)
        record.claims_reported()
        guard = evidence.migration_guard(
            draft.listing.owners, record.moving & draft.listing.present
        )
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

    def _note(self, draft: AuditDraft, now: float) -> None:
        """What the decision settles without a request, in the record (states, reasons)."""
        record, decision, result = draft.view.record, draft.decision, draft.result
        for consumer in sorted(draft.listing.unreadable):
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
            record.removal_deferred(consumer)
        for consumer in decision.confirmed:
            record.removal_confirmed(consumer)
        for consumer in decision.unknown_due + decision.left_alone:
            record.first_seen_unknown(consumer, now)
        for consumer in decision.left_alone:
            record.left_alone(consumer)
            result.unknown.append(consumer)

    def _read(self, consumers: set[str]) -> dict[str, ConsumerAllocations]:
        """``GET /allocations/{consumer}`` of each (in parallel): the migration records."""
        ordered = sorted(consumers)
        return dict(
            zip(ordered, self.report.pool.map(self.report.get_allocations, ordered), strict=True)
        )

    # -- an event's instances ------------------------------------------------------

    def instances(
        self,
        view: AuditView,
        found: set[str],
        vanished: set[str],
        plans: Mapping[str, ConsumerAllocations],
        keep: set[str] | frozenset[str] = frozenset(),
    ) -> AuditResult:
        """The audit's states and rules for the instances of a batch of driver events.

        On the record as the last cycle left it: the found recorded and the
        vanished made *gone*, saved before any write; those holding nothing
        here (at the last audit, ``view.before``) written many per ``POST
        /allocations``, unless nova's migration record holds their share
        (*moving*); the refused and those holding something here read alone
        (*moving*: nothing written; drift: rewritten only with
        ``rewrite_differing_allocations``); the vanished lose this host's
        share. What was written or removed is put in the record for the next
        planning, its providers read again next cycle.

        Args:
            view: :meth:`view` of the node.
            found: the instances the driver read.
            vanished: instances the driver no longer has, that the record knows.
            plans: ``{instance: ConsumerAllocations}`` planned for the found.
            keep: owned providers whose allocations stay as they are.

        Returns:
            An :class:`AuditResult` (failures of single consumers in ``errors``).

        Raises:
            PlacementUnavailable: Placement cannot be reached (after the bulk write).
        """
        record = view.record
        for uuid in found:
            record.seen(uuid)
        for uuid in vanished:
            record.vanished(uuid)
        self.checkpoint(view)  # recorded before any write
        result = AuditResult()
        new = {u: p for u, p in plans.items() if not view.before.get(u) and u not in record.moving}
        records = self._read({r for rs in contenders(view, found, new).values() for r in rs})
        for uuid, why in found_moving(view, found, new, records).items():
            del new[uuid]
            self._listed.moving(record, uuid, why, result)
        refused = self._write_new(view, new, keep, result)
        for uuid in sorted(set(plans) - set(new) - set(result.moving)) + refused:
            self._listed.settle_one(
                view, uuid, plans[uuid], keep, result, rewrite=self.rules.rewrite_drift
            )
        self._remove_vanished(view, vanished, result)
        for uuid in result.written:
            record.held.planned_here(uuid, plans[uuid].on(view.owned), view.owned)
        for uuid in result.removed:
            record.held.planned_here(uuid, {}, view.owned)
        self.checkpoint(view)
        return result

    def _remove_vanished(self, view: AuditView, vanished: set[str], result: AuditResult) -> None:
        """The gone rule for an event's vanished instances: this host's share removed
        now when the agent wrote it or an earlier audit found it gone, else deferred."""
        record = view.record
        gone = sorted(vanished & record.gone)
        due = [u for u in gone if record.removal_due(u)]
        for uuid in sorted(set(gone) - set(due)):
            record.removal_deferred(uuid)
        self._removals.remove_gone(view, due, result)

    def _write_new(
        self,
        view: AuditView,
        new: Mapping[str, ConsumerAllocations],
        keep: set[str] | frozenset[str],
        result: AuditResult,
    ) -> list[str]:
        """Write ``new`` many per ``POST /allocations``; returns those refused with a 4xx.

        A batch that fails otherwise (a 5xx) fails its consumers only, named in
        ``result.errors``: the rest of the event's instances go on.
        """
        try:
            return self._listed.write_missing(view, new, keep, result, set())
        except Exception as exc:  # a 5xx, Placement unreachable: the next cycle heals
            for uuid in sorted(new):
                line = f"instance {uuid}: targeted update failed: {type(exc).__name__}: {exc}"
                LOG.error("%s", line)
                result.errors.append(line)
            return []

    # -- claims ------------------------------------------------------------------------

    def claimed(self, nodename: str, consumer: str, shared: ByProvider | None = None) -> None:
        """Record a claim of ``consumer`` on ``nodename`` (saved before its write is sent).

        Args:
            shared: what the claim allocates on providers outside the tree.
        """
        record = self.record(nodename)
        record.claimed(consumer, self.clock(), shared)
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
