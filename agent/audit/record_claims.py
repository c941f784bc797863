"""The transitions of a node's claims: *claimed, building* until listed (resource-objects.txt).

A part of :class:`agent.audit.consumer_record.ConsumerRecord`, split by meaning: a
claim recorded before its write is sent (write-ahead), its write answered, given back,
or expired after ``[DEFAULT] instance_build_timeout``.
"""

from __future__ import annotations

from agent.audit.consumer_state import Noted, Reason
from agent.model.allocations import ByProvider


class ClaimTransitions(Noted):
    """The record's transitions of claims (fields: the record's, :class:`Noted`)."""

    def claimed(self, consumer: str, when: float, shared: ByProvider | None = None) -> None:
        """A claim through the tracker: *claimed, building* until listed.

        Args:
            when: seconds since the epoch.
            shared: what the claim allocates outside the tree (sharing provider).
        """
        if consumer not in self.instances:
            self.claims[consumer] = when
        self.wrote.wrote(consumer, None)  # sent, not known written yet (write-ahead)
        self.gone.discard(consumer)
        self.absent.restart([consumer])
        self.unknown.pop(consumer, None)
        if shared:
            self.shared[consumer] = dict(shared)

    def claim_written(self, consumer: str, generation: int | None) -> None:
        """The claim's write of ``consumer`` was answered, leaving it at ``generation``
        (its own write, :class:`~agent.audit.authorship.Authorship`)."""
        self.wrote.wrote(consumer, generation)

    def claim_given_back(self, consumer: str) -> set[str]:
        """The claim is given back (the spawn failed, or it was destroyed).

        Returns:
            The providers outside the tree it was given allocations on (to
            clear along with this host's own).
        """
        shared = set(self.shared.pop(consumer, {}))
        self.claims.pop(consumer, None)
        self.wrote.ended([consumer])
        self.instances.discard(consumer)
        self.moving.discard(consumer)
        self.gone.discard(consumer)
        self.absent.restart([consumer])
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

    # -- the audit: instances listed here ------------------------------------------

    def claims_reported(self) -> None:
        """Every claim not listed yet is *claimed, building* (with when it was claimed)."""
        for consumer, when in sorted(self.claims.items()):
            self._status(consumer, Reason.CLAIMED, f"at {when:.0f}")
