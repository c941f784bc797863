"""How long each gone consumer has been absent from its host, counted by periodic audits.

Removing a leak is a repair: being late costs little, while removing a live
instance's allocation fails a nova operation (``move_allocations`` and
``claim_resources`` carry the consumer generation nova read: a write in
between fails them with ``AllocationMoveFailed`` or ``AllocationUpdateFailed``).
nova's own operations on one host leave the domain absent while the
allocation stays live: a resize revert (the destination's domain destroyed,
then the source's ``_revert_allocation``), an unshelve after shelve offload
(the scheduler's claim, then the image download and the spawn), a rebuild
or evacuation (destroy, then spawn). So an allocation another writer made is
removed only once the instance has been absent for ``[compute]
absent_instance_timeout`` seconds *and* at least :data:`AUDITS` periodic
audits found it so (docs/service.md, "Allocation audit"). An event never
counts: it says something changed, never that something is gone. Any write
of the consumer by another writer (its generation or amounts here moved)
starts the wait again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

AUDITS = 2
"""Periodic audits that must find a consumer absent before another writer's allocation
of it is removed: the first starts the wait, so one listing taken at a bad instant (a
domain undefined for a moment) never removes anything, whatever the grace."""


@dataclass(frozen=True)
class Absence:
    """One consumer's absence.

    Attributes:
        since: seconds since the epoch when a periodic audit first found it absent
            (since the last write of it by another writer).
        audits: periodic audits that found it absent since then (1 or more).
    """

    since: float
    audits: int = 1

    def due(self, now: float, grace: float) -> bool:
        """Whether the wait is over at ``now``: :data:`AUDITS` audits and ``grace`` seconds."""
        return self.audits >= AUDITS and now - self.since >= grace

    def left(self, now: float, grace: float) -> str:
        """What is left of the wait, for ``compute-agent show`` (e.g. ``"absent 120 s
        over 2 audits; removed after 3600 s"``)."""
        return (
            f"absent {max(0, int(now - self.since))} s over {self.audits} periodic audit(s); "
            f"removed after {int(grace)} s and {AUDITS} audits"
        )


class Absences(dict[str, Absence]):
    """``{consumer: Absence}`` of the gone consumers still holding something here; changed
    only by its methods (owned by :class:`agent.audit.consumer_record.ConsumerRecord`)."""

    def found_absent(self, consumer: str, now: float) -> Absence:
        """A periodic audit found ``consumer`` absent at ``now`` (seconds since the epoch).

        Returns:
            The absence as counted now.
        """
        known = self.get(consumer)
        found = Absence(now) if known is None else Absence(known.since, known.audits + 1)
        self[consumer] = found
        return found

    def restart(self, consumers: Iterable[str]) -> None:
        """Another writer wrote ``consumers`` (or they came back): their wait starts again."""
        for consumer in consumers:
            self.pop(consumer, None)

    def due(self, consumer: str, now: float, grace: float) -> bool:
        """Whether ``consumer``'s wait is over (:meth:`Absence.due`); False when not counted."""
        known = self.get(consumer)
        return known is not None and known.due(now, grace)
