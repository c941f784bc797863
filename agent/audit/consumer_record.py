"""Who holds what on one node: the audit's durable record, and every transition of it.

One type, :class:`ConsumerRecord`, owns every transition of what the agent
remembers about the consumers of a node (as openstack/placement's
``objects/consumer.py`` keeps a consumer's transitions in one place): the
audit, claims and targeted updates call its methods and never edit its
fields (tests/unit/test_record_transitions.py holds that). A method that
puts a consumer in a state sets the state and its reason together
(:mod:`agent.audit.consumer_state`); a method whose name asks a question
changes nothing. The record is kept in ``state_path`` (``consumers/NODE.json``,
:mod:`agent.audit.record_json`) and saved *before* a request that writes
an allocation is sent (write-ahead), so a failure at any instant after a
write leaks nothing: an instance whose allocation was written is always in
the record, and so is removed once it is gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from agent.audit.absence import Absences
from agent.audit.authorship import Authorship
from agent.audit.consumer_state import ConsumerStatus, Reason
from agent.audit.held import HeldAllocations
from agent.audit.record_claims import ClaimTransitions
from agent.audit.record_gone import GoneTransitions
from agent.model.allocations import ByProvider, by_consumer


@dataclass
class ConsumerRecord(ClaimTransitions, GoneTransitions):
    """What the audit remembers about one node's consumers between cycles (``state_path``).

    Fields are read freely; they are changed only by this class's methods, those of
    claims (:class:`~agent.audit.record_claims.ClaimTransitions`) and of gone
    consumers (:class:`~agent.audit.record_gone.GoneTransitions`) among them.

    Attributes:
        instances: instances the driver listed in the last cycle (or a targeted
            update saw), whose allocations the agent may have written.
        claims: ``{consumer: when claimed}`` (seconds since the epoch):
            claimed through the tracker, not listed yet.
        gone: instances no longer listed whose part here is not yet
            confirmed removed (tried again every cycle).
        moving: listed instances last seen *moving* (nova holds their CPU and
            memory on another host): read alone each cycle, never written.
        unknown: ``{consumer: when first seen}`` for consumers here that are
            not instances.
        held: the allocations on each provider of the node as last read (with
            the provider generation of that read; None forces a read).
        shared: ``{consumer: {provider: {rc: amount}}}`` each instance holds
            on providers outside the tree (the shared-storage provider).
        migrations: unknown consumers found to be typed ``MIGRATION``.
        wrote: instances whose allocation here the agent itself wrote (a claim,
            a heal), with the consumer generation its write produced
            (:class:`~agent.audit.authorship.Authorship`): removed as soon as
            they are gone while that is still their generation.
        absent: gone consumers, each with how long and by how many periodic
            audits it has been found absent (:class:`~agent.audit.absence.Absences`):
            another writer's allocation is removed only once the grace has
            passed (nova cleans up its own on delete, confirm, revert and
            evacuation, and a revert's ``move_allocations`` is never raced).
        inherited: gone consumers found without a record of the node (first start,
            ``state_path`` lost): not known to have been instances here.
        drift: ``{consumer: the drift line last logged}``: a drift is logged
            once, again only when it changes.
        statuses: the state the last audit derived for each consumer, and
            why (stored for ``compute-agent show``).
    """

    instances: set[str] = field(default_factory=set)
    claims: dict[str, float] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    moving: set[str] = field(default_factory=set)
    unknown: dict[str, float] = field(default_factory=dict)
    held: HeldAllocations = field(default_factory=HeldAllocations)
    shared: dict[str, ByProvider] = field(default_factory=dict)
    migrations: set[str] = field(default_factory=set)
    wrote: Authorship = field(default_factory=Authorship)
    absent: Absences = field(default_factory=Absences)
    inherited: set[str] = field(default_factory=set)
    drift: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, ConsumerStatus] = field(default_factory=dict)

    def by_consumer(self, providers: Iterable[str]) -> dict[str, ByProvider]:
        """``{consumer: {provider: {rc: amount}}}`` over ``providers``."""
        wanted = set(providers)
        return by_consumer({rp: pa for rp, pa in self.held.items() if rp in wanted})

    def known(self, consumer: str) -> bool:
        """True when the agent may have written ``consumer``'s allocation here."""
        return (
            consumer in self.instances
            or consumer in self.claims
            or consumer in self.gone
            or consumer in self.shared
        )

    # -- what the driver lists -------------------------------------------------------

    def listed(self, present: Iterable[str]) -> None:
        """The driver lists ``present`` now (a cycle's whole listing).

        Listed consumers become instances (a claim is fulfilled, a gone one
        came back); instances no longer listed become *gone*. Called before
        any write of the cycle, and saved then (write-ahead).
        """
        now = set(present)
        for consumer in self.instances - now:
            self.vanished(consumer)
        for consumer in now:
            self.seen(consumer)

    def seen(self, consumer: str) -> None:
        """``consumer`` is listed on the node (a cycle, or a targeted read found it)."""
        self.instances.add(consumer)
        self.claims.pop(consumer, None)
        self.gone.discard(consumer)
        self.inherited.discard(consumer)
        self.absent.restart([consumer])
        self.unknown.pop(consumer, None)

    def audit_begun(self) -> None:
        """A new audit of the node: the statuses of the last one are dropped (each
        consumer gets one from this audit)."""
        self.statuses.clear()

    def unreadable(self, consumer: str) -> None:
        """Listed, but the driver cannot read it: left as Placement holds it."""
        self._status(consumer, Reason.UNREADABLE)

    def uses_nothing(self, consumer: str) -> None:
        """Listed, and its plan holds nothing here."""
        self._in_step(consumer)
        self._status(consumer, Reason.USES_NOTHING)

    def holds_plan(self, consumer: str) -> None:
        """Listed, and Placement holds its plan (this host's share of it)."""
        self._in_step(consumer)
        self._status(consumer, Reason.HOLDS_PLAN)

    def already_held(self, consumer: str, pools: ByProvider) -> None:
        """Listed; a read found Placement already holding what would be written.

        Args:
            pools: its part outside the tree as Placement holds it (on the pool
                nova chose, :func:`agent.audit.evidence.on_held_pools`): this
                host's share, compared without a read next time.
        """
        self._in_step(consumer)
        if pools:
            self.pool_parts(consumer, pools)
        self._status(consumer, Reason.ALREADY_HELD)

    def written(
        self,
        consumer: str,
        shared: ByProvider | None,
        generation: int | None,
        bulk: bool = False,
    ) -> None:
        """``consumer``'s allocation was written by the agent (a heal, a rewrite).

        Args:
            shared: its part outside the tree (the sharing provider's).
            generation: the consumer generation the write produced (None: unknown).
            bulk: written in a ``POST /allocations`` of many (it held nothing here).
        """
        self.pool_parts(consumer, shared or {})
        self.wrote.wrote(consumer, generation)
        self._in_step(consumer)
        self._status(consumer, Reason.WRITTEN_IN_BULK if bulk else Reason.WRITTEN)

    def drifts(self, consumer: str, line: str) -> bool:
        """``consumer``'s allocation differs from the plan as ``line`` says (not rewritten).

        Returns:
            True when this drift is new (to be logged), False when it was
            logged already.
        """
        new = self.drift.get(consumer) != line
        self.drift[consumer] = line
        self._status(consumer, Reason.DRIFT, drift=line)
        return new

    def found_moving(self, consumer: str, why: str) -> bool:
        """``consumer`` is listed here while nova holds it elsewhere (``why``: the evidence).

        Returns:
            True when it was not moving at the last audit (to be logged).
        """
        new = consumer not in self.moving
        self.moving.add(consumer)
        self.drift.pop(consumer, None)
        self._status(consumer, Reason.MOVING, why)
        return new

    def first_seen_unknown(self, consumer: str, now: float) -> float:
        """When ``consumer`` was first seen here as not an instance (``now`` if just now)."""
        return self.unknown.setdefault(consumer, now)

    def found_migration(self, consumer: str) -> None:
        """``consumer`` is a migration record (typed ``MIGRATION``): never removed."""
        self.migrations.add(consumer)
        self._status(consumer, Reason.MIGRATION)

    def left_alone(self, consumer: str, why: str = "") -> None:
        """``consumer`` is not an instance here and stays (``why``: the evidence keeping
        it past ``remove_unknown_allocations_after``; empty: within it, or never removed)."""
        self._status(consumer, Reason.KEPT if why else Reason.LEFT_ALONE, why)

    def settle(self, present: set[str], held: Iterable[str]) -> None:
        """After an audit: forget what is neither listed, claimed, gone nor held here.

        Args:
            present: consumers the driver lists.
            held: consumers holding something on the node's providers.
        """
        still = set(held)
        self.unknown = {c: t for c, t in self.unknown.items() if c in still}
        self.migrations &= still
        self.moving &= present
        self.drift = {c: d for c, d in self.drift.items() if c in present}
        kept = self.instances | set(self.claims) | self.gone | present
        self.shared = {c: a for c, a in self.shared.items() if c in kept}
        self.wrote = Authorship({c: g for c, g in self.wrote.items() if c in kept})
        self.absent = Absences({c: a for c, a in self.absent.items() if c in self.gone})
        self.inherited &= self.gone

    def pool_parts(self, consumer: str, parts: ByProvider) -> None:
        """``consumer``'s parts on providers outside the tree as read now (this host's
        share of them, :func:`agent.audit.evidence.this_hosts_share`); none: forgotten."""
        if parts:
            self.shared[consumer] = {rp: dict(a) for rp, a in parts.items()}
        else:
            self.shared.pop(consumer, None)

    # -- private -----------------------------------------------------------------------

    def _in_step(self, consumer: str) -> None:
        self.drift.pop(consumer, None)
        self.moving.discard(consumer)
