"""The allocations every instance should hold.

Rules from resource-providers-allocations.txt, extended to nested providers:

- VCPU (PCPU for an instance with dedicated CPUs) and MEMORY_MB from its
  flavor, against the compute node, or against NUMA cell providers when NUMA
  is modelled (below).
- DISK_GB = root_gb + ephemeral_gb + swap (MiB, rounded up to whole GiB as
  nova does); root_gb counts 0 when booted from volume. Against the compute
  node, or, on shared storage, against the sharing provider associated by
  aggregate; with shared storage and no sharing provider known, no DISK_GB
  is allocated (the spec's "no way to know" case) and a warning says so.
- One unit of the device's class per whole PCI device, SRIOV_NET_VF per VF
  against its PF's provider, VGPU per mdev against the GPU that holds it.

NUMA rule: an instance pinned to cells has its CPUs and memory split evenly
over those cells (the remainder to the lowest-numbered ones). An instance
with no NUMA affinity is placed whole on the cell with the most free
capacity of its CPU class at that point (ties: more free memory, then the
lower cell number); pinned instances are placed first, then the others in
UUID order, so the result does not depend on the order the driver listed them.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from agent.layout import LayoutPolicy, device_provider_name, numa_provider_name
from agent.provider_tree import ProviderTree
from drivers.records import HostResources, Instance

LOG = logging.getLogger(__name__)

CONSUMER_TYPE = "INSTANCE"
"""Placement consumer type of an instance (microversion 1.38)."""

AllocationRecord = dict[str, Any]
"""``{"allocations": {rp: {"resources": {rc: n}}}, "project_id", "user_id", "consumer_type"}``."""


def disk_gb(instance: Instance) -> int:
    """GiB of DISK_GB an instance uses: root (0 when booted from volume) + ephemeral + swap."""
    f = instance.flavor
    root = 0 if instance.boot_from_volume else f.root_gb
    return root + f.ephemeral_gb + math.ceil(f.swap_mb / 1024)


def _split(amount: int, parts: int) -> list[int]:
    base, rest = divmod(amount, parts)
    return [base + (1 if i < rest else 0) for i in range(parts)]


class _NumaLedger:
    """Free capacity per NUMA cell provider while instances are placed."""

    def __init__(self, tree: ProviderTree, nodename: str, cell_ids: Iterable[int]) -> None:
        self.names = {cid: numa_provider_name(nodename, cid) for cid in sorted(cell_ids)}
        self.free: dict[int, dict[str, int]] = {}
        for cid, name in self.names.items():
            inv = tree.data(name).inventory if tree.exists(name) else {}
            self.free[cid] = {rc: i.capacity for rc, i in inv.items()}

    def take(self, cid: int, rc: str, amount: int) -> None:
        self.free[cid][rc] = self.free[cid].get(rc, 0) - amount

    def best_cell(self, cpu_rc: str) -> int:
        return min(
            self.free,
            key=lambda c: (-self.free[c].get(cpu_rc, 0), -self.free[c].get("MEMORY_MB", 0), c),
        )


def plan_allocations(
    instances: Iterable[Instance],
    host: HostResources,
    tree: ProviderTree,
    policy: LayoutPolicy,
    sharing_provider_uuid: str | None = None,
) -> dict[str, AllocationRecord]:
    """The allocation every instance of a node should hold, keyed by consumer UUID.

    Args:
        instances: the node's instances (``ComputeDriver.list_instances``).
        host: the node's hardware (to find which GPU holds an mdev, which PF a VF).
        tree: the provider tree after ``update_provider_tree`` (for UUIDs).
        policy: the layout policy (is NUMA modelled).
        sharing_provider_uuid: the shared-storage provider to put DISK_GB
            on when ``host.shared_storage``; None when none is associated.

    Returns:
        ``{consumer_uuid: AllocationRecord}``; the record is the body of
        ``PUT /allocations/{consumer_uuid}`` less ``consumer_generation``.
        An instance that uses nothing gets no entry.

    Raises:
        ProviderNotFound: the compute node is not in ``tree``.
    """
    node = host.nodename
    root_uuid = tree.data(node).uuid
    numa = policy.model_numa and bool(host.numa_cells)
    ledger = _NumaLedger(tree, node, (c.id for c in host.numa_cells)) if numa else None
    pf_of_vf = host.pf_of_vf()
    gpu_of_mdev = host.gpu_of_mdev()
    whole = {d.address for d in host.pci_devices}

    ordered = sorted(instances, key=lambda i: (not i.numa_cells, i.uuid))
    out: dict[str, AllocationRecord] = {}
    for inst in ordered:
        res: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        cpu_rc = "PCPU" if inst.pinned else "VCPU"
        if ledger is None:
            if inst.flavor.vcpus:
                res[root_uuid][cpu_rc] += inst.flavor.vcpus
            if inst.flavor.memory_mb:
                res[root_uuid]["MEMORY_MB"] += inst.flavor.memory_mb
        else:
            cells = [c for c in inst.numa_cells if c in ledger.names]
            if len(cells) != len(inst.numa_cells):
                LOG.warning(
                    "instance %s is pinned to NUMA cells %s but node %s has cells %s; "
                    "placing it by the no-affinity rule",
                    inst.uuid,
                    list(inst.numa_cells),
                    node,
                    sorted(ledger.names),
                )
                cells = []
            if not cells:
                cells = [ledger.best_cell(cpu_rc)]
            for cid, cpus, mem in zip(
                cells,
                _split(inst.flavor.vcpus, len(cells)),
                _split(inst.flavor.memory_mb, len(cells)),
                strict=True,
            ):
                cell_uuid = tree.data(ledger.names[cid]).uuid
                if cpus:
                    res[cell_uuid][cpu_rc] += cpus
                    ledger.take(cid, cpu_rc, cpus)
                if mem:
                    res[cell_uuid]["MEMORY_MB"] += mem
                    ledger.take(cid, "MEMORY_MB", mem)

        disk = disk_gb(inst)
        if disk:
            if not host.shared_storage:
                res[root_uuid]["DISK_GB"] += disk
            elif sharing_provider_uuid:
                res[sharing_provider_uuid]["DISK_GB"] += disk
            else:
                LOG.warning(
                    "instance %s: %d GiB of disk on shared storage not allocated: no sharing "
                    "provider is associated with compute node %s by aggregate",
                    inst.uuid,
                    disk,
                    node,
                )

        for address in inst.pci_devices:
            if address in pf_of_vf:
                provider, rc = device_provider_name(node, pf_of_vf[address]), "SRIOV_NET_VF"
            elif address in whole:
                provider = device_provider_name(node, address)
                inv = tree.data(provider).inventory if tree.exists(provider) else {}
                rc = next(iter(inv), "")
            else:
                provider, rc = "", ""
            if not rc or not tree.exists(provider):
                LOG.warning(
                    "instance %s: PCI device %s is not a device this node reports; "
                    "no allocation for it",
                    inst.uuid,
                    address,
                )
                continue
            res[tree.data(provider).uuid][rc] += 1

        for mdev in inst.mdevs:
            gpu = gpu_of_mdev.get(mdev)
            provider = device_provider_name(node, gpu) if gpu else ""
            if not gpu or not tree.exists(provider):
                LOG.warning(
                    "instance %s: mdev %s is not on a GPU this node reports as VGPU; "
                    "no allocation for it",
                    inst.uuid,
                    mdev,
                )
                continue
            res[tree.data(provider).uuid]["VGPU"] += 1

        if res:
            out[inst.uuid] = {
                "allocations": {
                    rp: {"resources": dict(sorted(amounts.items()))} for rp, amounts in res.items()
                },
                "project_id": inst.project_id,
                "user_id": inst.user_id,
                "consumer_type": CONSUMER_TYPE,
            }
    return out
