"""The agent's own allocation writes, and the one listing that proves nobody else wrote.

Placement moves a provider's generation by exactly one for each allocation
write request whose *new* allocations name that provider (placement's
``_set_allocations`` increments each provider it allocates on once per
request; a consumer removed from a provider moves nothing). Without more,
every provider the audit wrote on would look changed by someone at the next
cycle, which would read its inventories, traits and aggregates again.

So the next listing of the tree, which the next cycle makes anyway, is the
proof (:meth:`agent.placement.mirror.Mirror.expect`): a provider whose
generation is then exactly the one the agent last knew plus its own writes
on it was written by nobody else, so its inventories, traits and aggregates
are as the mirror holds them and its allocations are what the audit read
plus what it wrote. The audit's record takes that expected generation now
(:meth:`OwnWrites.confirm` returns the allocations to record, plain data):
a device provider's is compared with the listed one before it is read, a CPU
and memory provider's is read every cycle and compared whole, so any other
generation (someone else wrote too) is read, as before. Only a write whose
success Placement answered is counted, so a miscount can only make the agent
read more, never less. (A listing right after the writes proved the same at
the cost of one request per node and cycle that wrote.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from agent.model.allocations import ByProvider, ProviderAllocations
from agent.placement.mirror import Mirror


class OwnWrites:
    """The allocation writes of one audit: how often each provider was named, and what.

    Attributes:
        moves: provider -> requests that named it (its generation moved that often).
        wrote: consumer -> what it now holds (``{provider: {rc: amount}}``; empty
            when its part here was removed).
        generations: consumer -> the consumer generation the write produced, where known.
    """

    def __init__(self) -> None:
        self.moves: Counter[str] = Counter()
        self.wrote: dict[str, ByProvider] = {}
        self.generations: dict[str, int] = {}

    def put(self, consumer: str, allocations: ByProvider, generation: int | None = None) -> None:
        """One ``PUT /allocations/{consumer}`` answered, with ``allocations`` as its body,
        leaving the consumer at ``generation`` (None: not known)."""
        self.moves.update(set(allocations))
        self.wrote[consumer] = {rp: dict(a) for rp, a in allocations.items()}
        self._generation(consumer, generation)

    def posted(self, bodies: Mapping[str, ByProvider]) -> None:
        """One ``POST /allocations`` answered: ``{consumer: allocations}`` in one request,
        each consumer new (a null consumer generation): now at generation 1 (placement's
        ``objects/consumer.py``: created at 0, moved once by the write)."""
        self.moves.update({rp for allocations in bodies.values() for rp in allocations})
        for consumer, allocations in bodies.items():
            self.wrote[consumer] = {rp: dict(a) for rp, a in allocations.items()}
            self._generation(consumer, 1)

    def _generation(self, consumer: str, generation: int | None) -> None:
        if generation is None:
            self.generations.pop(consumer, None)
        else:
            self.generations[consumer] = generation

    def removed(self, consumer: str, held: ByProvider, providers: Iterable[str]) -> None:
        """``consumer``, holding ``held``, had its part on ``providers`` removed by one ``PUT``.

        A ``PUT`` that leaves the consumer parts elsewhere moves no generation of the
        providers it leaves (placement's ``_set_allocations`` increments only the
        providers of the new allocations); one that leaves it nothing (empty
        allocations) is recorded by Placement as allocations of 0 on each provider the
        consumer held (``handlers/allocation.py``: "signalled by a used value of 0"),
        so each of them moves by one.

        Args:
            held: ``{provider: {rc: amount}}`` the consumer held, as read before the write.
            providers: the providers its part was removed from.
        """
        gone = set(providers)
        if not set(held) - gone:
            self.moves.update(set(held))
        kept = self.wrote.get(consumer, {})
        self.wrote[consumer] = {rp: a for rp, a in kept.items() if rp not in gone}
        self.generations.pop(consumer, None)

    def confirm(
        self, mirror: Mirror, nodename: str, held: Mapping[str, ProviderAllocations]
    ) -> dict[str, ProviderAllocations]:
        """The generations the agent's own writes lead to, for the next listing to prove.

        No request: the mirror checks them against its next listing
        (:meth:`~agent.placement.mirror.Mirror.expect`); the audit's record takes
        them now, with what the audit wrote, for providers whose recorded
        generation is the mirror's (the one the writes were counted from).

        Args:
            mirror: the report client's mirror.
            nodename: the node audited.
            held: ``{provider: allocations}`` as the audit's record holds them.

        Returns:
            ``{provider: its allocations at the expected generation}`` for the
            record to take (empty when the agent wrote nothing).

        Raises:
            KeyError: the node's tree was not read in this process.
        """
        if not self.moves:
            return {}
        expected = mirror.expect(nodename, self.moves)
        taken: dict[str, ProviderAllocations] = {}
        for rp, (old, new) in expected.items():
            before = held.get(rp)
            if before is None or before.generation != old:
                continue  # the audit's copy is older than the mirror's: read it next time
            taken[rp] = before.with_parts(rp, self.wrote, new, self.generations)
        return taken
