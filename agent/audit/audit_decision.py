"""The allocation audit's decision: what it will write, remove and leave, as a value.

"Plan, then execute", as neutron's ``placement_report.py`` returns its
deferred calls: :func:`decide` is a pure function of one node's view (what
Placement holds, the record of the last audit), the driver's listing and
plan, and the migration records read for the instances holding nothing here;
:class:`AuditDecision` is its answer, which tests can assert without
Placement, and which :meth:`agent.audit.audit.AllocationAudit.begin` notes
in the record and :meth:`~agent.audit.audit.AllocationAudit.finish`
carries out. The rules are docs/service.md's ("Allocation audit").
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from agent.audit import evidence
from agent.audit.audit_view import AuditView
from agent.model.allocations import ByProvider, ConsumerAllocations


class Alone(enum.StrEnum):
    """Why a listed instance is read and written alone (one read-edit-write)."""

    HEAL = "holds nothing here, known to Placement: its plan is merged in"
    ADD = "the plan's parts it holds nothing of are added"
    REWRITE = "drift, rewritten (rewrite_differing_allocations)"


GRACE = 3600
"""``[compute] absent_instance_timeout``'s default, seconds (:mod:`agent.audit.absence`)."""


@dataclass(frozen=True)
class Listing:
    """What the driver says of one node this cycle.

    Attributes:
        expected: ``{instance: ConsumerAllocations}`` planned from the driver.
        present: every instance UUID the driver lists (including those that
            use nothing, and those it cannot read).
        keep: owned providers whose allocations stay as they are (hardware
            gone while instances still use it).
        owners: ``{instance: (project_id, user_id)}`` of the listed instances.
        unreadable: listed instances the driver could not read: neither
            written nor removed.
        scope: the consumers this decision is about (an event's instances, the
            consumers of a decision made again after a conflict); None: every
            consumer of the node (a periodic audit). Outside it nothing is decided.
        refused: consumers a write with a null consumer generation was refused for:
            Placement knows them, so they are read before the decision.
    """

    expected: Mapping[str, ConsumerAllocations]
    present: frozenset[str]
    keep: frozenset[str] = frozenset()
    owners: Mapping[str, evidence.Owner] = field(default_factory=dict)
    unreadable: frozenset[str] = frozenset()
    scope: frozenset[str] | None = None
    refused: frozenset[str] = frozenset()

    def within(self, consumers: Iterable[str]) -> set[str]:
        """Those of ``consumers`` this decision is about (:attr:`scope`)."""
        found = set(consumers)
        return found if self.scope is None else found & self.scope

    def considered(self) -> list[str]:
        """The readable listed instances this decision is about, sorted."""
        return sorted(self.within(self.present - self.unreadable))

    def again(self, consumers: Iterable[str], refused: Iterable[str] = ()) -> Listing:
        """This listing, for a new decision about ``consumers`` alone (after a conflict);
        ``refused``: those a null-generation write was refused for."""
        return replace(self, scope=frozenset(consumers), refused=frozenset(refused))


@dataclass(frozen=True)
class AuditDecision:
    """What one node's audit will do (module docstring).

    Attributes:
        bulk: ``{instance: allocations}`` holding nothing here: written many
            per ``POST /allocations`` (kept providers left out).
        alone: ``{instance: why}`` read and written alone, in this order.
        moving: ``{instance: the evidence}`` nova is moving: nothing written.
        drift: ``{instance: the drift line}``: reported, not rewritten.
        in_step: instances whose plan Placement holds.
        uses_nothing: instances whose plan holds nothing here.
        remove: gone consumers whose share here is removed.
        deferred: gone consumers another writer wrote, found gone the first
            time: removed by the next audit that still finds them gone.
        confirmed: gone consumers holding nothing here any more: forgotten.
        unknown_due: not instances, past ``remove_unknown_allocations_after``:
            removed unless the evidence read with them keeps them.
        left_alone: not instances, kept (within the grace, migration records).
    """

    bulk: Mapping[str, ConsumerAllocations] = field(default_factory=dict)
    alone: Mapping[str, Alone] = field(default_factory=dict)
    moving: Mapping[str, str] = field(default_factory=dict)
    drift: Mapping[str, str] = field(default_factory=dict)
    in_step: frozenset[str] = frozenset()
    uses_nothing: frozenset[str] = frozenset()
    remove: tuple[str, ...] = ()
    deferred: tuple[str, ...] = ()
    confirmed: tuple[str, ...] = ()
    unknown_due: tuple[str, ...] = ()
    left_alone: tuple[str, ...] = ()


