"""An instance's CPUs and memory over a node's NUMA cells, and the cells' free capacity.

The parts of :mod:`agent.shape.planning`'s NUMA rule that look at one instance and
one cell at a time: the split its own guest cells give (the libvirt driver reads the
domain's ``<cpu><numa>`` cells and ``<numatune>`` memnodes), the even split when they
say nothing usable, and the ledger of what each cell has left while a node's instances
are placed.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping

from agent.model.provider_tree import ProviderTree
from agent.shape.instance_amounts import cpu_amounts
from agent.shape.provider_names import numa_provider_name
from drivers.records import Instance

LOG = logging.getLogger(__name__)

CPU_MEMORY_CLASSES = frozenset({"VCPU", "PCPU", "MEMORY_MB"})
"""Classes every instance holds on the compute node or its NUMA cells (flavor)."""


class NumaLedger:
    """Free capacity per NUMA cell provider while instances are placed.

    Args:
        tree: the node's tree (its ``{nodename}_NUMA{N}`` providers' inventories).
        nodename: the compute node.
        cell_ids: the host's NUMA cell ids.
    """

    def __init__(self, tree: ProviderTree, nodename: str, cell_ids: Iterable[int]) -> None:
        self.names = {cid: numa_provider_name(nodename, cid) for cid in sorted(cell_ids)}
        self.uuids: dict[int, str] = {}
        self.free: dict[int, dict[str, int]] = {}
        for cid, name in self.names.items():
            inv = tree.data(name).inventory if tree.exists(name) else {}
            self.free[cid] = {rc: i.capacity for rc, i in inv.items()}
            if tree.exists(name):
                self.uuids[cid] = tree.data(name).uuid
        self.cell_of = {u: cid for cid, u in self.uuids.items()}

    def take(self, cid: int, rc: str, amount: int) -> None:
        self.free[cid][rc] = self.free[cid].get(rc, 0) - amount

    def fits(self, amounts: Mapping[int, Mapping[str, int]]) -> bool:
        return all(
            self.free[cid].get(rc, 0) >= n for cid, res in amounts.items() for rc, n in res.items()
        )

    def best_cell(self, cpu_rc: str) -> int:
        return min(
            self.free,
            key=lambda c: (-self.free[c].get(cpu_rc, 0), -self.free[c].get("MEMORY_MB", 0), c),
        )


def even_split(inst: Instance, cells: list[int]) -> dict[int, dict[str, int]]:
    """``inst``'s CPUs and memory split evenly over ``cells``, the remainder to the first
    ones: ``{cell id: {resource class: amount}}`` (counts and MiB), zero parts left out."""
    split: dict[int, dict[str, int]] = {c: {} for c in cells}
    for rc, n in {**cpu_amounts(inst), "MEMORY_MB": inst.flavor.memory_mb}.items():
        base, rest = divmod(n, len(cells))
        for i, cid in enumerate(cells):
            part = base + (1 if i < rest else 0)
            if part:
                split[cid][rc] = part
    return split


def guest_cell_split(inst: Instance, modelled: Collection[int]) -> dict[int, dict[str, int]] | None:
    """``inst``'s CPUs and memory per host cell as its own NUMA cells lie on them
    (:attr:`drivers.records.Instance.guest_cells`): each guest cell's shared vCPUs as
    VCPU, its dedicated ones as PCPU, its memory as MEMORY_MB, on its host cell; the
    isolated emulator threads' PCPU on guest cell 0's host cell, where nova reserves
    it (nova/virt/hardware.py ``numa_fit_instance_to_host``): ``{cell id: {resource
    class: amount}}``. None when the guest's cells are unknown, name a cell not in
    ``modelled`` (the node's modelled cells), or do not add up to the amounts nova asks
    for (:func:`cpu_amounts`)."""
    guest = inst.guest_cells
    if not guest or any(g.host_cell not in modelled for g in guest):
        return None
    split: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for g in guest:
        split[g.host_cell]["VCPU"] += g.vcpus - g.dedicated
        split[g.host_cell]["PCPU"] += g.dedicated
        split[g.host_cell]["MEMORY_MB"] += g.memory_mb
    amounts = cpu_amounts(inst)
    if amounts.get("PCPU", 0) > sum(g.dedicated for g in guest):
        split[guest[0].host_cell]["PCPU"] += 1  # the emulator threads' own CPU
    planned = {cid: {rc: n for rc, n in part.items() if n} for cid, part in split.items()}
    totals = {rc: sum(p.get(rc, 0) for p in planned.values()) for rc in CPU_MEMORY_CLASSES}
    want = {**amounts, "MEMORY_MB": inst.flavor.memory_mb}
    if {rc: n for rc, n in totals.items() if n} != {rc: n for rc, n in want.items() if n}:
        LOG.warning(
            "instance %s: its NUMA cells hold %s, its flavor asks %s; its CPUs and "
            "memory are split evenly over cells %s",
            inst.uuid,
            totals,
            want,
            list(inst.numa_cells),
        )
        return None
    return planned
