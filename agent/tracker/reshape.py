"""Reshaping a compute node's provider tree: detection, the allocation rewrite, the flow.

Spec: reshape-provider-tree.txt. A reshape moves inventory from one provider
of a compute node's tree to another (or from one resource class to another)
*with* the allocations held against it, in one atomic ``POST /reshaper``,
so no scheduler ever sees the capacity twice or an allocation without its
inventory. The three shape changes the agent makes (docs/reshape.md):

1. VGPU on the compute node -> one child provider per physical GPU;
2. flat -> NUMA (``[numa] model_in_placement``) and back;
3. ``[compute] resource_class_renames = CUSTOM_OLD:NEW``.

None of them is special-cased here: :func:`find_moves` compares the tree
Placement holds with the tree :mod:`agent.shape.layout` wants and reports every
resource class that leaves one provider of the tree for another, or changes
name. :func:`reshape_allocations` then moves each consumer's amounts of
those classes:

- a consumer the driver knows (an instance) gets what
  ``ComputeDriver.expected_allocations`` says for the moving class (mdev ->
  its GPU; NUMA split by pinned cells, unpinned instances by the rule of
  :mod:`agent.shape.planning`), provided that answer carries the same total the
  consumer holds; a reshape moves amounts, it never changes them;
- any other consumer (a migration, another service's consumer, or an
  instance whose held amount differs from the driver's answer) keeps what it
  holds on a provider that still has the class; the rest goes whole to the
  one target provider with the most free capacity that fits all of the
  consumer's moving classes of that move (ranked by VCPU, then PCPU, then
  MEMORY_MB, then the other classes alphabetically; ties to the provider
  first in the tree), else each class is spread over the targets, most free
  first. Known consumers are placed first, then the others in UUID order,
  so the result does not depend on the order Placement listed them.
- allocations on providers outside the tree (sharing providers) are kept.

:func:`reshape_node` is the start-up algorithm of the spec ("Changes to
Resource Tracker _update()"), shared by the resource tracker and the
offline ``compute-agent reshape`` command, with a bounded retry when
``POST /reshaper`` meets a generation conflict.
"""

from __future__ import annotations

import copy
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.model.allocations import ConsumerAllocations
from agent.model.exceptions import ReshapeFailed, ReshapeNeeded
from agent.model.provider_tree import ProviderTree
from agent.model.resources import inventory_body
from agent.placement.errors import GenerationConflict

if TYPE_CHECKING:
    from agent.placement.report import ReportClient, SyncResult
    from drivers.base import ComputeDriver

LOG = logging.getLogger(__name__)

Allocations = dict[str, dict[str, Any]]
"""``{consumer_uuid: GET /allocations/{consumer_uuid} body}`` (spec: "Allocations Parameter")."""

_CLASS_RANK = ("VCPU", "PCPU", "MEMORY_MB")
"""Classes that rank target providers first for consumers placed by the rule."""


@dataclass(frozen=True, slots=True)
class ClassMove:
    """One resource class whose inventory moves between providers of a tree, or is renamed.

    Attributes:
        resource_class: the class after the move (NEW for a rename).
        sources: ``(provider_uuid, class held there)`` pairs of the tree
            Placement holds: every provider holding the class (or its OLD name).
        targets: UUIDs of the providers holding ``resource_class`` in the new
            tree, in tree order.
    """

    resource_class: str
    sources: tuple[tuple[str, str], ...]
    targets: tuple[str, ...]

    def describe(self, held: ProviderTree, new: ProviderTree) -> str:
        """One line: ``VGPU: cn -> cn_pci_0000_af_00_0, cn_pci_0000_5e_00_0``."""

        def name(uuid: str) -> str:
            tree = new if new.exists(uuid) else held
            return tree.data(uuid).name if tree.exists(uuid) else uuid

        src = ", ".join(
            name(u) + (f" ({rc})" if rc != self.resource_class else "") for u, rc in self.sources
        )
        return f"{self.resource_class}: {src} -> {', '.join(name(u) for u in self.targets)}"


