"""Who holds what on one node: the audit's durable record and the state of each consumer.

One type, :class:`ConsumerRecord`, owns every transition of what the agent
remembers about the consumers of a node (as openstack/placement's
``objects/consumer.py`` keeps a consumer's transitions in one place): the
audit, claims and targeted updates call its methods and never edit its
fields. It is kept in ``state_path`` (``consumers/NODE.json``) and saved *before*
a request that writes an allocation is sent (write-ahead), so a failure at
any instant after a write leaks nothing: an instance whose allocation was
written is always in the record, and so is removed once it is gone.

Each consumer of the node is in one :class:`State`, derived from evidence
(docs/service.md, "Allocation audit"):

========================  ==========================================================
state                     evidence
========================  ==========================================================
``instance here``         the driver lists it, and its consumer holds something on
                          this node's providers, or nothing anywhere
``moving``                the driver lists it, it holds nothing here, and it holds
                          CPU or memory on a provider outside this node's tree (nova
                          moved it: resize or live migration in progress, evacuated)
``claimed, building``     claimed through the tracker, not listed yet (kept until
                          listed or ``[DEFAULT] instance_build_timeout`` passes)
``gone``                  listed (or claimed) earlier, not now; this host's part is
                          removed, and the consumer stays here until Placement
                          confirms it
``not an instance``       holds resources here, never listed here: nova's migration
                          record, another service's consumer, a scheduler's claim
========================  ==========================================================
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.model.allocations import ByProvider, ProviderAllocations, by_consumer, clean_by_provider

LOG = logging.getLogger(__name__)


class State(enum.StrEnum):
    """The state of one consumer on one node (module docstring)."""

    HERE = "instance here"
    MOVING = "moving"
    BUILDING = "claimed, building"
    GONE = "gone"
    FOREIGN = "not an instance"


@dataclass(frozen=True)
class ConsumerStatus:
    """One consumer's state on a node and why (``compute-agent show``, metrics).

    Attributes:
        consumer: the consumer UUID.
        state: its :class:`State`.
        why: the evidence, one line.
        drift: for an instance here, how Placement differs from the plan
            (empty when it does not).
    """

    consumer: str
    state: State
    why: str
    drift: str = ""

    def to_json(self) -> dict[str, str]:
        """``{"consumer", "state", "why", "drift"}``, as strings."""
        return {k: str(v) for k, v in vars(self).items()}


@dataclass
class ConsumerRecord:
    """What the audit remembers about one node's consumers between cycles (``state_path``).

    Fields are read freely; they are changed only by this class's methods.

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
            a heal): removed as soon as they are gone.
        deferred: gone instances whose allocation another writer made (nova's
            scheduler), already found gone once: nova cleans up its own on
            delete, confirm, revert and evacuation, so the agent removes them
            only when a second audit still finds them (a revert's
            ``move_allocations`` is never raced).
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
    held: dict[str, ProviderAllocations] = field(default_factory=dict)
    shared: dict[str, ByProvider] = field(default_factory=dict)
    migrations: set[str] = field(default_factory=set)
    wrote: set[str] = field(default_factory=set)
    deferred: set[str] = field(default_factory=set)
    drift: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, ConsumerStatus] = field(default_factory=dict)

    # -- storage -------------------------------------------------------------------

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None) -> ConsumerRecord:
        """Parse a stored record; anything malformed gives an empty record (re-read)."""
        return _parse(doc)

    def to_json(self) -> dict[str, Any]:
        """The record as stored in ``consumers/NODE.json``."""
        held = sorted(self.held.items())
        return {
            "instances": sorted(self.instances),
            "claims": dict(sorted(self.claims.items())),
            "gone": sorted(self.gone),
            "moving": sorted(self.moving),
            "unknown": dict(sorted(self.unknown.items())),
            "held": {rp: pa.consumers for rp, pa in held},
            "generations": {rp: pa.generation for rp, pa in held if pa.generation is not None},
            "consumer_generations": {
                rp: dict(sorted(pa.consumer_generations.items()))
                for rp, pa in held
                if pa.consumer_generations
            },
            "shared": dict(sorted(self.shared.items())),
            "migrations": sorted(self.migrations),
            "wrote": sorted(self.wrote),
            "deferred": sorted(self.deferred),
            "drift": dict(sorted(self.drift.items())),
            "states": {
                c: {"state": str(s.state), "why": s.why, "drift": s.drift}
                for c, s in sorted(self.statuses.items())
            },
        }

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
        self.deferred.discard(consumer)
        self.unknown.pop(consumer, None)

    def vanished(self, consumer: str) -> None:
        """``consumer`` was an instance here and is no longer listed: *gone*."""
        self.instances.discard(consumer)
        self.moving.discard(consumer)
        self.drift.pop(consumer, None)
        self.gone.add(consumer)

    # -- claims ------------------------------------------------------------------------

    def claimed(self, consumer: str, when: float, shared: ByProvider | None = None) -> None:
        """A claim through the tracker: *claimed, building* until listed.

        Args:
            when: seconds since the epoch.
            shared: what the claim allocates outside the tree (sharing provider).
        """
        if consumer not in self.instances:
            self.claims[consumer] = when
        self.wrote.add(consumer)
        self.gone.discard(consumer)
        self.unknown.pop(consumer, None)
        if shared:
            self.shared[consumer] = dict(shared)

    def claim_given_back(self, consumer: str) -> set[str]:
        """The claim is given back (the spawn failed, or it was destroyed).

        Returns:
            The providers outside the tree it was given allocations on (to
            clear along with this host's own).
        """
        shared = set(self.shared.pop(consumer, {}))
        self.claims.pop(consumer, None)
        self.wrote.discard(consumer)
        self.instances.discard(consumer)
        self.moving.discard(consumer)
        self.gone.discard(consumer)
        return shared

    def expire_claims(self, now: float, grace: float) -> list[str]:
        """Claims older than ``grace`` seconds become *gone* (0: never).

        Returns:
            The expired claims.
        """
        if not grace:
            return []
        expired = sorted(c for c, t in self.claims.items() if now - t >= grace)
        for consumer in expired:
            del self.claims[consumer]
            self.gone.add(consumer)
        return expired

    # -- writes ------------------------------------------------------------------------

    def written(self, consumer: str, shared: ByProvider | None) -> None:
        """``consumer``'s allocation was written (``shared``: its part outside the tree)."""
        if shared:
            self.shared[consumer] = dict(shared)
        else:
            self.shared.pop(consumer, None)
        self.wrote.add(consumer)
        self.moving.discard(consumer)

    def holds_on_pools(self, consumer: str, shared: ByProvider) -> None:
        """``consumer``, an instance here, holds ``shared`` outside the tree as Placement
        has it now (its part on the pool nova chose, :func:`agent.tracker.evidence.on_held_pools`):
        this host's share, compared without a read next time."""
        if shared:
            self.shared[consumer] = {rp: dict(a) for rp, a in shared.items()}

    def rewritten_by_others(self, consumers: Iterable[str]) -> None:
        """Another writer wrote ``consumers`` since the agent did (issue 33, case 6): their
        allocation is no longer the agent's own, so a momentary absence of the domain
        does not release it at once (:meth:`removal_due`)."""
        self.wrote.difference_update(consumers)

    def is_moving(self, consumer: str, why: str) -> None:
        """``consumer`` is listed here while nova holds its CPU and memory elsewhere."""
        self.moving.add(consumer)
        self.drift.pop(consumer, None)
        self.statuses[consumer] = ConsumerStatus(consumer, State.MOVING, why)

    def removal_confirmed(self, consumer: str) -> None:
        """Placement holds nothing of ``consumer`` here any more (or never did)."""
        self.gone.discard(consumer)
        self.shared.pop(consumer, None)
        self.unknown.pop(consumer, None)
        self.claims.pop(consumer, None)
        self.wrote.discard(consumer)
        self.deferred.discard(consumer)

    def removal_due(self, consumer: str) -> bool:
        """Whether this audit removes gone ``consumer``'s part here (``deferred``).

        True for an allocation the agent wrote, and for another writer's
        found gone by an earlier audit; otherwise it is deferred to the next.
        """
        if consumer in self.wrote or consumer in self.deferred:
            return True
        self.deferred.add(consumer)
        return False

    def drifted(self, consumer: str, line: str) -> bool:
        """Note that ``consumer``'s allocation differs from the plan as ``line`` says.

        Returns:
            True when this drift is new (to be logged), False when it was
            logged already.
        """
        new = self.drift.get(consumer) != line
        self.drift[consumer] = line
        return new

    def in_step(self, consumer: str) -> None:
        """``consumer``'s allocation matches the plan (no drift)."""
        self.drift.pop(consumer, None)
        self.moving.discard(consumer)

    # -- consumers that are not instances ---------------------------------------------

    def first_seen_unknown(self, consumer: str, now: float) -> float:
        """When ``consumer`` was first seen here as not an instance (``now`` if just now)."""
        return self.unknown.setdefault(consumer, now)

    def is_migration(self, consumer: str) -> None:
        """``consumer`` is a migration record (typed ``MIGRATION``): never removed."""
        self.migrations.add(consumer)

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
        self.wrote &= kept
        self.deferred &= self.gone

    def status(self, consumer: str, state: State, why: str, drift: str = "") -> None:
        """Note the state the audit derived for ``consumer`` (shown, counted)."""
        self.statuses[consumer] = ConsumerStatus(consumer, state, why, drift)

    def state_counts(self) -> dict[str, int]:
        """``{state: consumers}`` of the last audit, every state present (metrics)."""
        counts = {str(s): 0 for s in State}
        for status in self.statuses.values():
            counts[str(status.state)] += 1
        return counts

    # -- what Placement holds (reads) --

    def provider_read(self, rp: str, allocations: ProviderAllocations | None) -> None:
        """``rp``'s allocations as read, derived or written (None: not the node's any more)."""
        self.held.pop(rp, None) if allocations is None else self.held.update({rp: allocations})

    def pool_parts(self, consumer: str, parts: ByProvider) -> None:
        """``consumer``'s parts on providers outside the tree (none: forgotten)."""
        self.shared.update({consumer: dict(parts)}) if parts else self.shared.pop(consumer, None)


