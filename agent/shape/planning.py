"""The allocations every instance should hold.

Rules from resource-providers-allocations.txt, extended to nested providers:

- VCPU and PCPU as nova's scheduler translates the CPU policy
  (:mod:`agent.shape.instance_amounts`: dedicated, mixed, isolated emulator
  threads) and MEMORY_MB from its flavor, against the compute node, or
  against NUMA cell providers when NUMA is modelled (below).
- DISK_GB = root_gb + ephemeral_gb + swap (MiB, rounded up to whole GiB as
  nova does); root_gb counts 0 when booted from volume. Against the compute
  node, or, on shared storage, against the sharing provider associated by
  aggregate; with shared storage and no sharing provider known, no DISK_GB
  is allocated (the spec's "no way to know" case) and a warning says so.
- One unit of the device's class per whole PCI device, SRIOV_NET_VF per VF
  against its PF's provider, VGPU per mdev against the GPU that holds it.
- One MEM_ENCRYPTION_CONTEXT on its model's provider for a guest with memory
  encryption (:mod:`agent.shape.mem_encryption`).

NUMA rule (sticky): an instance pinned to cells has its CPUs and memory on
those cells as its own NUMA cells lie on them (the libvirt driver reads the
domain's ``<cpu><numa>`` cells, their ``<numatune>`` memnodes and the pins:
each guest cell's shared vCPUs, dedicated vCPUs and memory on its host cell;
isolated emulator threads on guest cell 0's host cell, as nova reserves them);
without that, split evenly over those cells (the remainder to the
lowest-numbered ones).
An instance with no NUMA affinity that Placement already holds on cells of
this node, with its flavor's amounts, stays there as long as it fits: its
cells keep room for it after the pinned instances and the consumers that are
not instances (a migration, another service) are counted. Only a new
instance, or one that no longer fits, is placed by the rule: whole on the
cell with the most free capacity of its CPU class at that point (ties: more
free memory, then the lower cell number), in UUID order. So raising a cell's
allocation ratio, adding an instance or restarting the agent moves nothing
that fits, and the result does not depend on the order the driver listed
the instances.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping

from agent.model.allocations import INSTANCE, ByProvider, ConsumerAllocations
from agent.model.provider_tree import ProviderTree
from agent.shape.instance_amounts import cpu_amounts, disk_gb, main_cpu_class
from agent.shape.mem_encryption import MEM_ENCRYPTION_CONTEXT, plan_mem_encryption
from agent.shape.numa_cells import CPU_MEMORY_CLASSES, NumaLedger, even_split, guest_cell_split
from agent.shape.policy import LayoutPolicy
from agent.shape.provider_names import (
    device_provider_name,
    pf_provider_name,
    whole_device_provider_name,
)
from drivers.records import HostResources, Instance

LOG = logging.getLogger(__name__)


def cpu_memory_providers(tree: ProviderTree, providers: Iterable[str]) -> set[str]:
    """The providers among ``providers`` whose inventory has VCPU, PCPU or MEMORY_MB.

    Every instance holds something on one of them (the compute node, or the
    NUMA cells when NUMA is modelled): the allocation audit reads them on
    every cycle (agent.audit.audit_read).
    """
    return {u for u in providers if CPU_MEMORY_CLASSES & set(tree.data(u).inventory)}


def planned_classes(tree: ProviderTree, providers: Iterable[str]) -> frozenset[str]:
    """The resource classes :func:`plan_allocations` can give an instance on ``providers``.

    VCPU, PCPU, MEMORY_MB and DISK_GB, and the classes of the device
    providers among ``providers`` (one unit per VF, whole device or mdev).
    Any other class an instance holds there (a flavor's ``resources:CUSTOM_*``
    on the compute node) is not the planner's: a write keeps it as held
    (:func:`agent.model.allocations.merge_ours`, ``produces``).
    """
    classes = set(CPU_MEMORY_CLASSES | {"DISK_GB"})
    for uuid in providers:
        inventory = set(tree.data(uuid).inventory)
        if not inventory & CPU_MEMORY_CLASSES:
            classes |= inventory
    return frozenset(classes)


Planned = dict[str, dict[str, int]]
"""``{provider UUID: {resource class: amount}}`` being built for one instance."""


class _Planner:
    """Plans one node's instances, kind of allocation by kind (see the module docstring)."""

    def __init__(
        self,
        host: HostResources,
        tree: ProviderTree,
        policy: LayoutPolicy,
        sharing_provider_uuid: str | None,
        held: Mapping[str, ByProvider],
    ) -> None:
        self.host = host
        self.tree = tree
        self.node = host.nodename
        self.root_uuid = tree.data(self.node).uuid
        self.sharing = sharing_provider_uuid
        self.held = held
        numa = policy.model_numa and bool(host.numa_cells)
        self.ledger = NumaLedger(tree, self.node, (c.id for c in host.numa_cells)) if numa else None
        self.pf_of_vf = host.pf_of_vf()
        self.pfs = {pf.address: pf for pf in host.sriov_pfs}
        self.policy = policy
        self.gpu_of_mdev = host.gpu_of_mdev()
        self.whole = {d.address for d in host.pci_devices}
        # Neutron's whole devices (a physnet) have no provider under PCI-in-placement.
        self.unplaced = {
            d.address for d in host.pci_devices if d.physnet and policy.pci_in_placement
        }

    # -- CPUs and memory ---------------------------------------------------------

    def cpu_memory(self, listed: list[Instance], planned: Mapping[str, Planned]) -> None:
        """VCPU or PCPU and MEMORY_MB of every instance: on the node, or on its NUMA cells."""
        if self.ledger is None:
            for inst in listed:
                self.flat(inst, planned[inst.uuid])
            return
        self.count_others(set(planned))
        pinned = sorted((i for i in listed if i.numa_cells), key=lambda i: i.uuid)
        loose = sorted((i for i in listed if not i.numa_cells), key=lambda i: i.uuid)
        for inst in pinned:
            self.by_rule(inst, planned[inst.uuid])
        # Sticky: each loose instance that fits where Placement holds it stays,
        # before any other is placed by the rule (module docstring).
        strays = [inst for inst in loose if not self.stays(inst, planned[inst.uuid])]
        for inst in strays:
            self.by_rule(inst, planned[inst.uuid])

    def stays(self, inst: Instance, res: Planned) -> bool:
        """Plan ``inst`` on the cells Placement holds it on if they still fit; False if not."""
        assert self.ledger is not None
        cells = self.held_cells(inst)
        if cells is None or not self.ledger.fits(cells):
            return False
        self.on_cells(inst, cells, res)
        return True

    def count_others(self, instances: set[str]) -> None:
        """Take what consumers that are not instances hold on the cells off the ledger."""
        if self.ledger is None:
            return
        for consumer, per_rp in self.held.items():
            if consumer in instances:
                continue
            for rp, amounts in per_rp.items():
                cid = self.ledger.cell_of.get(rp)
                if cid is None:
                    continue
                for rc, n in amounts.items():
                    if rc in CPU_MEMORY_CLASSES:
                        self.ledger.take(cid, rc, n)

    def flat(self, inst: Instance, res: Planned) -> None:
        for rc, n in cpu_amounts(inst).items():
            res[self.root_uuid][rc] += n
        if inst.flavor.memory_mb:
            res[self.root_uuid]["MEMORY_MB"] += inst.flavor.memory_mb

    def held_cells(self, inst: Instance) -> dict[int, dict[str, int]] | None:
        """The cells Placement holds ``inst``'s CPUs and memory on, if they carry its flavor."""
        assert self.ledger is not None
        cells: dict[int, dict[str, int]] = {}
        for rp, amounts in self.held.get(inst.uuid, {}).items():
            cid = self.ledger.cell_of.get(rp)
            part = {rc: n for rc, n in amounts.items() if rc in CPU_MEMORY_CLASSES}
            if not part:
                continue
            if cid is None:
                return None  # CPUs or memory held off the cells: not where they belong
            cells[cid] = part
        want = {**cpu_amounts(inst), "MEMORY_MB": inst.flavor.memory_mb}
        held = {rc: sum(c.get(rc, 0) for c in cells.values()) for rc in CPU_MEMORY_CLASSES}
        if not cells or {rc: n for rc, n in held.items() if n} != {
            k: v for k, v in want.items() if v
        }:
            return None
        return cells

    def on_cells(
        self, inst: Instance, cells: Mapping[int, Mapping[str, int]], res: Planned
    ) -> None:
        assert self.ledger is not None
        for cid, amounts in cells.items():
            for rc, n in amounts.items():
                res[self.ledger.uuids[cid]][rc] += n
                self.ledger.take(cid, rc, n)

    def by_rule(self, inst: Instance, res: Planned) -> None:
        """Pinned cells as the guest's own cells lie on them (else split evenly), else the
        whole instance on the most free cell."""
        ledger = self.ledger
        assert ledger is not None
        cells = [c for c in inst.numa_cells if c in ledger.uuids]
        if len(cells) != len(inst.numa_cells):
            LOG.warning(
                "instance %s is pinned to NUMA cells %s but node %s has cells %s; "
                "placing it by the no-affinity rule",
                inst.uuid,
                list(inst.numa_cells),
                self.node,
                sorted(ledger.uuids),
            )
            cells = []
        split = guest_cell_split(inst, ledger.uuids) if cells else None
        if split is None:
            split = even_split(inst, cells or [ledger.best_cell(main_cpu_class(inst))])
        self.on_cells(inst, split, res)

    # -- disk and devices -----------------------------------------------------------

    def disk(self, inst: Instance, res: Planned) -> None:
        """DISK_GB on the compute node, or on the sharing provider with shared storage.

        With shared storage, an instance booted from volume still has its
        ephemeral and swap disks under ``instances_path``, which is on the
        shared storage: they go to the sharing provider too
        (docs/tree-shape.md, "Shared storage and boot from volume").
        """
        disk = disk_gb(inst)
        if not disk:
            return
        if not self.host.shared_storage:
            res[self.root_uuid]["DISK_GB"] += disk
        elif self.sharing:
            res[self.sharing]["DISK_GB"] += disk
        else:
            LOG.warning(
                "instance %s: %d GiB of disk on shared storage not allocated: no sharing "
                "provider is associated with compute node %s by aggregate",
                inst.uuid,
                disk,
                self.node,
            )

    def device_provider(self, address: str) -> str:
        """Name of the provider of a VF (its PF's) or of a whole device; "" when neither."""
        if address in self.pf_of_vf:
            pf = self.pfs[self.pf_of_vf[address]]
            return pf_provider_name(self.node, pf, self.policy)
        if address in self.whole:
            return whole_device_provider_name(self.node, address, self.policy)
        return ""

    def pci(self, inst: Instance, res: Planned) -> None:
        """One unit per VF or whole PCI device, on the provider that offers it."""
        for address in inst.pci_devices:
            if address in self.unplaced:
                continue
            # A device's provider holds one class: SRIOV_NET_VF, its
            # CUSTOM_PCI_* / resource_class, or nova's PCI-in-placement class.
            provider = self.device_provider(address)
            inv = self.tree.data(provider).inventory if self.tree.exists(provider) else {}
            rc = next(iter(inv), "")
            if not rc or not self.tree.exists(provider):
                LOG.warning(
                    "instance %s: PCI device %s is not a device this node reports; "
                    "no allocation for it",
                    inst.uuid,
                    address,
                )
                continue
            res[self.tree.data(provider).uuid][rc] += 1

    def mdevs(self, inst: Instance, res: Planned) -> None:
        """One unit of the GPU provider's class (VGPU, or the type's mdev_class) per mdev."""
        for mdev in inst.mdevs:
            gpu = self.gpu_of_mdev.get(mdev)
            provider = device_provider_name(self.node, gpu) if gpu else ""
            if not gpu or not self.tree.exists(provider):
                LOG.warning(
                    "instance %s: mdev %s is not on a GPU this node reports as VGPU; "
                    "no allocation for it",
                    inst.uuid,
                    mdev,
                )
                continue
            # VGPU, or the [mdev_$(TYPE)] mdev_class of the GPU's type.
            rc = next(iter(self.tree.data(provider).inventory), "VGPU")
            res[self.tree.data(provider).uuid][rc] += 1


