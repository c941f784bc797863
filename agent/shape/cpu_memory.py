"""The compute node's own classes: VCPU, PCPU, MEMORY_MB (flat, or per NUMA cell), DISK_GB.

Inventory rules follow compute-node-inventory.rst: ``max_unit = total``,
VCPU/MEMORY_MB/DISK_GB carry their allocation ratio, DISK_GB is not reported
on the compute node when instance disks are on shared storage (4b).

Reserved amounts with NUMA modelled: ``reserved_host_cpus`` and
``reserved_host_memory_mb`` are taken from the lowest-numbered cells first
(cell 0 until it is exhausted, then cell 1, ...), because the host's own
processes start there.
"""

from __future__ import annotations

import math

import os_traits

from agent.model.exceptions import ConfigError
from agent.model.names import resource_class_name
from agent.model.provider_tree import ProviderTree
from agent.model.resources import Inventory
from agent.shape.node_traits import cell_cpu_traits
from agent.shape.policy import LayoutPolicy
from agent.shape.provider_names import numa_provider_name
from agent.shape.spec import ProviderSpec, inventory
from drivers.records import HostResources


class Ratios:
    """Picks the allocation ratio per class: configured, else Placement's, else initial."""

    def __init__(self, tree: ProviderTree, policy: LayoutPolicy) -> None:
        self._tree = tree
        self._policy = policy

    def __call__(self, provider: str, rc: str) -> float:
        """The ratio of class ``rc`` on provider ``provider`` (nova's rule; 1.0 for others)."""
        kind = {"VCPU": "cpu", "MEMORY_MB": "ram", "DISK_GB": "disk"}.get(rc)
        if kind is None:
            return 1.0
        configured = getattr(self._policy, f"{kind}_allocation_ratio")
        if configured is not None:
            return configured
        if self._tree.exists(provider):
            held = self._tree.data(provider).inventory.get(rc)
            if held is not None:
                return held.allocation_ratio
        return getattr(self._policy, f"initial_{kind}_allocation_ratio")


def _split_reserved(amount: int, totals: list[int]) -> list[int]:
    """Spread ``amount`` over ``totals`` lowest index first, never beyond a total."""
    out = []
    for total in totals:
        take = min(amount, total)
        out.append(take)
        amount -= take
    return out


def _check_reserved(option: str, rc: str, reserved: int, total: int) -> None:
    if reserved > total:
        raise ConfigError(
            f"[DEFAULT] {option} = {reserved} is more than the host's {rc} total of {total}; "
            f"lower {option}"
        )


def numa_cell_specs(host: HostResources, policy: LayoutPolicy, ratio: Ratios) -> list[ProviderSpec]:
    """One child of the compute node per NUMA cell: its VCPU, PCPU and MEMORY_MB.

    Traits: ``HW_NUMA_ROOT`` and the cell's CPU traits
    (:func:`agent.shape.node_traits.cell_cpu_traits`).

    Raises:
        ConfigError: ``reserved_host_cpus`` or ``reserved_host_memory_mb``
            exceeds the cells' sum.
    """
    node = host.nodename
    reserved_cpus = policy.reserved_host_cpus
    reserved_mem = policy.reserved_host_memory_mb
    cells = sorted(host.numa_cells, key=lambda c: c.id)
    _check_reserved("reserved_host_cpus", "VCPU", reserved_cpus, sum(c.vcpus for c in cells))
    _check_reserved(
        "reserved_host_memory_mb", "MEMORY_MB", reserved_mem, sum(c.memory_mb for c in cells)
    )
    cpu_res = _split_reserved(reserved_cpus, [c.vcpus for c in cells])
    mem_res = _split_reserved(reserved_mem, [c.memory_mb for c in cells])
    specs = []
    for cell, r_cpu, r_mem in zip(cells, cpu_res, mem_res, strict=True):
        name = numa_provider_name(node, cell.id)
        inv: dict[str, Inventory] = {}
        if cell.vcpus:
            inv["VCPU"] = inventory("VCPU", cell.vcpus, r_cpu, ratio(name, "VCPU"))
        if cell.pcpus:
            inv["PCPU"] = inventory("PCPU", cell.pcpus)
        if cell.memory_mb:
            inv["MEMORY_MB"] = inventory(
                "MEMORY_MB", cell.memory_mb, r_mem, ratio(name, "MEMORY_MB")
            )
        traits = {os_traits.HW_NUMA_ROOT} | cell_cpu_traits(host.traits, cell)
        specs.append(ProviderSpec(name, node, inv, traits))
    return specs


def flat_cpu_memory(
    host: HostResources, policy: LayoutPolicy, ratio: Ratios
) -> dict[str, Inventory]:
    """VCPU, PCPU and MEMORY_MB of the compute node itself (NUMA not modelled).

    Raises:
        ConfigError: ``reserved_host_cpus`` or ``reserved_host_memory_mb``
            exceeds the host's total.
    """
    node = host.nodename
    out: dict[str, Inventory] = {}
    if host.vcpus:
        reserved = policy.reserved_host_cpus
        _check_reserved("reserved_host_cpus", "VCPU", reserved, host.vcpus)
        out["VCPU"] = inventory("VCPU", host.vcpus, reserved, ratio(node, "VCPU"))
    if host.pcpus:
        out["PCPU"] = inventory("PCPU", host.pcpus)
    if host.memory_mb:
        reserved = policy.reserved_host_memory_mb
        _check_reserved("reserved_host_memory_mb", "MEMORY_MB", reserved, host.memory_mb)
        out["MEMORY_MB"] = inventory(
            "MEMORY_MB", host.memory_mb, reserved, ratio(node, "MEMORY_MB")
        )
    return out


def pmem_inventory(host: HostResources) -> dict[str, Inventory]:
    """``CUSTOM_PMEM_NAMESPACE_{LABEL}`` of the compute node: one unit per namespace.

    nova's libvirt driver (``_update_provider_tree_for_vpmems``): total =
    max_unit = the label's namespaces, reserved 0, ratio 1; the class is
    ``PMEM_NAMESPACE_{LABEL}`` normalised as a custom class.
    """
    out = {}
    for label, names in host.pmem_namespaces.items():
        if names:
            rc = resource_class_name(f"PMEM_NAMESPACE_{label}")
            out[rc] = inventory(rc, len(names))
    return out


def disk_inventory(
    host: HostResources, policy: LayoutPolicy, ratio: Ratios
) -> dict[str, Inventory]:
    """DISK_GB of the compute node; none when instance disks are on shared storage (4b).

    ``reserved_host_disk_mb`` is reported in whole GiB, rounded up, plus the
    image cache's size when the driver measured it (nova's libvirt driver,
    ``[workarounds] reserve_disk_resource_for_image_cache``); the cache's
    share is capped so that reserved never exceeds the total (Placement
    refuses that; a full disk is then all reserved).

    Raises:
        ConfigError: ``reserved_host_disk_mb`` exceeds the host's disk.
    """
    if not host.disk_gb or host.shared_storage:
        return {}
    reserved = math.ceil(policy.reserved_host_disk_mb / 1024)
    _check_reserved("reserved_host_disk_mb", "DISK_GB", reserved, host.disk_gb)
    reserved = min(reserved + host.image_cache_gb, host.disk_gb)
    return {
        "DISK_GB": inventory("DISK_GB", host.disk_gb, reserved, ratio(host.nodename, "DISK_GB"))
    }