def _parse(doc: Mapping[str, Any] | None) -> ConsumerRecord:
    """A stored record (:meth:`ConsumerRecord.from_json`)."""
    cls = ConsumerRecord
    if not doc:
        return cls()
    try:
        generations = {str(rp): int(g) for rp, g in doc["generations"].items()}
        consumer_gens = doc.get("consumer_generations", {})
        return cls(
            instances={str(c) for c in doc["instances"]},
            claims={str(c): float(t) for c, t in doc.get("claims", {}).items()},
            gone={str(c) for c in doc.get("gone", [])},
            moving={str(c) for c in doc.get("moving", [])},
            unknown={str(c): float(t) for c, t in doc["unknown"].items()},
            held={
                str(rp): ProviderAllocations(
                    generations.get(rp),
                    dict(clean_by_provider(consumers)),
                    {str(c): g for c, g in consumer_gens.get(rp, {}).items()},
                )
                for rp, consumers in doc["held"].items()
            },
            shared={str(c): clean_by_provider(a) for c, a in doc.get("shared", {}).items()},
            migrations={str(c) for c in doc.get("migrations", [])},
            wrote={str(c) for c in doc.get("wrote", [])},
            deferred={str(c) for c in doc.get("deferred", [])},
            drift={str(c): str(d) for c, d in doc.get("drift", {}).items()},
            statuses={
                str(c): ConsumerStatus(str(c), State(s["state"]), str(s["why"]), s["drift"])
                for c, s in doc.get("states", {}).items()
            },
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        LOG.warning("allocation audit state is unusable (%s); reading it from Placement", exc)
        return cls()
