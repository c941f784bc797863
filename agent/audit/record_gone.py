"""The transitions of a node's *gone* consumers (docs/service.md, "Allocation audit").

A part of :class:`agent.audit.consumer_record.ConsumerRecord`, split by meaning: an
instance no longer listed, how long it has been absent (:mod:`agent.audit.absence`),
whether its allocation is still the agent's own write (:mod:`agent.audit.authorship`),
and the end of it all: removed, or found holding nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.audit.consumer_state import Noted, Reason


class GoneTransitions(Noted):
    """The record's transitions of gone consumers (fields: the record's, :class:`Noted`)."""

    def vanished(self, consumer: str) -> None:
        """``consumer`` was an instance here and is no longer listed: *gone*."""
        self.instances.discard(consumer)
        self.moving.discard(consumer)
        self.drift.pop(consumer, None)
        self.gone.add(consumer)

    def rewritten_by_others(self, consumers: Iterable[str]) -> None:
        """Another writer wrote ``consumers`` (their generation or amounts moved), or a read
        no longer finds them: their allocation is no longer the agent's own, so a
        momentary absence of the domain does not release it at once (issue 33, case 6;
        issue 39), and the wait of a gone one starts again (:meth:`removal_due`)."""
        mine = list(consumers)
        self.wrote.ended(mine)
        self.absent.restart(mine)

    def own_write_ended(self, consumer: str) -> None:
        """A read just before removing ``consumer`` found it no longer as the agent wrote it
        (another generation, or not typed ``INSTANCE``): another writer's now."""
        self.wrote.ended([consumer])

    def absences_counted(self, now: float) -> None:
        """A periodic audit (never an event) found every *gone* consumer absent at ``now``."""
        for consumer in sorted(self.gone):
            self.absent.found_absent(consumer, now)

    def found_without_record(self, consumers: Iterable[str]) -> None:
        """``consumers`` hold an instance's CPU or memory here, unlisted, found with no record
        of this node (first start, or ``state_path`` lost): whether they were instances of
        this host cannot be told, so each is *gone* and waits for the grace as another
        writer's allocation would (issue 39: the rule needs no state directory)."""
        for consumer in consumers:
            self.gone.add(consumer)
            self.inherited.add(consumer)

    def removal_due(self, consumer: str, generation: int | None, now: float, grace: float) -> bool:
        """Whether gone ``consumer``'s part here is removed now (changes nothing).

        True for an allocation the agent wrote, still at the generation its write
        produced (``generation``: as read now), and for another writer's once it has
        been absent for ``grace`` seconds over enough periodic audits
        (:class:`~agent.audit.absence.Absence`).
        """
        return self.wrote.holds(consumer, generation) or self.absent.due(consumer, now, grace)

    def removal_deferred(self, consumer: str, detail: str = "") -> None:
        """Gone ``consumer``'s allocation is another writer's (nova's scheduler): its
        removal waits for the grace (``detail``: what is left of it)."""
        self._status(consumer, Reason.GONE_DEFERRED, detail)

    def removal_failed(self, consumer: str) -> None:
        """Removing gone ``consumer``'s part failed: tried again next audit."""
        self._status(consumer, Reason.GONE_RETRY)

    def removal_confirmed(self, consumer: str) -> None:
        """Placement holds nothing of ``consumer`` here any more (or never did)."""
        self.gone.discard(consumer)
        self.shared.pop(consumer, None)
        self.unknown.pop(consumer, None)
        self.claims.pop(consumer, None)
        self.wrote.ended([consumer])
        self.absent.restart([consumer])
        self.inherited.discard(consumer)
