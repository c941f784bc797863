"""Allocations as typed data, and their conversion to and from Placement's JSON.

Placement speaks of allocations in four shapes: a consumer's ``GET
/allocations/{consumer}`` body, the ``PUT /allocations/{consumer}`` body (also
one entry of ``POST /reshaper`` and ``POST /allocations``), a provider's
``GET /resource_providers/{uuid}/allocations`` body, and the amounts per
provider and resource class inside each. This module is the only place that
reads or writes those JSON shapes; everywhere else an allocation is a
:class:`ConsumerAllocations` or a :class:`ProviderAllocations`.

The one exception is the spec's boundary: ``update_provider_tree(...,
allocations)`` and ``get_allocations_for_provider_tree`` keep the ``GET
/allocations`` shape reshape-provider-tree.txt defines ("Allocations
Parameter"); :meth:`ConsumerAllocations.from_placement` and
:meth:`ConsumerAllocations.to_spec` cross it.

Rules (Placement API reference, DESIGN.md "Placement facts"):

- amounts are positive integers; a zero amount is no allocation;
- ``consumer_generation`` is None for a consumer Placement has not seen
  (including one whose allocations were emptied), else an integer that a
  write must carry (1.28+);
- ``consumer_type`` is required from 1.38 (``INSTANCE``, ``MIGRATION``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

INSTANCE = "INSTANCE"
"""Placement consumer type of an instance (microversion 1.38)."""

MIGRATION = "MIGRATION"
"""Placement consumer type of a migration record (nova holds the source host's part on it)."""

UNKNOWN = "unknown"
"""What Placement shows (1.38+) for a consumer written without a type: every consumer
nova 34 writes (it writes at 1.28-1.36), instances and migration records alike. Not a
type a write may name (Placement's schema: ``^[A-Z0-9_]+$``)."""

Amounts = dict[str, int]
"""``{resource class: amount}`` on one provider (counts, MiB, GiB: the class's unit)."""

ByProvider = dict[str, Amounts]
"""``{provider UUID: {resource class: amount}}``: one consumer's allocations."""


def clean_amounts(resources: Mapping[str, Any]) -> Amounts:
    """``{rc: amount}`` with integer amounts and zero amounts dropped, sorted by class.

    Raises:
        ValueError, TypeError: an amount is not an integer.
    """
    return {rc: int(n) for rc, n in sorted(resources.items()) if int(n)}


def clean_by_provider(allocations: Mapping[str, Mapping[str, Any]]) -> ByProvider:
    """``{rp: {rc: amount}}`` sorted, without zero amounts or providers left empty."""
    out: ByProvider = {}
    for rp in sorted(allocations):
        amounts = clean_amounts(allocations[rp])
        if amounts:
            out[rp] = amounts
    return out


def _amounts_of(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``{rc: n}`` of a ``{"resources": {...}}`` entry (Placement's per-provider shape)."""
    return value.get("resources") or {}


@dataclass(frozen=True, slots=True)
class ConsumerAllocations:
    """One consumer's allocations, across every provider it uses.

    Attributes:
        allocations: ``{provider UUID: {resource class: amount}}`` (no zeros).
        project_id: the owning project; None when unknown (nothing written yet).
        user_id: the owning user; None when unknown.
        consumer_type: ``INSTANCE``, ``MIGRATION``, ... (Placement 1.38).
        generation: the consumer generation Placement last reported; None for
            a consumer Placement does not know. A write must carry it.
    """

    allocations: ByProvider = field(default_factory=dict)
    project_id: str | None = None
    user_id: str | None = None
    consumer_type: str = INSTANCE
    generation: int | None = None

    # -- Placement's JSON ------------------------------------------------------

    @classmethod
    def from_placement(cls, body: Mapping[str, Any]) -> ConsumerAllocations:
        """Parse a ``GET /allocations/{consumer}`` body (or one spec "Allocations Parameter").

        Placement answers ``{"allocations": {}}`` with no owner for a consumer
        it does not know.

        Raises:
            ValueError, TypeError: an amount is not an integer.
        """
        per_rp = body.get("allocations") or {}
        return cls(
            allocations=clean_by_provider({rp: _amounts_of(a) for rp, a in per_rp.items()}),
            project_id=body.get("project_id"),
            user_id=body.get("user_id"),
            consumer_type=body.get("consumer_type") or INSTANCE,
            generation=body.get("consumer_generation"),
        )

    def to_placement(self) -> dict[str, Any]:
        """The ``PUT /allocations/{consumer}`` body (also a ``POST /reshaper`` entry).

        Raises:
            ValueError: the owner is unknown (Placement requires it on a write).
        """
        if self.project_id is None or self.user_id is None:
            raise ValueError("an allocation write needs the consumer's project_id and user_id")
        # The same fields as the GET (less the per-provider generations it carries).
        body = self.to_spec()
        if body["consumer_type"] == UNKNOWN:
            # A write from 1.38 must name a type (sending 'unknown' back is a 400). The
            # agent writes untyped consumers only as instances, or moving them in a
            # reshape (a migration record then becomes INSTANCE: nova reads no type).
            body["consumer_type"] = INSTANCE
        return body

    def to_spec(self) -> dict[str, Any]:
        """The ``GET /allocations/{consumer}`` shape (the spec's Allocations Parameter)."""
        return {
            "allocations": {rp: {"resources": dict(a)} for rp, a in self.allocations.items()},
            "project_id": self.project_id,
            "user_id": self.user_id,
            "consumer_generation": self.generation,
            "consumer_type": self.consumer_type,
        }

    # -- reading ---------------------------------------------------------------

    def __bool__(self) -> bool:
        """True when the consumer holds anything anywhere."""
        return bool(self.allocations)

    @property
    def providers(self) -> set[str]:
        """UUIDs of the providers the consumer holds something on."""
        return set(self.allocations)

    def on(self, providers: Iterable[str]) -> ByProvider:
        """The part held on ``providers``."""
        wanted = set(providers)
        return {rp: dict(a) for rp, a in self.allocations.items() if rp in wanted}

    def without(self, providers: Iterable[str]) -> ByProvider:
        """The part held anywhere but on ``providers``."""
        gone = set(providers)
        return {rp: dict(a) for rp, a in self.allocations.items() if rp not in gone}

    def with_allocations(self, allocations: Mapping[str, Mapping[str, Any]]) -> ConsumerAllocations:
        """The same consumer (owner, type, generation) holding ``allocations`` instead."""
        return replace(self, allocations=clean_by_provider(allocations))


def merge_ours(
    held: ConsumerAllocations,
    want: ConsumerAllocations,
    ours: Iterable[str],
    keep: Iterable[str] = (),
    *,
    produces: Collection[str] | None = None,
) -> ConsumerAllocations:
    """``want``'s part on this agent's providers written over ``held``, everything else kept.

    The rule of every write the agent makes to a consumer (docs/service.md,
    "Ownership"): parts on providers the agent does not own (another host's
    compute node during a migration, a network agent's bandwidth provider, a
    provider without the owner trait) are kept as Placement holds them;
    parts on ``ours`` become exactly ``want``'s; providers in ``keep``
    (hardware gone while in use) stay as held. With ``produces``, a
    resource class the writer's planner cannot produce is never dropped
    (issue 26: a flavor's ``resources:CUSTOM_*``, a VGPU or VF the import
    does not plan): held on one of ``ours``, it stays as held, whatever
    ``want`` says of it.

    Args:
        held: what Placement holds now (its generation is the one written).
        want: what the agent wants the consumer to hold on its providers; its
            owner and type are written (a consumer Placement does not know
            has none).
        ours: the providers whose part the agent decides (its own tree's
            providers it owns, and a sharing provider it allocated on).
        keep: providers in ``ours`` whose part stays as held.
        produces: the resource classes the writer's planner can put in a
            plan; only those are decided on ``ours``. None: every class is
            (each part on ``ours`` becomes exactly ``want``'s).

    Returns:
        The consumer to write: ``held``'s generation, ``want``'s owner and type
        (``held``'s where ``want`` names none).
    """
    kept = set(keep)
    decided = set(ours) - kept
    merged = held.without(decided)
    for rp, amounts in want.allocations.items():
        if rp not in kept:
            merged[rp] = dict(amounts)
    if produces is not None:
        for rp in decided & held.allocations.keys():
            unplanned = {rc: n for rc, n in held.allocations[rp].items() if rc not in produces}
            if unplanned:
                merged[rp] = {**merged.get(rp, {}), **unplanned}
    return ConsumerAllocations(
        allocations=clean_by_provider(merged),
        project_id=want.project_id or held.project_id,
        user_id=want.user_id or held.user_id,
        consumer_type=want.consumer_type or held.consumer_type,
        generation=held.generation,
    )


@dataclass(frozen=True, slots=True)
class ProviderAllocations:
    """What every consumer holds on one provider (``GET /resource_providers/{uuid}/allocations``).

    Attributes:
        generation: the provider generation of the read. It does not move on
            ``DELETE /allocations/{consumer}`` (DESIGN.md, "Placement facts"),
            so an unchanged generation does not prove unchanged allocations.
        consumers: ``{consumer UUID: {resource class: amount}}``.
        consumer_generations: ``{consumer UUID: consumer generation}`` as the
            read showed them (microversion 1.28 and later; placement's
            ``_serialize_allocations_for_resource_provider``): every write of a
            consumer's allocations moves it, so an unchanged one says the
            consumer holds what it held on every provider. Empty when unknown
            (an older record, or written here by the agent); not compared.
    """

    generation: int | None
    consumers: dict[str, Amounts] = field(default_factory=dict)
    consumer_generations: dict[str, int | None] = field(default_factory=dict, compare=False)

    @classmethod
    def from_placement(cls, body: Mapping[str, Any]) -> ProviderAllocations:
        """Parse a ``GET /resource_providers/{uuid}/allocations`` body."""
        consumers = {}
        generations: dict[str, int | None] = {}
        for consumer, value in sorted((body.get("allocations") or {}).items()):
            amounts = clean_amounts(_amounts_of(value))
            if amounts:
                consumers[consumer] = amounts
                if isinstance(value, Mapping) and "consumer_generation" in value:
                    generations[consumer] = value["consumer_generation"]
        return cls(body.get("resource_provider_generation"), consumers, generations)

    def with_parts(
        self,
        rp: str,
        parts: Mapping[str, ByProvider],
        generation: int | None,
        generations: Mapping[str, int | None] | None = None,
    ) -> ProviderAllocations:
        """These allocations (of provider ``rp``) with each consumer of ``parts`` holding
        here what it now holds on ``rp`` (nothing: gone from it); the one home of "a
        provider's allocations with one consumer's part replaced" (issue 39).

        Args:
            rp: this provider's UUID.
            parts: ``{consumer: {provider: {rc: amount}}}`` as each holds now.
            generation: the provider generation of the result.
            generations: ``{consumer: consumer generation}`` of ``parts`` where known
                (the others' generations are dropped: unknown).

        Returns:
            A new :class:`ProviderAllocations`.
        """
        known = generations or {}
        consumers = {c: dict(a) for c, a in self.consumers.items() if c not in parts}
        gens = {c: g for c, g in self.consumer_generations.items() if c not in parts}
        for consumer, held in parts.items():
            if held.get(rp):
                consumers[consumer] = dict(held[rp])
                if known.get(consumer) is not None:
                    gens[consumer] = known[consumer]
        return ProviderAllocations(generation, consumers, gens)


def by_consumer(per_provider: Mapping[str, ProviderAllocations]) -> dict[str, ByProvider]:
    """Turn ``{provider: ProviderAllocations}`` into ``{consumer: {provider: {rc: n}}}``."""
    out: dict[str, ByProvider] = {}
    for rp in sorted(per_provider):
        for consumer, amounts in per_provider[rp].consumers.items():
            out.setdefault(consumer, {})[rp] = dict(amounts)
    return out
