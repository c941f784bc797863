"""Which allocations here the agent itself wrote, for as long as that is true.

An allocation the agent wrote (a claim, a heal) is its own to remove as soon
as the instance is gone: no other writer is waiting on it. That holds only
while the consumer is as the agent left it: the consumer generation its own
write produced (Placement moves a consumer's generation by one on every
write of its allocations, placement's ``objects/consumer.py``
``increment_generation``; a new consumer starts at 0 and its first write
makes it 1). Another writer's write since (``nova-manage placement
heal_allocations --force``, a resize's claim, a revert's
``move_allocations``), or the consumer missing from a read (deleted, maybe
re-created by nova's scheduler with the same amounts), ends it for good:
the allocation is then another writer's, and waits for the grace of
:mod:`agent.audit.absence` (issue 39).
"""

from __future__ import annotations

from collections.abc import Iterable


class Authorship(dict[str, int | None]):
    """``{consumer: the consumer generation the agent's own write produced}`` (None: sent,
    not known to have been written yet: a claim recorded before its write, write-ahead).

    Changed only by its methods (owned by
    :class:`agent.audit.consumer_record.ConsumerRecord`).
    """

    def wrote(self, consumer: str, generation: int | None) -> None:
        """The agent wrote ``consumer``'s allocation, leaving it at ``generation``."""
        self[consumer] = generation

    def ended(self, consumers: Iterable[str]) -> None:
        """``consumers`` are no longer as the agent wrote them (or gone for good)."""
        for consumer in consumers:
            self.pop(consumer, None)

    def holds(self, consumer: str, generation: int | None) -> bool:
        """Whether ``consumer`` at ``generation`` (as read now) is still the agent's own
        write: the generation is known and is the one its write produced."""
        mine = self.get(consumer)
        return mine is not None and generation is not None and mine == generation
