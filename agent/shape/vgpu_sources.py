"""Where a reshape puts a moving consumer's vGPUs when the driver does not list it.

Part of the allocation rewrite of :mod:`agent.shape.reshape` (pure data): nova's
migration record of a move off this host holds the source domain's vGPUs, and
those are the mdevs the domain still has here (docs/reshape.md).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Protocol

from agent.model.allocations import ConsumerAllocations
from agent.model.exceptions import ReshapeFailed


class ClassMove(Hashable, Protocol):
    """What this module reads of :class:`agent.shape.reshape.ClassMove` (which imports it)."""

    @property
    def resource_class(self) -> str: ...

    @property
    def targets(self) -> tuple[str, ...]: ...


Allocations = dict[str, dict[str, Any]]


def driver_split(
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


def vgpu_sources(
    allocations: Allocations,
    held: Mapping[str, Mapping[ClassMove, int]],
    expected: Mapping[str, ConsumerAllocations],
) -> dict[str, ConsumerAllocations]:
    """Where the vGPUs of each moving consumer that is not an instance go: its source domain's.

    A consumer holding VGPU that the driver does not list is nova's migration
    record of a move off this host (``replace_allocation_with_migration``):
    its vGPUs are the mdevs of the source domain, still defined here, whose
    own consumer now holds its destination's share. That domain is the
    listed instance of the record's project and user whose plan puts as many
    VGPU on the GPUs as the record holds and whose own consumer holds no
    VGPU here; one record explains one domain. When no domain (or no single
    placement of its mdevs) explains it, the reshape is refused, as nova's
    own is (``LibvirtDriver._get_assigned_mdevs_for_reshape``: "The
    allocation is made against a non-existing instance or there are no
    devices assigned").

    Returns:
        ``{consumer: the source domain's plan, VGPU only}``.

    Raises:
        ReshapeFailed: a consumer's VGPU is explained by no domain listed here.
    """
    found: dict[str, ConsumerAllocations] = {}
    taken: set[str] = set()
    for consumer in sorted(c for c in held if c not in expected):
        vgpu = {m: n for m, n in held[consumer].items() if m.resource_class == "VGPU"}
        if not vgpu:
            continue
        record = allocations[consumer]
        owner = (record.get("project_id"), record.get("user_id"))
        splits = _candidates(owner, vgpu, held, expected, taken)
        if len(set(splits.values())) != 1:
            raise ReshapeFailed(
                f"consumer {consumer} holds VGPU {sum(vgpu.values())} on this host and is "
                f"not an instance listed here; "
                + (
                    "no domain here of its project and user has the mdevs for it"
                    if not splits
                    else f"several domains could be its source ({', '.join(splits)})"
                )
                + " (nova's reshape refuses a migration's vGPU the same way): confirm or revert "
                "the move, then restart"
            )
        source = sorted(splits)[0]  # every candidate places the vGPUs alike
        taken.add(source)
        plan = expected[source]
        found[consumer] = plan.with_allocations(
            {rp: {"VGPU": a["VGPU"]} for rp, a in plan.allocations.items() if "VGPU" in a}
        )
    return found


def _candidates(
    owner: tuple[Any, Any],
    vgpu: Mapping[ClassMove, int],
    held: Mapping[str, Mapping[ClassMove, int]],
    expected: Mapping[str, ConsumerAllocations],
    taken: set[str],
) -> dict[str, tuple[tuple[str, str], ...]]:
    """``{instance: where its plan puts the vGPUs}`` of the domains that may be the source."""
    splits = {}
    for instance, plan in sorted(expected.items()):
        if instance in taken or (plan.project_id, plan.user_id) != owner:
            continue
        if any(held.get(instance, {}).get(move) for move in vgpu):
            continue  # its own consumer holds its vGPUs here
        split = {m: driver_split(plan, m, n) for m, n in vgpu.items()}
        if all(split.values()):
            splits[instance] = tuple(sorted((m.resource_class, str(v)) for m, v in split.items()))
    return splits