def migration_records(view: AuditView, listing: Listing) -> set[str]:
    """The consumers the audit reads (``GET /allocations/{consumer}``) before :func:`decide`:
    those that may be nova's migration record of a listed instance holding nothing here
    (:func:`contenders`), with those instances themselves (whether one holds a destination
    claim elsewhere tells whose record it is, issue 39), and the instances last seen moving
    or refused a null-generation write (Placement knows them: are they moving?)."""
    missing = _missing(view, listing)
    found = contenders(view, listing.present, missing)
    records = {r for rs in found.values() for r in rs}
    contending = {c for c, rs in found.items() if rs}
    known = {c for c in missing if c in view.record.moving or c in listing.refused}
    return records | contending | known


def contenders(
    view: AuditView, present: Collection[str], missing: Mapping[str, ConsumerAllocations]
) -> dict[str, list[str]]:
    """``{instance: consumers not listed whose parts here match its share}``.

    Between the conductor's ``replace_allocation_with_migration`` and the
    scheduler's claim on the destination (and when a destination fails its
    checks), the instance's consumer holds nothing anywhere while a consumer
    without type, of the instance's project and user, holds exactly its share
    here: healing it would make nova's claim merge the source share into the
    destination's (``claim_resources``). A record matches what the instance
    held here at the last audit, or its plan compared on the classes the
    planner produces (one booted and moved between two audits holds a
    flavor's ``resources:CUSTOM_*`` the plan lacks, issue 33 case 3), or, for
    an instance last seen moving, what the record held then.
    """
    others = {
        c: parts
        for c, parts in view.held.items()
        if c not in present and c not in view.record.claims
    }
    before = view.before
    found: dict[str, list[str]] = {}
    for consumer, want in missing.items():
        shares = [want.on(view.owned), before.get(consumer)]
        # Last seen moving: the records it may be are those unchanged since then.
        was_moving = consumer in view.record.moving
        found[consumer] = sorted(
            c
            for c, parts in others.items()
            if parts in shares
            or evidence.planned_part(parts, view.owned, view.produces) == shares[0]
            or (was_moving and before.get(c) == parts)
        )
    return found


def found_moving(
    view: AuditView,
    present: Collection[str],
    missing: Mapping[str, ConsumerAllocations],
    reads: Mapping[str, ConsumerAllocations],
) -> dict[str, str]:
    """``{instance: why}`` of those of ``missing`` nova is moving: they are *moving*.

    An instance read (``reads``) that holds CPU or memory on another compute node is
    moving (:func:`agent.audit.evidence.moving_reason`). Then migration records: among
    each instance's :func:`contenders`, as read, only those whose type and owner say they
    may be its record count (:func:`agent.audit.evidence.holds_its_share`: a new
    instance's claim of the same amounts, typed or another owner's, is no record and must
    not win one by sorting first); one record explains one instance, by evidence
    (:func:`agent.audit.evidence.assign_records`), an instance holding a destination
    claim elsewhere claiming its own first (issue 39, case 8).
    """
    out = {
        consumer: why
        for consumer in sorted(missing)
        if consumer in reads
        and (why := evidence.moving_reason(reads[consumer], view.tree, view.owned))
    }
    candidates = {
        consumer: [
            r
            for r in records_of
            if r in reads and evidence.holds_its_share(reads[r], missing[consumer], r)
        ]
        for consumer, records_of in contenders(view, present, missing).items()
    }
    assigned = evidence.assign_records(candidates, view.record.moving | set(out), view.before)
    for consumer, other in assigned.items():
        out.setdefault(consumer, evidence.holds_its_share(reads[other], missing[consumer], other))
    return out


