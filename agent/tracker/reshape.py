"""The start-up reshape flow: read what Placement holds, let the driver reshape, write it once.

Spec: reshape-provider-tree.txt, "Changes to Resource Tracker _update()" and
"Offline Upgrade Script". What moves and how each consumer's amounts are
placed is decided by :mod:`agent.shape.reshape` (pure data); this module
talks to Placement through the :class:`ReportClient`. :func:`reshape_node`
is shared by the resource tracker's start-up cycle, ``compute-agent sync``
and the offline ``compute-agent reshape`` command, with a bounded retry
when ``POST /reshaper`` meets a generation conflict.

A start-up reshape discovers the node's hardware once (the driver's
:meth:`~agent.shape.adapter.DriverAdapter.one_discovery` holds the records across
the spec's two ``update_provider_tree`` calls) and reads the tree once (the
caller's tree is passed in; only a generation conflict reads it again).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.model.allocations import ConsumerAllocations
from agent.model.exceptions import ReshapeFailed, ReshapeNeeded
from agent.model.provider_tree import ProviderTree
from agent.model.resources import inventory_body
from agent.placement.conflicts import retry_on_conflict
from agent.placement.errors import GenerationConflict
from agent.shape.reshape import Allocations

if TYPE_CHECKING:
    from agent.placement.report import ReportClient
    from agent.placement.writer import SyncResult
    from agent.shape.adapter import DriverAdapter

LOG = logging.getLogger(__name__)


@dataclass(slots=True)
class ReshapeOutcome:
    """What :func:`reshape_node` found and did, for logs and ``reshape --dry-run``.

    Attributes:
        nodename: the compute node.
        needed: the driver raised ``ReshapeNeeded`` on the last read.
        reason: the ``ReshapeNeeded`` message (which classes move where).
        dry_run: nothing was written.
        attempts: ``POST /reshaper`` requests sent (0 for a dry run or when
            not needed; more than 1 after generation conflicts).
        requests: Placement requests sent by the whole call.
        provider_names: provider UUID -> name, for every provider in the
            before and after trees.
        inventories_before: provider UUID -> ``{class: Placement inventory
            record}`` as Placement held it, for each provider whose inventory
            changes (created providers have none).
        inventories_after: the same providers after the reshape (removed
            providers have none).
        allocations_before: consumer UUID -> ``{provider UUID: {class:
            amount}}`` before, for each consumer whose allocations change.
        allocations_after: the same consumers after.
        placed_by: consumer UUID -> ``"driver"`` or ``"rule"`` (module docstring).
        tree: when not needed, the tree as the driver laid it out, ready for an
            ordinary ``update_from_provider_tree(tree)`` (nothing was
            written); after a reshape, the tree written; None when a dry run
            found no compute node in Placement.
        result: the :class:`SyncResult` of the flush; None when nothing was written.
    """

    nodename: str
    needed: bool
    reason: str = ""
    dry_run: bool = False
    attempts: int = 0
    requests: int = 0
    provider_names: dict[str, str] = field(default_factory=dict)
    inventories_before: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    inventories_after: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    allocations_before: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    allocations_after: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    placed_by: dict[str, str] = field(default_factory=dict)
    tree: ProviderTree | None = None
    result: SyncResult | None = None

    @property
    def reshaped(self) -> bool:
        """True when a ``POST /reshaper`` succeeded."""
        return self.result is not None and self.result.reshaped


def _amounts(record: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    return ConsumerAllocations.from_placement(record).allocations


def _inventories(tree: ProviderTree, uuid: str) -> dict[str, dict[str, Any]]:
    if not tree.exists(uuid):
        return {}
    return inventory_body(tree.data(uuid).inventory)


def _fill_changes(
    outcome: ReshapeOutcome,
    held: ProviderTree,
    new: ProviderTree,
    before: Allocations,
    after: Allocations,
) -> None:
    for tree in (held, new):
        outcome.provider_names.update({p.uuid: p.name for p in tree.all_data()})
    for uuid in dict.fromkeys([*held.get_provider_uuids(), *new.get_provider_uuids()]):
        was, now = _inventories(held, uuid), _inventories(new, uuid)
        if was != now:
            outcome.inventories_before[uuid] = was
            outcome.inventories_after[uuid] = now
    for consumer in sorted(after):
        was, now = _amounts(before[consumer]), _amounts(after[consumer])
        if was != now:
            outcome.allocations_before[consumer] = was
            outcome.allocations_after[consumer] = now


def reshape_node(
    report: ReportClient,
    driver: DriverAdapter,
    nodename: str,
    *,
    attempts: int = 3,
    dry_run: bool = False,
    tree: ProviderTree | None = None,
) -> ReshapeOutcome:
    """Run the spec's start-up algorithm once for ``nodename``, reshaping if the driver asks.

    Steps (reshape-provider-tree.txt, "Changes to Resource Tracker
    _update()" and "Offline Upgrade Script"): read the tree Placement holds;
    ``driver.update_provider_tree(tree, nodename)``; if that raises
    ``ReshapeNeeded``, read every allocation of the tree
    (``get_allocations_for_provider_tree``), call the driver again with them
    on a fresh copy of the tree, and flush tree and the changed consumers'
    allocations in one ``POST /reshaper``. A generation conflict there (another
    service allocated meanwhile) re-reads tree and allocations and starts
    again after a short random wait, up to ``attempts`` times
    (:func:`agent.placement.conflicts.retry_on_conflict`). The hardware is
    discovered once (:meth:`agent.shape.adapter.DriverAdapter.one_discovery`).

    Args:
        report: the report client (its Placement is the one reshaped).
        driver: the compute driver.
        nodename: the compute node.
        attempts: most ``POST /reshaper`` requests sent (>= 1).
        dry_run: compute everything, write nothing (the tree is read with
            ``read_tree``, so not even the compute node is created).
        tree: what Placement holds for the node when the caller has just
            read it (``get_provider_tree_and_ensure_root`` or ``read_tree``):
            it is not read again, and it is edited (laid out). None reads it.

    Returns:
        A :class:`ReshapeOutcome`; ``needed`` False when the tree has its shape
        (nothing written; ``outcome.tree`` is laid out for the caller's flush).

    Raises:
        ReshapeFailed: ``POST /reshaper`` refused (allocations that do not fit,
            ...) or still conflicting after ``attempts``; Placement unchanged.
        ConfigError: the configuration does not fit the host.
        PlacementError, PlacementUnavailable: reading failed.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    start = report.requests()
    tries = _Tries(report, driver, nodename, dry_run, tree)
    try:
        with driver.one_discovery(nodename):
            outcome = tries.run(attempts)
    except ReshapeFailed as exc:
        raise _advice(exc, attempts) from exc.__cause__
    outcome.requests = report.requests() - start
    return outcome


@dataclass(slots=True)
class _Tries:
    """One read, lay-out and write of :func:`reshape_node` per call of :meth:`one`.

    Attributes:
        tree: what the caller has just read; used by the first try only (a
            retry reads again: the conflict says Placement moved on).
        outcome: the last try's outcome (its ``attempts`` count the
            ``POST /reshaper`` requests sent so far).
    """

    report: ReportClient
    driver: DriverAdapter
    nodename: str
    dry_run: bool
    tree: ProviderTree | None
    outcome: ReshapeOutcome = field(init=False)

    def __post_init__(self) -> None:
        self.outcome = ReshapeOutcome(self.nodename, needed=False, dry_run=self.dry_run)

    def run(self, attempts: int) -> ReshapeOutcome:
        """:meth:`one`, again after a generation conflict, at most ``attempts`` times.

        Raises:
            ReshapeFailed: refused, or the last attempt's generation conflict.
        """
        return retry_on_conflict(
            self.one,
            retries=attempts - 1,
            sleep=self.report.conflict_sleep,
            what=f"POST /reshaper of node {self.nodename} (tree and allocations re-read)",
            is_conflict=_is_generation_conflict,
        )

    def one(self) -> ReshapeOutcome:
        """Read (unless given), lay out, and write when a reshape is needed.

        Raises:
            ReshapeFailed: as :func:`_write` (a generation conflict is retried).
        """
        held = self.tree
        if held is None:
            held = _read_tree(self.report, self.nodename, self.dry_run)
        self.tree = None
        if held is None:  # a dry run on a node Placement does not have
            return self.outcome
        self.outcome, changed = _lay_out(
            self.report, self.driver, self.nodename, held, self.dry_run, self.outcome.attempts
        )
        if self.outcome.needed and not self.dry_run:
            _write(self.report, self.outcome, changed)
        return self.outcome


def _read_tree(report: ReportClient, nodename: str, dry_run: bool) -> ProviderTree | None:
    """What Placement holds; a dry run creates nothing (None when the node is unknown)."""
    if dry_run:
        return report.read_tree(nodename)
    return report.get_provider_tree_and_ensure_root(nodename)


def _lay_out(
    report: ReportClient,
    driver: DriverAdapter,
    nodename: str,
    tree: ProviderTree,
    dry_run: bool,
    attempts: int,
) -> tuple[ReshapeOutcome, Allocations]:
    """Ask the driver for the node's tree; when it needs a reshape, move the allocations.

    Args:
        tree: what Placement holds; edited (laid out) when no reshape is needed.
        attempts: ``POST /reshaper`` requests sent so far (carried into the outcome).

    Returns:
        ``(outcome, allocations to write)``: the second holds only the
        consumers whose allocations change (empty when no reshape is needed).
    """
    held = tree.copy()
    try:
        driver.update_provider_tree(tree, nodename)
    except ReshapeNeeded as exc:
        reason = str(exc)
    else:
        return ReshapeOutcome(nodename, False, dry_run=dry_run, attempts=attempts, tree=tree), {}
    LOG.info("node %s needs a reshape (%s); reading its allocations", nodename, reason)
    allocations = report.get_allocations_for_provider_tree(nodename)
    before = copy.deepcopy(allocations)
    tree = held.copy()
    # The instances' plan knows the shared-storage pool of the node's aggregates, as the
    # cycle's does (agent.tracker.sharing: the first by UUID); without it every instance
    # on shared storage was logged "no sharing provider is associated".
    pools = report.sharing_providers(set(held.data(nodename).aggregates), "DISK_GB")
    # A driver overriding update_provider_tree may return None (nova's contract): no report.
    placed = (
        driver.update_provider_tree(
            tree,
            nodename,
            allocations=allocations,
            sharing_provider_uuid=pools[0] if pools else None,
        )
        or {}
    )
    outcome = ReshapeOutcome(
        nodename, True, reason, dry_run=dry_run, attempts=attempts, tree=tree, placed_by=placed
    )
    _fill_changes(outcome, held, tree, before, allocations)
    return outcome, {c: rec for c, rec in allocations.items() if rec != before[c]}


def _advice(exc: ReshapeFailed, attempts: int) -> ReshapeFailed:
    """``exc`` itself, or when it is still a conflict after every attempt, what to do about it."""
    if not _is_generation_conflict(exc):
        return exc
    return ReshapeFailed(
        f"{exc} (still conflicting after {attempts} attempts: other services keep "
        "allocating on this host; stop them, or run `compute-agent reshape` "
        "with every service stopped)"
    )


def _is_generation_conflict(exc: BaseException) -> bool:
    """``POST /reshaper`` failed on a stale generation: read again and retry."""
    return isinstance(exc, ReshapeFailed) and isinstance(exc.__cause__, GenerationConflict)


def _write(report: ReportClient, outcome: ReshapeOutcome, changed: Allocations) -> None:
    """One ``POST /reshaper`` of the outcome's tree and ``changed``.

    Raises:
        ReshapeFailed: refused; caused by a :class:`GenerationConflict` when
            another service wrote meanwhile (read again and retry).
    """
    nodename = outcome.nodename
    assert outcome.tree is not None  # a reshape always has its tree
    outcome.attempts += 1
    outcome.result = report.update_from_provider_tree(outcome.tree, changed)
    LOG.info(
        "node %s reshaped: %d providers' inventories, %d consumers' allocations moved",
        nodename,
        len(outcome.inventories_after),
        len(changed),
    )
    return True


def outcome_lines(outcome: ReshapeOutcome) -> list[str]:
    """Human-readable lines of an outcome: what moves, per provider and per consumer.

    Used by ``compute-agent reshape`` (and its ``--dry-run``).
    """
    node = outcome.nodename
    if not outcome.needed:
        return [f"node {node}: no reshape needed"]
    verb = "would move" if outcome.dry_run else "moved"
    lines = [f"node {node}: reshape {'needed' if outcome.dry_run else 'done'}: {outcome.reason}"]
    names = outcome.provider_names

    def inv(records: Mapping[str, Mapping[str, Any]]) -> str:
        if not records:
            return "(none)"
        return ", ".join(
            f"{rc} {r['total']}" + (f" (reserved {r['reserved']})" if r.get("reserved") else "")
            for rc, r in records.items()
        )

    def alloc(per_rp: Mapping[str, Mapping[str, int]]) -> str:
        return (
            "; ".join(
                f"{name}: " + ", ".join(f"{rc} {n}" for rc, n in res.items())
                for name, res in sorted((names.get(rp, rp), res) for rp, res in per_rp.items())
            )
            or "(none)"
        )

    lines.append(f"inventories ({verb}):")
    for uuid, was in outcome.inventories_before.items():
        lines.append(f"  {names.get(uuid, uuid)}")
        lines.append(f"    before: {inv(was)}")
        lines.append(f"    after:  {inv(outcome.inventories_after[uuid])}")
    lines.append(f"allocations ({verb}, {len(outcome.allocations_after)} consumers):")
    for consumer, was in outcome.allocations_before.items():
        how = outcome.placed_by.get(consumer)
        lines.append(f"  consumer {consumer}" + (f" (placed by the {how})" if how else ""))
        lines.append(f"    before: {alloc(was)}")
        lines.append(f"    after:  {alloc(outcome.allocations_after[consumer])}")
    if not outcome.dry_run:
        lines.append(f"{outcome.attempts} POST /reshaper, {outcome.requests} placement requests")
    return lines