def _new_planned() -> Planned:
    return defaultdict(lambda: defaultdict(int))


def plan_allocations(
    instances: Iterable[Instance],
    host: HostResources,
    tree: ProviderTree,
    policy: LayoutPolicy,
    sharing_provider_uuid: str | None = None,
    held: Mapping[str, ByProvider] | None = None,
) -> dict[str, ConsumerAllocations]:
    """The allocation every instance of a node should hold, keyed by consumer UUID.

    Args:
        instances: the node's instances (``ComputeDriver.list_instances``).
        host: the node's hardware (to find which GPU holds an mdev, which PF a VF).
        tree: the provider tree after ``update_provider_tree`` (for UUIDs).
        policy: the layout policy (is NUMA modelled).
        sharing_provider_uuid: the shared-storage provider to put DISK_GB
            on when ``host.shared_storage``; None when none is associated.
        held: ``{consumer: {provider: {rc: amount}}}`` that Placement holds
            on the node's CPU and memory providers (the allocation audit's
            read), so an instance that fits where it is stays there (module
            docstring, "sticky"); None plans every instance by the rule.

    Returns:
        ``{consumer_uuid: ConsumerAllocations}`` (no consumer generation). An
        instance that uses nothing gets no entry.

    Raises:
        ProviderNotFound: the compute node is not in ``tree``.
    """
    planner = _Planner(host, tree, policy, sharing_provider_uuid, held or {})
    listed = list(instances)
    planned: dict[str, Planned] = {i.uuid: _new_planned() for i in listed}
    planner.cpu_memory(listed, planned)
    out: dict[str, ConsumerAllocations] = {}
    for inst in listed:
        res = planned[inst.uuid]
        planner.disk(inst, res)
        planner.pci(inst, res)
        planner.mdevs(inst, res)
        encrypted = plan_mem_encryption(inst, tree, host.nodename)
        if encrypted is not None:
            res[encrypted][MEM_ENCRYPTION_CONTEXT] += 1
        if res:
            out[inst.uuid] = _allocation(inst, res)
    return dict(sorted(out.items()))


def _allocation(inst: Instance, res: Planned) -> ConsumerAllocations:
    """The instance's planned amounts as its allocation, providers and classes sorted."""
    return ConsumerAllocations(
        allocations={rp: dict(sorted(a.items())) for rp, a in sorted(res.items())},
        project_id=inst.project_id,
        user_id=inst.user_id,
        consumer_type=INSTANCE,
    )
