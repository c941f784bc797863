"""The allocation audit: what every instance should hold against what Placement holds.

Rules (resource-providers-allocations.txt; DESIGN.md "Allocations"):

- An instance of this host gets the allocation the driver's layout gives it
  (:func:`agent.allocations.plan_allocations`). A missing or different one is
  written with the consumer's generation. Allocations it holds on providers
  that are not this agent's (outside the tree, or a child without the owner
  trait, e.g. a network agent's bandwidth provider) are kept as they are.
- An instance that was on this host and is gone loses this host's part of
  its allocations (a 404 is fine; its allocations elsewhere stay).
- A consumer this agent never saw as an instance (an instance being built, a
  migration, another service) is left alone, unless
  ``[compute] remove_unknown_allocations_after`` is set and that many seconds
  passed since it was first seen.

Cost: Placement bumps a provider's generation whenever allocations against
it change, so ``GET /resource_providers/{uuid}/allocations`` is only sent
for providers whose generation moved since the last audit. A steady host
costs no request here beyond the tree read the sync already made.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.allocations import CONSUMER_TYPE, AllocationRecord
from agent.placement.errors import PlacementError
from agent.report import ReportClient
from agent.state import StateStore

LOG = logging.getLogger(__name__)

Held = dict[str, dict[str, dict[str, int]]]
"""``{provider UUID: {consumer UUID: {resource class: amount}}}``."""


@dataclass
class AuditRecord:
    """What the audit remembers about one node between cycles (``state_path``).

    Attributes:
        instances: consumer UUIDs of the instances seen on the node.
        unknown: consumer UUID -> when first seen (seconds since the epoch)
            for consumers on the node's providers that are not instances.
        held: allocations on each provider of the node as last read.
        generations: provider generation at which ``held`` was read.
        shared: what the audit last wrote for each consumer on providers
            outside the tree (the shared-storage provider's DISK_GB).
    """

    instances: set[str] = field(default_factory=set)
    unknown: dict[str, float] = field(default_factory=dict)
    held: Held = field(default_factory=dict)
    generations: dict[str, int] = field(default_factory=dict)
    shared: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> AuditRecord:
        """Parse a stored record; anything malformed gives an empty record (re-read)."""
        if not doc:
            return cls()
        try:
            return cls(
                instances={str(c) for c in doc["instances"]},
                unknown={str(c): float(t) for c, t in doc["unknown"].items()},
                held={
                    str(rp): {
                        str(c): {str(rc): int(n) for rc, n in res.items()}
                        for c, res in consumers.items()
                    }
                    for rp, consumers in doc["held"].items()
                },
                generations={str(rp): int(g) for rp, g in doc["generations"].items()},
                shared={
                    str(c): {
                        str(rp): {str(rc): int(n) for rc, n in res.items()} for rp, res in a.items()
                    }
                    for c, a in doc.get("shared", {}).items()
                },
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            LOG.warning("allocation audit state is unusable (%s); reading it from Placement", exc)
            return cls()

    def to_json(self) -> dict[str, Any]:
        """The record as stored in ``consumers.json``."""
        return {
            "instances": sorted(self.instances),
            "unknown": dict(sorted(self.unknown.items())),
            "held": self.held,
            "generations": self.generations,
            "shared": dict(sorted(self.shared.items())),
        }

    def by_consumer(self, providers: Iterable[str]) -> dict[str, dict[str, dict[str, int]]]:
        """``{consumer: {provider: {rc: amount}}}`` over ``providers``."""
        out: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
        for rp in providers:
            for consumer, res in self.held.get(rp, {}).items():
                out[consumer][rp] = res
        return out


@dataclass
class AuditResult:
    """What one audit of one node did.

    Attributes:
        written: consumers whose allocations were written.
        removed: consumers whose allocations on this host were removed.
        unknown: consumers left alone because the agent does not know them.
        reads: providers whose allocations were read from Placement.
        errors: one line per allocation that could not be written.
    """

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    reads: int = 0
    errors: list[str] = field(default_factory=list)


def _local(allocations: dict[str, Any], providers: set[str]) -> dict[str, dict[str, int]]:
    """The part of ``{rp: {"resources": {...}}}`` or ``{rp: {...}}`` on ``providers``."""
    out = {}
    for rp, value in allocations.items():
        if rp in providers:
            res = value.get("resources", value) if isinstance(value, dict) else value
            out[rp] = {rc: int(n) for rc, n in res.items() if n}
    return out


class AllocationAudit:
    """Keeps the allocations of one agent's instances right, node by node.

    Args:
        report: the Placement façade.
        state: where the per-node :class:`AuditRecord` is kept.
        remove_unknown_after: seconds (``[compute] remove_unknown_allocations_after``);
            0 never removes unknown consumers.
        clock: seconds since the epoch (tests pass their own).
    """

    def __init__(
        self,
        report: ReportClient,
        state: StateStore,
        remove_unknown_after: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.report = report
        self.state = state
        self.remove_unknown_after = remove_unknown_after
        self.clock = clock

    def record(self, nodename: str) -> AuditRecord:
        """The stored record of ``nodename`` (empty when there is none)."""
        return AuditRecord.from_json(self.state.consumers(nodename))

    def save(self, nodename: str, record: AuditRecord) -> None:
        """Store ``record`` for ``nodename``."""
        self.state.set_consumers(nodename, record.to_json())

    def refresh(self, nodename: str, record: AuditRecord, owned: set[str]) -> int:
        """Re-read the allocations of every owned provider whose generation moved.

        Returns:
            The number of providers read.
        """
        generations = self.report.provider_generations(nodename)
        for rp in set(record.held) - owned:
            record.held.pop(rp, None)
            record.generations.pop(rp, None)
        reads = 0
        for rp in sorted(owned):
            gen = generations.get(rp)
            if gen is not None and record.generations.get(rp) == gen and rp in record.held:
                continue
            record.held[rp] = self.report.provider_allocations(rp)
            reads += 1
            if gen is not None:
                record.generations[rp] = gen
        return reads

    def run(
        self,
        nodename: str,
        owned: set[str],
        expected: dict[str, AllocationRecord],
        instances: set[str],
        keep: set[str] | frozenset[str] = frozenset(),
    ) -> AuditResult:
        """Audit the allocations on node ``nodename``'s providers.

        Args:
            nodename: the compute node.
            owned: UUIDs of the providers of this node that the agent owns
                (the compute node and the children carrying the owner trait).
            expected: ``{consumer: AllocationRecord}`` from the driver
                (``ComputeDriver.expected_allocations``).
            instances: every instance UUID the driver lists on the node
                (including those that use nothing).
            keep: owned providers whose existing allocations stay as they are
                (hardware that is gone while instances still use it).

        Returns:
            An :class:`AuditResult`; failures of single consumers are in
            ``errors`` and do not stop the audit.

        Raises:
            PlacementUnavailable: Placement cannot be reached (the cycle fails).
        """
        result = AuditResult()
        stored = self.state.consumers(nodename)
        record = AuditRecord.from_json(stored)
        result.reads = self.refresh(nodename, record, owned)
        held = record.by_consumer(owned)
        managed = owned - keep
        touched: set[str] = set()

        for consumer, want in sorted(expected.items()):
            want_local = _local(want["allocations"], managed)
            have_local = _local(held.get(consumer, {}), managed)
            outside = set(want["allocations"]) - owned
            want_shared = _local(want["allocations"], outside)
            have_shared = record.shared.get(consumer, {})
            if want_local == have_local and want_shared == have_shared:
                continue
            try:
                # What it held on a previous sharing provider is replaced too.
                self._write(consumer, want, owned | set(have_shared), keep)
            except PlacementError as exc:
                line = f"instance {consumer}: allocation not written: {exc}"
                LOG.error(line)
                result.errors.append(line)
                continue
            result.written.append(consumer)
            if want_shared:
                record.shared[consumer] = want_shared
            else:
                record.shared.pop(consumer, None)
            touched |= set(held.get(consumer, {})) | set(want_local)
            LOG.info("instance %s: allocation written (%s)", consumer, want_local)

        gone = record.instances - instances
        now = self.clock()
        for consumer in sorted(set(held) | gone):
            if consumer in instances:
                continue
            if consumer in gone:
                reason = "its instance is gone from this host"
            else:
                first = record.unknown.setdefault(consumer, now)
                grace = self.remove_unknown_after
                if not grace or now - first < grace:
                    result.unknown.append(consumer)
                    continue
                reason = f"not an instance of this host for {int(now - first)} s"
            if consumer not in held and consumer not in record.shared:
                continue
            try:
                ours = owned | set(record.shared.get(consumer, {}))
                self.report.remove_allocations_from(consumer, ours)
            except PlacementError as exc:
                line = f"consumer {consumer}: allocations not removed: {exc}"
                LOG.error(line)
                result.errors.append(line)
                continue
            record.unknown.pop(consumer, None)
            record.shared.pop(consumer, None)
            result.removed.append(consumer)
            touched |= set(held.get(consumer, {}))
            LOG.info("consumer %s: allocations on this host removed (%s)", consumer, reason)

        record.instances = set(instances)
        record.shared = {c: a for c, a in record.shared.items() if c in instances}
        record.unknown = {c: t for c, t in record.unknown.items() if c in held}
        # Our own writes moved these generations: read them again next time.
        for rp in touched:
            record.generations.pop(rp, None)
        if record.to_json() != stored:  # a steady host writes nothing
            self.save(nodename, record)
        return result

    def _write(
        self,
        consumer: str,
        want: AllocationRecord,
        owned: set[str],
        keep: set[str] | frozenset[str],
    ) -> None:
        """Write ``want`` on this host's providers, keeping what the consumer holds elsewhere."""

        def edit(held: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
            merged = {rp: r for rp, r in held.items() if rp not in owned or rp in keep}
            for rp, a in want["allocations"].items():
                if rp not in keep:
                    merged[rp] = dict(a["resources"])
            return merged

        owner = (want["project_id"], want["user_id"], want.get("consumer_type") or CONSUMER_TYPE)
        self.report.edit_allocations(consumer, edit, owner)

    def forget_instance(self, nodename: str, consumer: str) -> set[str]:
        """Drop ``consumer`` from the known instances (its claim is being given back).

        Returns:
            The providers outside the tree it was given allocations on (the
            sharing provider), to clear along with this host's own.
        """
        record = self.record(nodename)
        shared = set(record.shared.pop(consumer, {}))
        record.instances.discard(consumer)
        self.save(nodename, record)
        return shared

    def add_instance(
        self, nodename: str, consumer: str, shared: dict[str, dict[str, int]] | None = None
    ) -> None:
        """Count ``consumer`` as an instance of ``nodename`` (a claim).

        Args:
            shared: what the claim allocates on providers outside the tree.
        """
        record = self.record(nodename)
        record.instances.add(consumer)
        record.unknown.pop(consumer, None)
        if shared:
            record.shared[consumer] = shared
        self.save(nodename, record)