def decide(
    view: AuditView,
    listing: Listing,
    reads: Mapping[str, ConsumerAllocations],
    rewrite: bool = False,
    remove_unknown_after: float = 0,
    now: float = 0,
    *,
    grace: float = GRACE,
) -> AuditDecision:
    """The audit's decision for one node (module docstring); no request, no change.

    The same procedure for every trigger: a periodic audit (``listing.scope`` None), an
    event's instances and a decision made again after a conflict (a scope): outside the
    scope nothing is decided, and only a periodic audit counts absences
    (:meth:`~agent.audit.consumer_record.ConsumerRecord.absences_counted`, before this).

    Args:
        view: the node's view, its record already told what the driver lists
            (:meth:`~agent.audit.consumer_record.ConsumerRecord.listed`).
        listing: the driver's listing and plan.
        reads: ``{consumer: ConsumerAllocations}`` of the consumers
            :func:`migration_records` named, as read.
        rewrite: ``[compute] rewrite_differing_allocations``.
        remove_unknown_after: seconds; 0 never removes a consumer that is not
            an instance.
        now: seconds since the epoch.
        grace: ``[compute] absent_instance_timeout``, seconds.

    Returns:
        The :class:`AuditDecision`.
    """
    missing = _missing(view, listing)
    moving = found_moving(view, listing.present, missing, reads)
    alone, drift, in_step = _holding_here(view, listing, rewrite)
    known = _known_to_placement(view, listing, missing, reads)
    alone.update((c, Alone.HEAL) for c in sorted(known - set(moving)))
    bulk = {c: w for c, w in missing.items() if c not in moving and c not in known}
    remove, deferred, confirmed = _gone(view, listing, grace, now)
    due, left = _unknown(view, listing, remove_unknown_after, now)
    return AuditDecision(
        bulk=without_kept(bulk, listing.keep),
        alone=alone,
        moving=moving,
        drift=drift,
        in_step=frozenset(in_step),
        uses_nothing=frozenset(_holding_nothing(view, listing)) - set(missing),
        remove=remove,
        deferred=deferred,
        confirmed=confirmed,
        unknown_due=due,
        left_alone=left,
    )


def _known_to_placement(
    view: AuditView,
    listing: Listing,
    missing: Mapping[str, ConsumerAllocations],
    reads: Mapping[str, ConsumerAllocations],
) -> set[str]:
    """Those of ``missing`` written alone (:attr:`Alone.HEAL`, one read-edit-write each, so
    one at fault fails alone): Placement knows them (read with a generation, or last seen
    moving and not read), or a batch with them was refused."""
    return {
        c
        for c in missing
        if (c in reads and reads[c].generation is not None)
        or (c not in reads and c in view.record.moving)
        or c in listing.refused
    }


def judge_here(
    view: AuditView,
    consumer: str,
    want: ConsumerAllocations | None,
    keep: Iterable[str],
) -> tuple[Alone | None, str]:
    """An instance that holds something here: ``(None, "")`` in step; ``(ADD, line)``
    when it holds only whole parts of its plan and lacks others (a device's part
    removed, a pool found after the write: added, nothing held changed); otherwise
    ``(REWRITE, line)``, a drift (rewritten only when the operator says so).

    This host's share is compared: the plan's pool parts on the pools it holds the
    class on (:func:`agent.audit.evidence.on_held_pools`), classes the planner
    does not produce left out (:func:`agent.audit.evidence.planned_part`).
    """
    want = want or ConsumerAllocations()
    managed = view.owned - set(keep)
    have = view.held.get(consumer, {})
    want_here = {**want.on(managed), **want.without(view.owned)}
    have_here: ByProvider = {rp: a for rp, a in have.items() if rp in managed}
    have_here.update(view.record.shared.get(consumer, {}))
    have_here = evidence.planned_part(have_here, view.owned, view.produces)
    want_here = evidence.on_held_pools(want_here, have_here, view.tree)
    line = evidence.drift_line(want_here, have_here)
    if not line:
        return None, ""
    if evidence.only_missing(want_here, have_here):
        return Alone.ADD, line
    return Alone.REWRITE, line


