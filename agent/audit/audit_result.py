"""What one allocation audit did, and the operator's choices it follows."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from agent.audit.audit_decision import GRACE, AuditDecision, Listing
from agent.audit.audit_view import AuditView
from agent.audit.consumer_record import ConsumerStatus
from agent.placement.errors import PlacementError

LOG = logging.getLogger(__name__)


@dataclass
class AuditResult:
    """What one audit of one node did.

    Attributes:
        written: consumers whose allocations were written.
        removed: consumers whose allocations on this host were removed.
        unknown: consumers left alone because they are not instances here.
        moving: instances listed here that nova is moving (nothing written).
        drift: instances whose allocation differs from the plan (not rewritten
            unless ``rewrite_differing_allocations``).
        reads: providers whose allocations were read from Placement.
        errors: one line per consumer whose write failed (retried next cycle).
        statuses: every consumer's state and why (``show``, metrics).
    """

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    moving: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    reads: int = 0
    errors: list[str] = field(default_factory=list)
    statuses: list[ConsumerStatus] = field(default_factory=list)


@dataclass(frozen=True)
class AuditRules:
    """The operator's choices the audit follows.

    Attributes:
        remove_unknown_after: seconds (``[compute] remove_unknown_allocations_after``);
            0 never removes unknown consumers.
        build_grace: seconds (``[DEFAULT] instance_build_timeout``) a claim may go
            unlisted; 0 keeps it until listed or given back.
        rewrite_drift: ``[compute] rewrite_differing_allocations``.
        absent_grace: seconds (``[compute] absent_instance_timeout``) a gone instance's
            allocation another writer made stays (:mod:`agent.audit.absence`).
    """

    remove_unknown_after: int = 0
    build_grace: int = 0
    rewrite_drift: bool = False
    absent_grace: int = GRACE


@dataclass
class AuditDraft:
    """One node's audit between its decision and the results of its writes in bulk.

    Made by :meth:`~agent.audit.audit.AllocationAudit.begin`, carried out by
    :meth:`~agent.audit.audit.AllocationAudit.finish` (the cycle writes many
    nodes' ``decision.bulk`` together in between).

    Attributes:
        view: the node's view (its record already saved with the listed instances).
        listing: what the driver listed and planned.
        decision: what the audit will do (a value: no request made it).
        result: what the audit did so far.
        touched: providers whose allocations the audit wrote so far.
    """

    view: AuditView
    listing: Listing
    decision: AuditDecision
    result: AuditResult
    touched: set[str] = field(default_factory=set)


@dataclass
class BulkWrites:
    """What became of one node's :attr:`AuditDecision.bulk` consumers.

    Attributes:
        written: the node's part of each ``POST /allocations`` Placement
            answered with success, one list per request, in order.
        refused: consumers of requests refused with a 4xx (written one by one).
        error: why the rest were not written (Placement unreachable, a 5xx);
            None when every consumer is in ``written`` or ``refused``.
    """

    written: list[list[str]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    error: Exception | None = None


def failed(what: str, exc: PlacementError, result: AuditResult) -> None:
    """One consumer's write failed: named in the outcome, tried again next cycle."""
    line = f"{what}: {exc}"
    LOG.error("%s", line)
    result.errors.append(line)
