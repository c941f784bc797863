"""Reshaping a compute node's provider tree: detection and the allocation rewrite (pure data).

Spec: reshape-provider-tree.txt. A reshape moves inventory from one provider
of a compute node's tree to another (or from one resource class to another)
*with* the allocations held against it, in one atomic ``POST /reshaper``,
so no scheduler ever sees the capacity twice or an allocation without its
inventory. The shape changes the agent makes (docs/reshape.md):

1. VGPU on the compute node -> one child provider per physical GPU;
2. flat -> NUMA (``[numa] model_in_placement``) and back;
3. ``[compute] resource_class_renames = CUSTOM_OLD:NEW``;
4. MEM_ENCRYPTION_CONTEXT on the compute node (nova before 2025.2) -> the
   AMD SEV child ``{nodename}_amd_sev`` (:mod:`agent.shape.mem_encryption`).

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
- the VGPU of a consumer the driver does not know (nova's migration record)
  follows its source domain's mdevs, or the reshape is refused as nova's is
  (:func:`agent.shape.vgpu_sources.vgpu_sources`).
- allocations on providers outside the tree (sharing providers) are kept.

:func:`agent.shape.update.update_provider_tree` lays out, detects and
(given allocations) moves them; the start-up flow that reads Placement and
writes the reshape is :mod:`agent.tracker.reshape`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.model.allocations import ConsumerAllocations
from agent.model.provider_tree import ProviderTree
from agent.shape.vgpu_sources import driver_split, vgpu_sources

LOG = logging.getLogger(__name__)

Allocations = dict[str, dict[str, Any]]
"""``{consumer_uuid: GET /allocations/{consumer_uuid} body}`` (spec: "Allocations Parameter")."""

PlacedBy = dict[str, str]
"""``{consumer_uuid: "driver" | "rule"}``: how a reshape placed each consumer it moved."""

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
            moves.append(ClassMove(rc, tuple(sources), tuple(_preferred(rc, targets, new))))
    return moves


def _preferred(rc: str, targets: list[str], new: ProviderTree) -> list[str]:
    """The targets a class may move to: for MEM_ENCRYPTION_CONTEXT, the AMD SEV child alone.

    Before 2025.2 nova had only SEV and put its slots on the compute node; nova's
    reshape (libvirt driver ``_reshape_memory_encryption_allocations``) moves
    every such allocation to the child with ``HW_CPU_X86_AMD_SEV``, never to
    an SEV-ES or SEV-SNP one (a guest's model does not change).
    """
    if rc != "MEM_ENCRYPTION_CONTEXT":
        return targets
    sev = [u for u in targets if "HW_CPU_X86_AMD_SEV" in new.data(u).traits]
    return sev or targets


def describe_moves(moves: Iterable[ClassMove], held: ProviderTree, new: ProviderTree) -> str:
    """``"VGPU: cn -> cn_pci_…; VCPU: cn -> cn_NUMA0, cn_NUMA1"`` for messages and logs."""
    return "; ".join(m.describe(held, new) for m in moves)


def _add(record: dict[str, Any], provider: str, rc: str, amount: int) -> None:
    entry = record["allocations"].setdefault(provider, {"resources": {}})
    resources = entry.setdefault("resources", {})
    resources[rc] = resources.get(rc, 0) + amount


def reshape_allocations(
    allocations: Allocations,
    moves: Sequence[ClassMove],
    tree: ProviderTree,
    expected: Mapping[str, ConsumerAllocations] | None = None,
) -> PlacedBy:
    """Move each consumer's amounts of the moving classes onto the new providers, in place.

    Rule: the module docstring (driver's answer for known consumers when it
    carries the held total; otherwise keep what stays valid and place the
    rest on the most free target). Amounts are conserved per consumer and
    class; when nothing fits, the amount still goes to the most free target
    so that Placement refuses the reshape ("Unable to allocate inventory",
    hence :class:`~agent.model.exceptions.ReshapeFailed`) instead of an allocation being dropped.

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
    ledger = _Ledger.for_targets(allocations, moves, tree)
    held, stays = _take_moving_amounts(allocations, moves)
    devices = vgpu_sources(allocations, held, expected)
    how: PlacedBy = {}
    strays: dict[str, dict[ClassMove, int]] = {}
    # Consumers the driver knows first, so the rule places the others around them.
    for consumer in sorted(held, key=lambda c: (c not in expected and c not in devices, c)):
        how[consumer], rest = _place_known(
            consumer,
            held[consumer],
            stays[consumer],
            expected.get(consumer, devices.get(consumer)),
            ledger,
        )
        if rest:
            strays[consumer] = rest
    # The rest, by the most-free rule, consumer by consumer in UUID order.
    for consumer in sorted(strays):
        _place_by_rule(consumer, strays[consumer], ledger)
    return how


def _take_moving_amounts(
    allocations: Allocations, moves: Sequence[ClassMove]
) -> tuple[dict[str, dict[ClassMove, int]], dict[str, dict[ClassMove, dict[str, int]]]]:
    """Take the moving amounts out of every consumer's record.

    Returns:
        ``(held, stays)``: ``held[consumer][move]`` is the amount taken out;
        ``stays[consumer][move]`` is ``{provider: amount}`` of it that sat on
        a provider which keeps the class (a target of the move).
    """
    held: dict[str, dict[ClassMove, int]] = defaultdict(dict)
    stays: dict[str, dict[ClassMove, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for consumer in sorted(allocations):
        per_rp = allocations[consumer].get("allocations", {})
        for move in moves:
            targets = set(move.targets)
            for rp, old_rc in move.sources:
                amount = per_rp.get(rp, {}).get("resources", {}).pop(old_rc, 0)
                if not amount:
                    continue
                held[consumer][move] = held[consumer].get(move, 0) + amount
                if rp in targets:
                    stays[consumer][move][rp] = stays[consumer][move].get(rp, 0) + amount
        for rp in [rp for rp, a in per_rp.items() if not a.get("resources")]:
            del per_rp[rp]
    return held, stays


def _place_known(
    consumer: str,
    held: Mapping[ClassMove, int],
    stays: Mapping[ClassMove, Mapping[str, int]],
    expected: ConsumerAllocations | None,
    ledger: _Ledger,
) -> tuple[str, dict[ClassMove, int]]:
    """Place one consumer's moving amounts by the driver's answer, else keep what stays.

    Returns:
        ``("driver" | "rule", {move: amount left for the rule})``.
    """
    how = "driver"
    rest: dict[ClassMove, int] = {}
    for move, total in held.items():
        split = driver_split(expected, move, total)
        if split is None:
            if expected is not None:
                LOG.warning(
                    "consumer %s holds %d %s but the driver expects another amount; "
                    "moving what it holds by the rule for unknown consumers",
                    consumer,
                    total,
                    move.resource_class,
                )
            how = "rule"
            split = dict(stays.get(move, {}))
            left = total - sum(split.values())
            if left:
                rest[move] = left
        for rp, amount in split.items():
            ledger.place(consumer, move, rp, amount)
    return how, rest


def _place_by_rule(consumer: str, strays: Mapping[ClassMove, int], ledger: _Ledger) -> None:
    """Place what is left of one consumer: whole on the most free target, else spread.

    The moves sharing the same targets are placed together, so a consumer's
    VCPU and MEMORY_MB land on the same NUMA cell when one cell fits both.
    """
    groups: dict[tuple[str, ...], list[ClassMove]] = defaultdict(list)
    for move in strays:
        groups[move.targets].append(move)
    for targets, group in groups.items():
        need = {m: strays[m] for m in group}
        fits = ledger.fitting(targets, need)
        for move, amount in need.items():
            if fits:
                ledger.place(consumer, move, fits[0], amount)
            else:
                ledger.spread(consumer, move, amount)


@dataclass(slots=True)
class _Ledger:
    """The allocations being rewritten and the free capacity of each target provider.

    Attributes:
        allocations: the records edited in place.
        free: ``{provider: {class: capacity not yet placed}}``.
        order: provider UUID -> position in the new tree (ties go to the first).
    """

    allocations: Allocations
    free: dict[str, dict[str, int]]
    order: dict[str, int]

    @classmethod
    def for_targets(
        cls, allocations: Allocations, moves: Sequence[ClassMove], tree: ProviderTree
    ) -> _Ledger:
        free: dict[str, dict[str, int]] = defaultdict(dict)
        for move in moves:
            for rp in move.targets:
                free[rp][move.resource_class] = (
                    tree.data(rp).inventory[move.resource_class].capacity
                )
        order = {rp: i for i, rp in enumerate(tree.get_provider_uuids())}
        return cls(allocations, free, order)

    def place(self, consumer: str, move: ClassMove, rp: str, amount: int) -> None:
        _add(self.allocations[consumer], rp, move.resource_class, amount)
        self.free[rp][move.resource_class] -= amount

    def fitting(self, targets: Sequence[str], need: Mapping[ClassMove, int]) -> list[str]:
        """The targets where every amount of ``need`` fits, best ranked first."""
        ranked = sorted(targets, key=lambda rp: self._rank(rp, list(need)))
        return [
            rp
            for rp in ranked
            if all(self.free[rp][m.resource_class] >= n for m, n in need.items())
        ]

    def _rank(self, rp: str, moves: Sequence[ClassMove]) -> tuple[int, ...]:
        classes = sorted(
            (m.resource_class for m in moves),
            key=lambda rc: (_CLASS_RANK.index(rc) if rc in _CLASS_RANK else len(_CLASS_RANK), rc),
        )
        return (*(-self.free[rp][rc] for rc in classes), self.order.get(rp, len(self.order)))

    def spread(self, consumer: str, move: ClassMove, amount: int) -> None:
        """Split ``amount`` over the targets, most free first; an excess goes to the most free."""
        rc = move.resource_class
        ranked = sorted(
            move.targets, key=lambda rp: (-self.free[rp][rc], self.order.get(rp, len(self.order)))
        )
        for rp in ranked:
            take = min(amount, max(self.free[rp][rc], 0))
            if take:
                self.place(consumer, move, rp, take)
                amount -= take
        if amount:
            # Does not fit anywhere: Placement will refuse the reshape, which is
            # what should happen (ReshapeFailed) rather than losing the amount.
            self.place(consumer, move, ranked[0], amount)