def _holding_here(
    view: AuditView, listing: Listing, rewrite: bool
) -> tuple[dict[str, Alone], dict[str, str], set[str]]:
    """``(written alone, drift, in step)`` of the listed instances holding something
    here (:func:`judge_here`); a drift is written alone only with ``rewrite``."""
    alone: dict[str, Alone] = {}
    drift: dict[str, str] = {}
    in_step: set[str] = set()
    for consumer in listing.considered():
        if not holds_here(view, consumer):
            continue
        verdict, line = judge_here(view, consumer, listing.expected.get(consumer), listing.keep)
        if verdict is None:
            in_step.add(consumer)
        elif verdict is Alone.REWRITE and not rewrite:
            drift[consumer] = line
        else:
            alone[consumer] = verdict
    return alone, drift, in_step


def _missing(view: AuditView, listing: Listing) -> dict[str, ConsumerAllocations]:
    """Listed instances holding nothing here (nor on a pool as this host's) whose plan
    holds something: to heal, unless nova is moving them."""
    out: dict[str, ConsumerAllocations] = {}
    for consumer in _holding_nothing(view, listing):
        want = listing.expected.get(consumer)
        if want is not None and want.allocations:
            out[consumer] = want
    return out


def holds_here(view: AuditView, consumer: str) -> bool:
    """Whether ``consumer`` holds something here as the record has it: on the node's
    owned providers, or on a pool as this host's share (docs/service.md)."""
    return bool(view.held.get(consumer)) or consumer in view.record.shared


def _holding_nothing(view: AuditView, listing: Listing) -> list[str]:
    """The readable listed instances that hold nothing here (:func:`holds_here`), sorted."""
    return [c for c in listing.considered() if not holds_here(view, c)]


def _gone(
    view: AuditView, listing: Listing, grace: float, now: float
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """``(remove, deferred, confirmed)`` of the record's gone consumers in scope
    (docs/service.md): the agent's own write still at its generation is removed at once;
    another writer's once absent past ``grace`` (:mod:`agent.audit.absence`)."""
    record = view.record
    remove: list[str] = []
    deferred: list[str] = []
    confirmed: list[str] = []
    for consumer in sorted(listing.within(record.gone)):
        if not holds_here(view, consumer):
            confirmed.append(consumer)
        elif record.removal_due(consumer, view.generation_of(consumer), now, grace):
            remove.append(consumer)
        else:
            deferred.append(consumer)
    return tuple(remove), tuple(deferred), tuple(confirmed)


def _unknown(
    view: AuditView, listing: Listing, grace: float, now: float
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(past the grace, left alone)`` of the consumers here that are not instances (a
    periodic audit's alone: an event says nothing of them)."""
    record = view.record
    due: list[str] = []
    left: list[str] = []
    if listing.scope is not None:
        return (), ()
    for consumer in sorted(set(view.held) - listing.present - set(record.claims) - record.gone):
        first = record.unknown.get(consumer, now)
        if consumer in record.migrations or not grace or now - first < grace:
            left.append(consumer)
        else:
            due.append(consumer)
    return tuple(due), tuple(left)


def without_kept(
    new: Mapping[str, ConsumerAllocations], keep: Iterable[str]
) -> dict[str, ConsumerAllocations]:
    """What to write of each new consumer: nothing on providers kept as they are."""
    kept = set(keep)
    return {c: w.with_allocations(w.on(w.providers - kept)) for c, w in new.items()}