def find_moves(
    held: ProviderTree,
    new: ProviderTree,
    nodename: str,
    renames: Mapping[str, str] | None = None,
) -> list[ClassMove]:
    """The resource classes of ``nodename``'s tree that must move with their allocations.

    A class moves when it is renamed (``renames`` maps a class ``held`` has to
    the class ``new`` has), or when it leaves a provider of the tree while
    appearing on another one, and either a provider it leaves is still in the
    new tree or a provider it reaches was already in the held one. That last
    condition keeps hardware replacement (GPU A unplugged, GPU B plugged in:
    one provider gone, a new one created) an ordinary inventory change
    rather than a reshape; every shape change of docs/reshape.md meets it
    (the compute node stays, and is the source or the target).

    Args:
        held: the tree Placement holds (``get_provider_tree_and_ensure_root``).
        new: the same tree after :func:`agent.shape.layout.apply_layout`.
        nodename: the compute node; only its tree is compared.
        renames: ``{OLD: NEW}`` (``[compute] resource_class_renames``).

    Returns:
        The moves, sorted by resource class; empty when no reshape is needed.
    """
    renames = renames or {}
    held_uuids = held.get_provider_uuids(nodename) if held.exists(nodename) else []
    new_uuids = new.get_provider_uuids(nodename) if new.exists(nodename) else []
    before: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for uuid in held_uuids:
        for rc in held.data(uuid).inventory:
            before[renames.get(rc, rc)].append((uuid, rc))
    after: dict[str, list[str]] = defaultdict(list)
    for uuid in new_uuids:
        for rc in new.data(uuid).inventory:
            after[rc].append(uuid)
    moves = []
    for rc in sorted(before.keys() & after.keys()):
        sources, targets = before[rc], after[rc]
        renamed = any(old != rc for _, old in sources)
        losing = {u for u, _ in sources} - set(targets)
        gaining = set(targets) - {u for u, _ in sources}
        relocated = bool(losing and gaining) and (
            any(new.exists(u) for u in losing) or any(held.exists(u) for u in gaining)
        )
        if renamed or relocated:
            moves.append(ClassMove(rc, tuple(sources), tuple(targets)))
    return moves


def describe_moves(moves: Iterable[ClassMove], held: ProviderTree, new: ProviderTree) -> str:
    """``"VGPU: cn -> cn_pci_…; VCPU: cn -> cn_NUMA0, cn_NUMA1"`` for messages and logs."""
    return "; ".join(m.describe(held, new) for m in moves)


def _add(record: dict[str, Any], provider: str, rc: str, amount: int) -> None:
    entry = record["allocations"].setdefault(provider, {"resources": {}})
    resources = entry.setdefault("resources", {})
    resources[rc] = resources.get(rc, 0) + amount


def _driver_split(
    expected: ConsumerAllocations | None, move: ClassMove, total: int
) -> dict[str, int] | None:
    """The driver's ``{provider: amount}`` of ``move``'s class, if it carries ``total``."""
    if not expected:
        return None
    targets = set(move.targets)
    split = {
        rp: a[move.resource_class]
        for rp, a in expected.allocations.items()
        if rp in targets and a.get(move.resource_class)
    }
    return split if sum(split.values()) == total else None


