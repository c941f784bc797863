"""One node's allocation reads of one cycle: each fact read once, and the rules that save reads.

Two readers need a node's allocations in one cycle: the mirror, to *vouch*
for a provider whose generation moved (were allocation writes all that moved
it? then its inventories, traits and aggregates are as the mirror holds them,
:mod:`agent.placement.details`), and the allocation audit
(:mod:`agent.audit.audit_read`). :class:`AllocationReads` serves both from
one store, so a provider's or a consumer's allocations are read at most once
per cycle (issue 33, "Reads that pay once": nova claiming 10 instances, each
with a VF on a PF of its own, cost the unchanged cycle plus 20 reads, each
moved PF's allocations and then each changed consumer; now plus 10).

The rules, each a saving that can only make the agent read more when its
premise fails, never less:

- **The vouch** (:func:`explains`, issue 28). Placement moves a provider's
  generation on every write of its inventories, traits or aggregates, and
  once per allocation write request that leaves allocations on it
  (placement's ``_set_allocations``), a ``PUT`` of empty allocations included
  (recorded as allocations of 0). Each consumer whose allocations on the
  provider are new, differ from what the audit last recorded, or are gone was
  changed by at most one such write naming the provider, so when the
  generation moved by no more than the number of such consumers, allocation
  writes account for every move. What the rule assumes: another writer places
  one consumer on a provider per request (nova's report client:
  ``PUT /allocations/{consumer}`` for claims; ``POST /allocations`` in
  ``move_allocations`` places only the target consumer on each provider); the
  agent's own bulk writes are counted exactly (:mod:`agent.placement.own_writes`)
  and explain nothing when its state does not record them (issue 33, case 6).
  A consumer gone from the provider while another took exactly its amounts there
  counts once with it: nova's ``move_allocations`` moves both in one request
  (issue 39, case 9). A request placing k consumers on one provider counts 1
  where the rule counts k, and could hide k - 1 writes of other details; so could
  a consumer gone
  from the provider by a write that moves nothing there (``DELETE
  /allocations/{consumer}``, a ``PUT`` leaving it parts elsewhere only), counted
  as the ``PUT`` of empty allocations nova's ``delete_allocation_for_instance``
  sends without ``force`` (a resize confirm's migration record), which moves
  one on each provider it held. Those are still found: a
  vouched provider is read before any write of its details, and after
  ``[compute] resource_provider_association_refresh`` seconds, a restart
  included (:class:`agent.placement.details.Vouched`).
- **The consumers tell what moved a device** (issue 33). The CPU and memory
  providers (VCPU, PCPU or MEMORY_MB inventory) are read every cycle anyway;
  their consumer generations name the consumers written since the last audit
  (:func:`changed_consumers`), and ``GET /allocations/{consumer}`` of each
  shows all it holds now. A moved device provider is then known without
  reading it: what the audit recorded there, with each changed consumer's
  part as it is now; when those parts explain the move (the vouch's rule on
  that derived listing), the provider's allocations and its details are both
  taken as known. Otherwise (a consumer on the device alone, an operator's
  write) the device is read, as before.
- **Created providers hold nothing** (:meth:`AllocationReads.created`): a
  provider this client created in this cycle is recorded empty at its
  generation, with no read (a first start costs no read per provider).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from agent.model.allocations import ConsumerAllocations, ProviderAllocations
from agent.model.provider_tree import ProviderTree
from agent.placement.pool import Pool

CPU_AND_MEMORY = frozenset({"VCPU", "PCPU", "MEMORY_MB"})
"""Classes every instance of a host holds: a provider with one of them is read every cycle."""


@dataclass(frozen=True)
class Known:
    """What the node's last audit recorded, as plain data (the tracker gives it).

    Attributes:
        held: ``{provider: its allocations as last recorded}`` (owned providers).
        own: consumers the agent itself may have written (its instances and claims).
    """

    held: Mapping[str, ProviderAllocations]
    own: Collection[str] = frozenset()


def explains(
    old: ProviderAllocations, fresh: ProviderAllocations, own: Collection[str] = ()
) -> bool:
    """True when allocation writes account for every move from ``old`` to ``fresh``.

    Args:
        old: the provider's allocations as the audit last recorded them, at
            the generation the mirror's details are known at.
        fresh: the provider's allocations now (read, or derived from its
            consumers' reads), at the generation now listed or later; with
            consumer generations (microversion 1.28 or later).
        own: consumers the agent itself may have written. A change of theirs
            the record does not hold is a write of the agent's own its state
            does not record (killed between the write and saving the record):
            its bulk write places many consumers per request, so it explains no
            move (issue 33, case 6).

    Returns:
        True when the generation moved by no more than the consumers whose
        allocations here are new, differ or are gone (module docstring); False
        when it cannot tell (no generations).
    """
    if old.generation is None or fresh.generation is None:
        return False
    moved = fresh.generation - old.generation
    if moved < 0:
        return False  # generations only grow: not the provider the record knew
    if fresh.consumers and not fresh.consumer_generations:
        return False  # a microversion before 1.28
    changed = [
        amounts
        for c, amounts in fresh.consumers.items()
        if old.consumers.get(c) != amounts and c not in own
    ]
    # A consumer gone from the provider was removed by a write naming it: nova's
    # delete_allocation_for_instance without force PUTs empty allocations, which
    # Placement records as allocations of 0 on each provider it held, moving each one's
    # generation (a DELETE moves none: then the count is one too generous, the
    # module docstring's limit). But one gone while another consumer took exactly its
    # amounts here may be one request moving both (nova's move_allocations: one POST,
    # the source emptied, the target given its allocations; issue 39, case 9): the
    # pair counts once, or an operator's write in the same interval would be hidden.
    emptied = 0
    for c, amounts in old.consumers.items():
        if c in fresh.consumers or c in own:
            continue
        if amounts in changed:
            changed.remove(amounts)  # paired: counted below as the target's one write
        emptied += 1
    written = len(changed)
    return moved <= written + emptied


def changed_consumers(
    old: ProviderAllocations | None, fresh: ProviderAllocations
) -> set[str] | None:
    """The consumers of a CPU and memory provider that may have changed anywhere since ``old``.

    Every write of a consumer's allocations moves its consumer generation
    (Placement API reference, microversion 1.28), and every write that leaves
    a consumer on a provider moves the provider's generation; a consumer
    deleted or moved off disappears from the listing. So: a consumer that
    appeared or disappeared, and, when the provider's generation moved, each
    whose consumer generation moved or was not known (written by the agent
    itself: its write is proven by the provider's generation being the one
    expected, :mod:`agent.placement.own_writes`, and then nothing else wrote here).

    Returns:
        The consumers to read again, or None when ``old`` cannot tell (no
        record, no generation, or a read without consumer generations).
    """
    if old is None or old.generation is None or fresh.generation is None:
        return None
    if fresh.consumers and not fresh.consumer_generations:
        return None  # a microversion before 1.28: nothing to compare
    changed = set(old.consumers) ^ set(fresh.consumers)
    if fresh.generation == old.generation:
        return changed | {c for c in fresh.consumers if fresh.consumers[c] != old.consumers.get(c)}
    for consumer in fresh.consumers:
        before = old.consumer_generations.get(consumer)
        if before is None or before != fresh.consumer_generations.get(consumer):
            changed.add(consumer)
    return changed


@dataclass
class AllocationReads:
    """One node's allocation reads of one cycle, shared by the vouch and the audit.

    Args:
        read_provider: ``GET /resource_providers/{uuid}/allocations``.
        read_consumer: ``GET /allocations/{consumer}``.
        pool: runs independent reads in parallel.
        known: loads what the last audit recorded (called once, on first need).

    Attributes:
        providers: ``{provider: its allocations}`` read, derived or created this cycle.
        consumers: ``{consumer: all it holds}`` read this cycle.
        requests: the reads sent.
    """

    read_provider: Callable[[str], ProviderAllocations]
    read_consumer: Callable[[str], ConsumerAllocations]
    pool: Pool
    known: Callable[[], Known]
    providers: dict[str, ProviderAllocations] = field(default_factory=dict)
    consumers: dict[str, ConsumerAllocations] = field(default_factory=dict)
    requests: int = 0
    _known: Known | None = None

    def record(self) -> Known:
        """What the last audit recorded (loaded once)."""
        if self._known is None:
            self._known = self.known()
        return self._known

    def provider(self, rp: str, generation: int | None) -> tuple[ProviderAllocations, bool]:
        """``rp``'s allocations at ``generation`` (the one listed): ``(them, True when read now)``.

        Taken from this cycle's reads when they are at that generation (each once).
        """
        got = self.providers.get(rp)
        if got is not None and got.generation is not None and got.generation == generation:
            return got, False
        self.requests += 1
        got = self.providers[rp] = self.read_provider(rp)
        return got, True

    def of_consumers(self, uuids: Iterable[str]) -> dict[str, ConsumerAllocations]:
        """``{consumer: all it holds}``; those not read this cycle are read, in parallel."""
        wanted = list(dict.fromkeys(uuids))
        missing = [c for c in wanted if c not in self.consumers]
        self.requests += len(missing)
        for consumer, found in zip(
            missing, self.pool.map(self.read_consumer, missing), strict=True
        ):
            self.consumers[consumer] = found
        return {c: self.consumers[c] for c in wanted}

    def created(
        self, uuids: Iterable[str], generations: Mapping[str, int]
    ) -> dict[str, ProviderAllocations]:
        """Providers this client created this cycle hold nothing: empty at their generation
        (``generations``), with no read; returns ``{provider: its (empty) allocations}``."""
        out = {rp: ProviderAllocations(generations.get(rp), {}) for rp in uuids}
        self.providers.update(out)
        return out

    def __call__(
        self, moved: Mapping[str, tuple[int, int]], tree: ProviderTree
    ) -> dict[str, int | None]:
        """The mirror's :data:`agent.placement.details.Vouch`: the generation each provider's
        details are vouched at, or None (read them).

        Only providers the record knows at the generation the mirror knows are
        asked about. The CPU and memory ones are read (the audit reads them every
        cycle); the consumers they name as changed are read, when fewer than the
        device providers (the audit's own bound); a moved device their parts
        explain is derived from them, any other is read.

        Args:
            moved: ``{provider whose listed generation moved: (the generation the
                mirror knows its details at, the one listed)}``.
            tree: the mirror's tree before this listing (its inventories say which
                providers carry CPU and memory).

        Returns:
            ``{provider: generation vouched at, or None}``.

        Raises:
            PlacementError, PlacementUnavailable: a read failed.
        """
        known = self.record()
        out: dict[str, int | None] = dict.fromkeys(moved)
        comparable = sorted(
            u
            for u, (held, _) in moved.items()
            if u in known.held and known.held[u].generation == held
        )
        anchors = [u for u in comparable if _cpu_and_memory(tree, u)]
        changed = self._read_vouching(anchors, known, out)
        devices = [u for u in comparable if u not in anchors]
        cpu_and_memory = sum(1 for u in tree.get_provider_uuids() if _cpu_and_memory(tree, u))
        if changed and len(changed) <= len(tree) - cpu_and_memory:
            devices = self._derive(devices, moved, self.of_consumers(sorted(changed)), known, out)
        self._read_vouching(devices, known, out)
        return out

    def _read_vouching(
        self, uuids: list[str], known: Known, out: dict[str, int | None]
    ) -> set[str] | None:
        """Read ``uuids``' allocations (in parallel) and vouch by them into ``out``; returns
        the consumers they name as changed since the record (None: cannot tell)."""
        self.requests += len(uuids)
        changed: set[str] | None = set()
        for rp, fresh in zip(uuids, self.pool.map(self.read_provider, uuids), strict=True):
            self.providers[rp] = fresh
            out[rp] = fresh.generation if explains(known.held[rp], fresh, known.own) else None
            got = changed_consumers(known.held[rp], fresh)
            changed = None if got is None or changed is None else changed | got
        return changed

    def _derive(
        self,
        devices: list[str],
        moved: Mapping[str, tuple[int, int]],
        now: Mapping[str, ConsumerAllocations],
        known: Known,
        out: dict[str, int | None],
    ) -> list[str]:
        """Vouch for the devices whose move the changed consumers explain (taking their derived
        allocations); returns the others, to be read."""
        left = []
        for rp in devices:
            derived = known.held[rp].with_parts(
                rp,
                {c: found.allocations for c, found in now.items()},
                moved[rp][1],
                {c: found.generation for c, found in now.items()},
            )
            if explains(known.held[rp], derived, known.own):
                self.providers[rp] = derived
                out[rp] = derived.generation
            else:
                left.append(rp)
        return left


def _cpu_and_memory(tree: ProviderTree, uuid: str) -> bool:
    return tree.exists(uuid) and bool(CPU_AND_MEMORY & set(tree.data(uuid).inventory))
