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
batch of writes, so a failure at any instant leaks nothing. A write refused
for one consumer (400, 404, 409 after the retries) fails that consumer
only. What is read each cycle is :mod:`agent.tracker.audit_read`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from agent.model.allocations import (
    ByProvider,
    ConsumerAllocations,
    ProviderAllocations,
    merge_ours,
)
from agent.placement.errors import PlacementError
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker import evidence
from agent.tracker.audit_read import AuditView
from agent.tracker.audit_result import AuditResult, AuditRules, failed
from agent.tracker.consumer_record import ConsumerRecord, State
from agent.tracker.removal import Removals, ours_of

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

    def checkpoint(self, view: AuditView) -> None:
        """Save the view's record when it changed since last stored (write-ahead)."""
        doc = view.record.to_json()
        if doc != view.stored:
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
        result = AuditResult(reads=view.reads)
        record = view.record
        record.statuses.clear()
        record.listed(present)
        expired = record.expire_claims(self.clock(), self.rules.build_grace)
        for consumer in expired:
            LOG.warning("instance %s: claimed but never listed; claim given back", consumer)
        self.checkpoint(view)  # every listed instance is recorded before any write
        for consumer in sorted(unreadable):
            record.status(consumer, State.HERE, "listed but unreadable: left as Placement holds it")
        touched = self._instances(view, expected, present - set(unreadable), keep, result)
        touched |= self.removals.remove_gone(view, result)
        for consumer, when in sorted(record.claims.items()):
            record.status(consumer, State.BUILDING, f"claimed at {when:.0f}, not listed yet")
        touched |= self.removals.remove_foreign(view, present, owners or {}, result)
        record.settle(present, view.held)
        # Our own writes moved these generations: read them again next time,
        # unless one listing proves nobody else wrote them (agent.tracker.own_writes).
        proven = view.own.confirm(self.report, view.nodename, record)
        for rp in (touched & set(record.held)) - proven:
            record.held[rp] = ProviderAllocations(None, record.held[rp].consumers)
        self.checkpoint(view)
        result.statuses = [record.statuses[c] for c in sorted(record.statuses)]
        return result

    def _instances(
        self,
        view: AuditView,
        expected: Mapping[str, ConsumerAllocations],
        present: set[str],
        keep: set[str] | frozenset[str],
        result: AuditResult,
    ) -> set[str]:
        """Listed instances: heal the missing, report drift, leave the moving alone."""
        record = view.record
        held = view.held
        touched: set[str] = set()
        new: dict[str, ConsumerAllocations] = {}
        one_by_one: list[str] = []
        for consumer in sorted(present):
            want = expected.get(consumer)
            if held.get(consumer) or consumer in record.shared:
                touched |= self._here(view, consumer, want, held.get(consumer, {}), keep, result)
            elif want is None or not want.allocations:
                record.in_step(consumer)
                record.status(consumer, State.HERE, "listed; uses nothing here")
            elif consumer in record.moving:
                one_by_one.append(consumer)  # read alone: still moving?
            else:
                new[consumer] = want
        for consumer, why in self._pending_moves(
            view, present, {**new, **{c: expected[c] for c in one_by_one}}
        ).items():
            new.pop(consumer, None)
            if consumer in one_by_one:
                one_by_one.remove(consumer)
            if consumer not in record.moving:
                LOG.info("instance %s: moving; nothing written (%s)", consumer, why)
            record.is_moving(consumer, why)
            result.moving.append(consumer)
        refused = self.write_missing(view, new, keep, result, touched)
        for consumer in one_by_one + refused:
            touched |= self.settle_one(view, consumer, expected[consumer], keep, result)
        self.checkpoint(view)
        return touched

    def _pending_moves(
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
        the source share into the destination's (``claim_resources``). One
        ``GET /allocations/{consumer}`` per consumer whose amounts match.

        Returns:
            ``{instance: why}`` for those found (they are *moving*).
        """
        others = {
            c: parts
            for c, parts in view.held.items()
            if c not in present and c not in view.record.claims
        }
        found: dict[str, str] = {}
        owners: dict[str, ConsumerAllocations] = {}
        for consumer, want in sorted(missing.items()):
            share = want.on(view.owned)
            for other in sorted(c for c, parts in others.items() if parts == share):
                if other not in owners:
                    owners[other] = self.report.get_allocations(other)
                why = evidence.holds_its_share(owners[other], want, other)
                if why:
                    found[consumer] = why
                    del others[other]
                    break
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
        line = evidence.drift_line(want_here, have_here)
        if not line:
            record.in_step(consumer)
            record.status(consumer, State.HERE, "listed; Placement holds its plan")
            return set()
        if evidence.only_missing(want_here, have_here):
            # Parts of the plan it holds nothing of (a device's, the sharing
            # provider's): added, nothing it holds is changed.
            return self.settle_one(view, consumer, want, keep, result, rewrite=False, add=True)
        if not self.rules.rewrite_drift:
            if record.drifted(consumer, line):
                LOG.warning("instance %s: allocation differs from the plan: %s", consumer, line)
            result.drift.append(consumer)
            record.status(consumer, State.HERE, "listed; allocation differs (drift)", line)
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
        in the plan (the missing parts are added).

        Returns:
            The providers touched (empty when nothing was written).
        """
        record = view.record
        decided: list[str] = []
        sent: list[ConsumerAllocations] = []
        managed = view.owned - set(keep)

        def edit(held: ConsumerAllocations) -> ConsumerAllocations | None:
            decided[:] = [evidence.moving_reason(held, view.tree, view.owned)]
            have = {**held.on(managed), **held.on(set(want.without(view.owned)))}
            missing_only = add and evidence.only_missing(want.on(set(have) | want.providers), have)
            if decided[0] or (have and not rewrite and not missing_only):
                sent.clear()
                return None
            ours = ours_of(view, consumer)
            sent[:] = [merge_ours(held, want, ours, keep, produces=view.produces)]
            return sent[0]

        try:
            wrote = self.report.edit_allocations(consumer, edit)
        except PlacementError as exc:
            failed(f"instance {consumer}: allocation not written", exc, result)
            return set()
        if decided and decided[0]:
            if consumer not in record.moving:
                LOG.info("instance %s: moving; nothing written (%s)", consumer, decided[0])
            record.is_moving(consumer, decided[0])
            result.moving.append(consumer)
            return set()
        if not wrote or not sent:
            record.in_step(consumer)
            record.status(consumer, State.HERE, "listed; Placement already holds it here")
            return set()
        record.written(consumer, want.without(view.owned))
        record.in_step(consumer)
        record.status(consumer, State.HERE, "listed; allocation written")
        result.written.append(consumer)
        view.own.put(consumer, sent[0].allocations)
        LOG.info("instance %s: allocation written (%s)", consumer, want.on(view.owned))
        self.checkpoint(view)
        return set(want.providers) | set(view.held.get(consumer, {}))

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
        kept = set(keep)
        wanted = {c: w.with_allocations(w.on(w.providers - kept)) for c, w in new.items()}
        batches, refused = self.report.write_new_allocations(wanted)
        for batch in batches:
            view.own.posted({c: wanted[c].allocations for c in batch})
            for consumer in batch:
                want = wanted[consumer]
                view.record.written(consumer, want.without(view.owned))
                view.record.status(consumer, State.HERE, "listed; missing allocation written")
                result.written.append(consumer)
                touched |= want.providers
            LOG.info("%d instance(s): allocations written together", len(batch))
            self.checkpoint(view)
        return sorted(refused)

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