def reshape_allocations(
    allocations: Allocations,
    moves: Sequence[ClassMove],
    tree: ProviderTree,
    expected: Mapping[str, ConsumerAllocations] | None = None,
) -> dict[str, str]:
    """Move each consumer's amounts of the moving classes onto the new providers, in place.

    Rule: the module docstring (driver's answer for known consumers when it
    carries the held total; otherwise keep what stays valid and place the
    rest on the most free target). Amounts are conserved per consumer and
    class; when nothing fits, the amount still goes to the most free target
    so that Placement refuses the reshape ("Unable to allocate inventory",
    hence :class:`ReshapeFailed`) instead of an allocation being dropped.

    Args:
        allocations: ``{consumer: GET /allocations/{consumer} body}``; edited
            in place (reshape-provider-tree.txt, "Allocations Parameter").
            Per-provider ``generation`` keys of untouched providers are kept.
        moves: from :func:`find_moves`.
        tree: the new tree (after the layout): target capacities are read
            from it, ``(total - reserved) * allocation_ratio``.
        expected: ``{consumer: ConsumerAllocations}`` the driver expects
            (``ComputeDriver.expected_allocations`` on ``tree``); None or
            empty when the driver knows no instance.

    Returns:
        ``{consumer: "driver" | "rule"}`` for each consumer whose allocations
        moved: how its amounts were placed ("rule" if any class was).
    """
    expected = expected or {}
    free: dict[str, dict[str, int]] = defaultdict(dict)
    for move in moves:
        for rp in move.targets:
            free[rp][move.resource_class] = tree.data(rp).inventory[move.resource_class].capacity

    # 1. Take the moving amounts out of every consumer, remembering what sat
    #    on a provider that keeps the class.
    held: dict[str, dict[ClassMove, int]] = defaultdict(dict)
    stays: dict[str, dict[ClassMove, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for consumer in sorted(allocations):
        per_rp = allocations[consumer].get("allocations", {})
        for move in moves:
            targets = set(move.targets)
            for rp, old_rc in move.sources:
                resources = per_rp.get(rp, {}).get("resources", {})
                amount = resources.pop(old_rc, 0)
                if not amount:
                    continue
                held[consumer][move] = held[consumer].get(move, 0) + amount
                if rp in targets:
                    stays[consumer][move][rp] = stays[consumer][move].get(rp, 0) + amount
        for rp in [rp for rp, a in per_rp.items() if not a.get("resources")]:
            del per_rp[rp]

    def place(consumer: str, move: ClassMove, rp: str, amount: int) -> None:
        _add(allocations[consumer], rp, move.resource_class, amount)
        free[rp][move.resource_class] -= amount

    # 2. Consumers the driver knows, then what stays where it is.
    how: dict[str, str] = {}
    strays: dict[str, dict[ClassMove, int]] = defaultdict(dict)
    for consumer in sorted(held, key=lambda c: (c not in expected, c)):
        how[consumer] = "driver"
        for move, total in held[consumer].items():
            split = _driver_split(expected.get(consumer), move, total)
            if split is None:
                if consumer in expected:
                    LOG.warning(
                        "consumer %s holds %d %s but the driver expects another amount; "
                        "moving what it holds by the rule for unknown consumers",
                        consumer,
                        total,
                        move.resource_class,
                    )
                how[consumer] = "rule"
                split = dict(stays[consumer][move])
                rest = total - sum(split.values())
                if rest:
                    strays[consumer][move] = rest
            for rp, amount in split.items():
                place(consumer, move, rp, amount)

    # 3. The rest, by the most-free rule, consumer by consumer in UUID order.
    order = {rp: i for i, rp in enumerate(tree.get_provider_uuids())}
    for consumer in sorted(strays):
        groups: dict[tuple[str, ...], list[ClassMove]] = defaultdict(list)
        for move in strays[consumer]:
            groups[move.targets].append(move)
        for targets, group in groups.items():
            need = {m: strays[consumer][m] for m in group}
            ranked = sorted(targets, key=lambda rp: _rank(rp, free, group, order))
            fits = [
                rp for rp in ranked if all(free[rp][m.resource_class] >= n for m, n in need.items())
            ]
            if fits:
                for move, amount in need.items():
                    place(consumer, move, fits[0], amount)
                continue
            for move, amount in need.items():
                _spread(consumer, move, amount, free, order, place)
    return how


def _rank(
    rp: str,
    free: Mapping[str, Mapping[str, int]],
    moves: Sequence[ClassMove],
    order: Mapping[str, int],
) -> tuple[int, ...]:
    classes = sorted(
        (m.resource_class for m in moves),
        key=lambda rc: (_CLASS_RANK.index(rc) if rc in _CLASS_RANK else len(_CLASS_RANK), rc),
    )
    return (*(-free[rp][rc] for rc in classes), order.get(rp, len(order)))


def _spread(
    consumer: str,
    move: ClassMove,
    amount: int,
    free: Mapping[str, Mapping[str, int]],
    order: Mapping[str, int],
    place: Callable[[str, ClassMove, str, int], None],
) -> None:
    """Split ``amount`` over the targets, most free first; an excess goes to the most free."""
    rc = move.resource_class
    ranked = sorted(move.targets, key=lambda rp: (-free[rp][rc], order.get(rp, len(order))))
    for rp in ranked:
        take = min(amount, max(free[rp][rc], 0))
        if take:
            place(consumer, move, rp, take)
            amount -= take
    if amount:
        # Does not fit anywhere: Placement will refuse the reshape, which is
        # what should happen (ReshapeFailed) rather than losing the amount.
        place(consumer, move, ranked[0], amount)


# -- the start-up flow -----------------------------------------------------------


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


def is_generation_conflict(exc: ReshapeFailed) -> bool:
    """True when ``POST /reshaper`` failed on a stale generation (re-read and retry)."""
    return isinstance(exc.__cause__, GenerationConflict)


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
    driver: ComputeDriver,
    nodename: str,
    *,
    attempts: int = 3,
    dry_run: bool = False,
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
    again, up to ``attempts`` times.

    Args:
        report: the report client (its Placement is the one reshaped).
        driver: the compute driver.
        nodename: the compute node.
        attempts: most ``POST /reshaper`` requests sent (>= 1).
        dry_run: compute everything, write nothing (the tree is read with
            ``read_tree``, so not even the compute node is created).

    Returns:
        A :class:`ReshapeOutcome`; ``needed`` False when the tree already has
        its shape (then nothing was written: ``outcome.tree`` is the laid-out
        tree for the caller's ordinary flush).

    Raises:
        ReshapeFailed: ``POST /reshaper`` was refused (allocations that do not
            fit, missing role, ...) or still conflicted after ``attempts``;
            Placement holds what it held before the call.
        ConfigError: the configuration does not fit the host.
        PlacementError, PlacementUnavailable: reading failed.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    start = report.client.total_requests()
    outcome = ReshapeOutcome(nodename, needed=False, dry_run=dry_run)
    for attempt in range(1, attempts + 1):
        if dry_run:
            tree = report.read_tree(nodename)
            if tree is None:
                outcome.requests = report.client.total_requests() - start
                return outcome
        else:
            tree = report.get_provider_tree_and_ensure_root(nodename)
        held = tree.copy()
        try:
            driver.update_provider_tree(tree, nodename)
        except ReshapeNeeded as exc:
            reason = str(exc)
        else:
            outcome = ReshapeOutcome(
                nodename, False, dry_run=dry_run, attempts=outcome.attempts, tree=tree
            )
            outcome.requests = report.client.total_requests() - start
            return outcome
        LOG.info("node %s needs a reshape (%s); reading its allocations", nodename, reason)
        allocations = report.get_allocations_for_provider_tree(nodename)
        before = copy.deepcopy(allocations)
        tree = held.copy()
        driver.update_provider_tree(tree, nodename, allocations=allocations)
        changed = {c: rec for c, rec in allocations.items() if rec != before[c]}
        outcome = ReshapeOutcome(
            nodename, True, reason, dry_run=dry_run, attempts=outcome.attempts, tree=tree
        )
        _fill_changes(outcome, held, tree, before, allocations)
        outcome.placed_by = dict(driver.reshape_placement.get(nodename, {}))
        if dry_run:
            outcome.requests = report.client.total_requests() - start
            return outcome
        outcome.attempts += 1
        try:
            outcome.result = report.update_from_provider_tree(tree, changed)
        except ReshapeFailed as exc:
            if is_generation_conflict(exc) and attempt < attempts:
                LOG.warning(
                    "node %s: POST /reshaper met a generation conflict (attempt %d of %d); "
                    "re-reading the tree and the allocations",
                    nodename,
                    attempt,
                    attempts,
                )
                continue
            if is_generation_conflict(exc):
                raise ReshapeFailed(
                    f"{exc} (still conflicting after {attempts} attempts: other services keep "
                    "allocating on this host; stop them, or run `compute-agent reshape` "
                    "with every service stopped)"
                ) from exc.__cause__
            raise
        outcome.requests = report.client.total_requests() - start
        LOG.info(
            "node %s reshaped: %d providers' inventories, %d consumers' allocations moved",
            nodename,
            len(outcome.inventories_after),
            len(changed),
        )
        return outcome
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover


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
