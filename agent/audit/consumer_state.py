"""The states of a node's consumers, and the reasons the audit gives for each.

Each consumer of a node is in one :class:`State`, derived from evidence
(docs/service.md, "Allocation audit"):

========================  ==========================================================
state                     evidence
========================  ==========================================================
``instance here``         the driver lists it, and its consumer holds something on
                          this node's providers, or nothing anywhere
``moving``                the driver lists it, it holds nothing here, and it holds
                          CPU or memory on a provider outside this node's tree (nova
                          moved it: resize or live migration in progress, evacuated),
                          or nothing anywhere while nova's migration record holds
                          exactly what it held here
``claimed, building``     claimed through the tracker, not listed yet (kept until
                          listed or ``[DEFAULT] instance_build_timeout`` passes)
``gone``                  listed (or claimed) earlier, not now; this host's share is
                          removed, and the consumer stays here until Placement
                          confirms it
``not an instance``       holds resources here, never listed here: nova's migration
                          record, another service's consumer, a scheduler's claim
========================  ==========================================================

Every reason is a :class:`Reason` constant, set with its state by one method
of :class:`agent.audit.consumer_record.ConsumerRecord`; a detail that only
the evidence knows (the provider holding a moving instance's CPU, the
evidence keeping an unknown consumer) follows the reason after a colon.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agent.audit.absence import Absences
from agent.audit.authorship import Authorship
from agent.model.allocations import ByProvider


class State(enum.StrEnum):
    """The state of one consumer on one node (module docstring)."""

    HERE = "instance here"
    MOVING = "moving"
    BUILDING = "claimed, building"
    GONE = "gone"
    FOREIGN = "not an instance"


class Reason(enum.StrEnum):
    """Why the audit put a consumer in its state (``compute-agent show``'s ``why``).

    Each belongs to one :class:`State`, :data:`STATE_OF`.
    """

    UNREADABLE = "listed but unreadable: left as Placement holds it"
    USES_NOTHING = "listed; uses nothing here"
    HOLDS_PLAN = "listed; Placement holds its plan"
    ALREADY_HELD = "listed; Placement already holds it here"
    WRITTEN = "listed; allocation written"
    WRITTEN_IN_BULK = "listed; missing allocation written"
    DRIFT = "listed; allocation differs (drift)"
    MOVING = "listed; nova holds it elsewhere, nothing written"
    CLAIMED = "claimed, not listed yet"
    GONE_DEFERRED = (
        "no longer listed; another writer's: removed once absent past the grace, "
        "unless it cleans up first"
    )
    GONE_RETRY = "no longer listed; removal to be retried"
    MIGRATION = "typed MIGRATION: nova gives it back"
    LEFT_ALONE = "not an instance of this host: left alone"
    KEPT = "kept"


STATE_OF: dict[Reason, State] = {
    Reason.UNREADABLE: State.HERE,
    Reason.USES_NOTHING: State.HERE,
    Reason.HOLDS_PLAN: State.HERE,
    Reason.ALREADY_HELD: State.HERE,
    Reason.WRITTEN: State.HERE,
    Reason.WRITTEN_IN_BULK: State.HERE,
    Reason.DRIFT: State.HERE,
    Reason.MOVING: State.MOVING,
    Reason.CLAIMED: State.BUILDING,
    Reason.GONE_DEFERRED: State.GONE,
    Reason.GONE_RETRY: State.GONE,
    Reason.MIGRATION: State.FOREIGN,
    Reason.LEFT_ALONE: State.FOREIGN,
    Reason.KEPT: State.FOREIGN,
}
"""The state each reason is given with."""


@dataclass(frozen=True)
class ConsumerStatus:
    """One consumer's state on a node and why (``compute-agent show``, metrics).

    Attributes:
        consumer: the consumer UUID.
        state: its :class:`State`.
        why: the :class:`Reason`, and the evidence's detail after a colon when there is one.
        drift: for an instance here, how Placement differs from the plan
            (empty when it does not).
    """

    consumer: str
    state: State
    why: str
    drift: str = ""

    @classmethod
    def of(cls, consumer: str, reason: Reason, detail: str = "", drift: str = "") -> ConsumerStatus:
        """The status ``reason`` gives ``consumer`` (its state is :data:`STATE_OF` it)."""
        why = f"{reason}: {detail}" if detail else str(reason)
        return cls(consumer, STATE_OF[reason], why, drift)

    def to_json(self) -> dict[str, str]:
        """``{"consumer", "state", "why", "drift"}``."""
        return {
            "consumer": self.consumer,
            "state": str(self.state),
            "why": self.why,
            "drift": self.drift,
        }


class Noted:
    """The base of :class:`agent.audit.consumer_record.ConsumerRecord` and its parts split
    by meaning (:mod:`agent.audit.record_claims`, :mod:`agent.audit.record_gone`): the
    record's fields they share, declared once (the record's dataclass defines them), and
    what the last audit found of each consumer, noted by their transitions."""

    instances: set[str]
    claims: dict[str, float]
    gone: set[str]
    moving: set[str]
    unknown: dict[str, float]
    shared: dict[str, ByProvider]
    wrote: Authorship
    absent: Absences
    inherited: set[str]
    drift: dict[str, str]
    statuses: dict[str, ConsumerStatus]

    def _status(self, consumer: str, reason: Reason, detail: str = "", drift: str = "") -> None:
        self.statuses[consumer] = ConsumerStatus.of(consumer, reason, detail, drift)
