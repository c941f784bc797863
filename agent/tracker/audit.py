"""The allocation audit: each consumer of a node in one state, and each state's one rule.

The agent is one writer among several (nova's scheduler and conductor,
neutron, cyborg): it heals what is missing, removes what is provably gone,
and never undoes another writer's work. The states and their evidence are
:mod:`agent.tracker.consumer_record`'s (docs/service.md, "Allocation
audit"); the rules:

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
batch of writes, so a failure at any instant leaks nothing. The audit is in
two halves, :meth:`AllocationAudit.begin` (record, save, decide) and
:meth:`AllocationAudit.finish` (apply what the writes in bulk did, then the
other rules in order), so that the cycle writes the new consumers of many
nodes together in between (:mod:`agent.tracker.new_allocations`);
:meth:`AllocationAudit.reconcile` is both around the node's own write. A write refused
for one consumer (400, 404, 409 after the retries) fails that consumer
only. What is read each cycle is :mod:`agent.tracker.audit_read`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent.model.allocations import (
    ByProvider,
    ConsumerAllocations,
    ProviderAllocations,
)
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker import evidence
from agent.tracker.audit_read import AuditView
from agent.tracker.audit_result import AuditDraft, AuditResult, AuditRules, BulkWrites
from agent.tracker.consumer_record import ConsumerRecord, State
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
        self.removals = Removals(report, self.rules, clock, self.checkpoint)
        self.listed = ListedInstances(report, self.rules, self.checkpoint)

    def record(self, nodename: str) -> ConsumerRecord:
        """The stored record of ``nodename`` (empty when there is none)."""
        return ConsumerRecord.from_json(self.state.consumers(nodename))

    def save(self, nodename: str, record: ConsumerRecord) -> None:
        """Store ``record`` for ``nodename``."""
        self.state.set_consumers(nodename, record.to_json())

    def view(self, nodename: str, owned: set[str], tree: Iterable[str]) -> AuditView:
        """The node's record as last saved, as a view, without reading Placement (targeted updates).

        Args:
            owned: the node's providers the agent owns.
            tree: every provider of the node's tree.
        """
        stored = self.state.consumers(nodename) or {}
        record = ConsumerRecord.from_json(stored)
        return AuditView(nodename, record, set(owned), stored, frozenset(tree) | set(owned))

    def checkpoint(self, view: AuditView, statuses: bool = False) -> None:
        """Save the view's record when it changed since last stored (write-ahead).

        Args:
            statuses: a change of the consumers' statuses alone is saved too
                (the audit's last save). They say what the last audit found,
                for ``show`` and metrics, and are rebuilt by every audit: the
                write-ahead saves before and between writes skip them, or an
                unchanged node's record was written twice a cycle (issue 28).
        """
        doc = view.record.to_json()
        if doc == view.stored:
            return
        if statuses or _but_statuses(doc) != _but_statuses(view.stored):
            self.save(view.nodename, view.record)
            view.stored = doc

    # -- the audit ---------------------------------------------------------------

    def reconcile(
        self,
        view: AuditView,
        expected: Mapping[str, ConsumerAllocations],
        present: set[str],
        keep: set[str] | frozenset[str] = frozenset(),
        owners: Mapping[str, evidence.Owner] | None = None,
        unreadable: set[str] | frozenset[str] = frozenset(),
    ) -> AuditResult:
        """Put every consumer of the node in its state and apply that state's rule.

        :meth:`begin`, the node's new consumers written on their own
        (:meth:`write_alone`), then :meth:`finish`; the cycle writes many
        nodes' new consumers together between the two instead
        (:mod:`agent.tracker.new_allocations`).

        Args:
            view: from :func:`agent.tracker.audit_read.refresh` of this cycle.
            expected: ``{consumer: ConsumerAllocations}`` planned from the driver.
            present: every instance UUID the driver lists on the node
                (including those that use nothing, and those it cannot read).
            keep: owned providers whose existing allocations stay as they are
                (hardware that is gone while instances still use it).
            owners: ``{instance: (project_id, user_id)}`` of the listed
                instances (the migration-record guard).
            unreadable: listed instances the driver could not read: neither
                written nor removed until they can be read again.

        Returns:
            An :class:`AuditResult`; failures of single consumers are in
            ``errors`` and do not stop the audit.

        Raises:
            PlacementUnavailable: Placement cannot be reached (the cycle
                fails; what was written is in the saved record).
        """
        draft = self.begin(view, expected, present, keep, owners, unreadable)
        return self.finish(draft, self.write_alone(draft))

    def begin(
        self,
        view: AuditView,
        expected: Mapping[str, ConsumerAllocations],
        present: set[str],
        keep: set[str] | frozenset[str] = frozenset(),
        owners: Mapping[str, evidence.Owner] | None = None,
        unreadable: set[str] | frozenset[str] = frozenset(),
    ) -> AuditDraft:
        """The audit up to its writes in bulk: every listed instance recorded and saved
        (write-ahead), the in-step, drifting and moving decided.

        Args: as :meth:`reconcile`.

        Returns:
            An :class:`AuditDraft` whose ``new`` are to be written in bulk,
            then given to :meth:`finish` with what became of them.

        Raises:
            PlacementUnavailable: Placement cannot be reached.
        """
        record = view.record
        record.statuses.clear()
        record.listed(present)
        expired = record.expire_claims(self.clock(), self.rules.build_grace)
        for consumer in expired:
            LOG.warning("instance %s: claimed but never listed; claim given back", consumer)
        self.checkpoint(view)  # every listed instance is recorded before any write
        for consumer in sorted(unreadable):
            record.status(consumer, State.HERE, "listed but unreadable: left as Placement holds it")
        draft = AuditDraft(
            view,
            expected,
            set(present),
            frozenset(keep),
            owners or {},
            frozenset(unreadable),
            AuditResult(reads=view.reads),
        )
        self.listed.decide(draft)
        return draft

    def write_alone(self, draft: AuditDraft) -> BulkWrites:
        """Write ``draft.new`` on their own, :data:`~agent.placement.consumers.BULK_BATCH`
        per ``POST /allocations``.

        Raises:
            PlacementUnavailable, PlacementError: a batch failed otherwise than with a 4xx.
        """
        if not draft.new:
            return BulkWrites()
        written, refused = self.report.write_new_allocations(draft.new)
        return BulkWrites(written, refused)

    def finish(self, draft: AuditDraft, bulk: BulkWrites) -> AuditResult:
        """The rest of the audit once ``draft.new`` were written (or refused, or failed).

        In order: the written recorded, the refused and once-moving read and
        written alone, the gone removed, the claims reported, the foreign
        removed, the record settled, the own writes' generations taken, the
        record saved.

        Raises:
            Exception: ``bulk.error`` (after the written are recorded and saved).
            PlacementUnavailable: Placement cannot be reached.
        """
        view, result = draft.view, draft.result
        record = view.record
        self.listed.apply(draft, bulk)
        touched = draft.touched | self.removals.remove_gone(view, result)
        for consumer, when in sorted(record.claims.items()):
            record.status(consumer, State.BUILDING, f"claimed at {when:.0f}, not listed yet")
        touched |= self.removals.remove_foreign(view, draft.present, draft.owners, result)
        record.settle(draft.present, view.held)
        # Our own writes moved these generations: read them again next time,
        # unless the next listing proves nobody else wrote them (agent.placement.own_writes).
        proven = self.report.own_writes_proven(view.nodename, view.own, record.held)
        for rp, allocations in proven.items():
            record.provider_read(rp, allocations)
        for rp in (touched & set(record.held)) - set(proven):
            record.provider_read(rp, ProviderAllocations(None, record.held[rp].consumers))
        self.checkpoint(view, statuses=True)
        result.statuses = [record.statuses[c] for c in sorted(record.statuses)]
        return result

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


def _but_statuses(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "states"}
