"""Turn a driver's :class:`HostResources` into resource providers.

This is the one place that knows the tree's shape (DESIGN.md, "Tree shape"):

============================  ==============================  ==========================
provider                      name                            inventory
============================  ==============================  ==========================
compute node (root)           ``{nodename}``                  VCPU, PCPU, MEMORY_MB, DISK_GB
NUMA cell (when modelled)     ``{nodename}_NUMA{N}``          VCPU, PCPU, MEMORY_MB of the cell
physical GPU                  ``{nodename}_pci_{dddd_bb_ss_f}``  VGPU
SR-IOV PF                     ``{nodename}_pci_{dddd_bb_ss_f}``  SRIOV_NET_VF
whole PCI device              ``{nodename}_pci_{dddd_bb_ss_f}``  CUSTOM_PCI_{VENDOR}_{PRODUCT}
============================  ==============================  ==========================

Inventory rules follow compute-node-inventory.rst: ``max_unit = total``,
VCPU/MEMORY_MB/DISK_GB carry their allocation ratio, DISK_GB is not reported
on the compute node when instance disks are on shared storage (4b).

Reserved amounts with NUMA modelled: ``reserved_host_cpus`` and
``reserved_host_memory_mb`` are taken from the lowest-numbered cells first
(cell 0 until it is exhausted, then cell 1, ...), because the host's own
processes start there.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import os_traits
from oslo_config import cfg

from agent.conf import config as agent_config
from agent.model import ownership
from agent.model.exceptions import ConfigError
from agent.model.names import resource_class_name, trait_name
from agent.model.provider_tree import ProviderTree
from agent.model.resources import Inventory
from agent.shape.node_traits import cell_cpu_traits, is_capability_trait, is_managed_root_trait
from drivers.records import (
    Gpu,
    HostResources,
    MdevType,
    SriovPF,
    normalize_pci_address,
    pci_address_slug,
)

LOG = logging.getLogger(__name__)

OWNER_TRAIT = ownership.DEFAULT_OWNER_TRAIT
"""The default owner trait (``[compute] owner_trait``), carried by every provider laid out.

Which children are the agent's is decided in :mod:`agent.model.ownership` alone."""


@dataclass(frozen=True, slots=True)
class LayoutPolicy:
    """The configuration that shapes the tree (from :func:`policy_from_conf`).

    Attributes:
        cpu_allocation_ratio: VCPU ratio, or None to keep Placement's / use initial.
        ram_allocation_ratio: MEMORY_MB ratio, or None.
        disk_allocation_ratio: DISK_GB ratio, or None.
        initial_cpu_allocation_ratio: VCPU ratio of a new inventory.
        initial_ram_allocation_ratio: MEMORY_MB ratio of a new inventory.
        initial_disk_allocation_ratio: DISK_GB ratio of a new inventory.
        reserved_host_cpus: VCPUs kept back (count).
        reserved_host_memory_mb: MiB kept back.
        reserved_host_disk_mb: MiB kept back (reported in whole GiB, rounded up).
        model_numa: NUMA cells become child providers.
        enabled_mdev_types: mdev types offered as VGPU, in preference order.
        resource_class_renames: ``(OLD, NEW)`` pairs: NEW is reported wherever
            OLD would be (``[compute] resource_class_renames``; docs/reshape.md).
        mdev_addresses: ``(type, (GPU address, ...))`` from ``[mdev_$(TYPE)]
            device_addresses``: those GPUs offer that type only (nova).
        mdev_classes: ``(type, class)`` from ``[mdev_$(TYPE)] mdev_class``.
        mdev_max_instances: ``(type, limit)`` from ``[mdev_$(TYPE)] max_instances``.
        owner_trait: ``[compute] owner_trait``, on every provider laid out.
        pci_in_placement: ``[pci] report_in_placement``: whole devices and
            VFs without a physnet get nova's PCI-in-placement providers.
    """

    cpu_allocation_ratio: float | None = None
    ram_allocation_ratio: float | None = None
    disk_allocation_ratio: float | None = None
    initial_cpu_allocation_ratio: float = 4.0
    initial_ram_allocation_ratio: float = 1.0
    initial_disk_allocation_ratio: float = 1.0
    reserved_host_cpus: int = 0
    reserved_host_memory_mb: int = 512
    reserved_host_disk_mb: int = 0
    model_numa: bool = False
    enabled_mdev_types: tuple[str, ...] = field(default_factory=tuple)
    resource_class_renames: tuple[tuple[str, str], ...] = ()
    mdev_addresses: tuple[tuple[str, tuple[str, ...]], ...] = ()
    mdev_classes: tuple[tuple[str, str], ...] = ()
    mdev_max_instances: tuple[tuple[str, int], ...] = ()
    owner_trait: str = ownership.DEFAULT_OWNER_TRAIT
    pci_in_placement: bool = False


def policy_from_conf(conf: cfg.ConfigOpts) -> LayoutPolicy:
    """Read the :class:`LayoutPolicy` from a loaded configuration."""
    return LayoutPolicy(
        cpu_allocation_ratio=agent_config.allocation_ratio(conf, "cpu"),
        ram_allocation_ratio=agent_config.allocation_ratio(conf, "ram"),
        disk_allocation_ratio=agent_config.allocation_ratio(conf, "disk"),
        initial_cpu_allocation_ratio=agent_config.initial_allocation_ratio(conf, "cpu"),
        initial_ram_allocation_ratio=agent_config.initial_allocation_ratio(conf, "ram"),
        initial_disk_allocation_ratio=agent_config.initial_allocation_ratio(conf, "disk"),
        reserved_host_cpus=conf.reserved_host_cpus,
        reserved_host_memory_mb=conf.reserved_host_memory_mb,
        reserved_host_disk_mb=conf.reserved_host_disk_mb,
        model_numa=conf.numa.model_in_placement,
        enabled_mdev_types=tuple(conf.devices.enabled_mdev_types),
        resource_class_renames=tuple(agent_config.resource_class_renames(conf).items()),
        mdev_addresses=agent_config.mdev_addresses(conf),
        mdev_classes=agent_config.mdev_classes(conf),
        mdev_max_instances=tuple(
            (t, conf[f"mdev_{t}"].max_instances)
            for t in conf.devices.enabled_mdev_types
            if conf[f"mdev_{t}"].max_instances
        ),
        owner_trait=agent_config.owner_trait(conf),
        pci_in_placement=conf.pci.report_in_placement,
    )


def numa_provider_name(nodename: str, cell_id: int) -> str:
    """``{nodename}_NUMA{N}``."""
    return f"{nodename}_NUMA{cell_id}"


def device_provider_name(nodename: str, address: str) -> str:
    """``{nodename}_pci_{dddd_bb_ss_f}`` for a GPU, PF or whole PCI device."""
    return f"{nodename}_pci_{pci_address_slug(address)}"


def pci_placement_provider_name(nodename: str, address: str) -> str:
    """``{nodename}_{PCI ADDRESS}``, e.g. ``cn1_0000:AF:00.0``: nova's PCI-in-placement name.

    Source: nova/compute/pci_placement_translator.py
    ``PlacementView._get_rp_name_for_address`` (``f"{root}_{addr.upper()}"``).
    """
    return f"{nodename}_{normalize_pci_address(address).upper()}"


def uses_pci_placement(pf: SriovPF, policy: LayoutPolicy) -> bool:
    """True when ``pf``'s VFs get nova's PCI-in-placement provider (no physnet).

    nova/compute/pci_placement_translator.py ``PlacementView._add_dev``: a
    device whose spec has a ``physical_network`` is left to neutron's SR-IOV
    ports, which ask for ``SRIOV_NET_VF``.
    """
    return policy.pci_in_placement and not pf.physnet


def pf_provider_name(nodename: str, pf: SriovPF, policy: LayoutPolicy) -> str:
    """The provider holding ``pf``'s VFs (PCI-in-placement name, or ``{nodename}_pci_...``)."""
    if uses_pci_placement(pf, policy):
        return pci_placement_provider_name(nodename, pf.address)
    return device_provider_name(nodename, pf.address)


def whole_device_provider_name(nodename: str, address: str, policy: LayoutPolicy) -> str:
    """The provider of a whole device (PCI-in-placement name, or ``{nodename}_pci_...``)."""
    if policy.pci_in_placement:
        return pci_placement_provider_name(nodename, address)
    return device_provider_name(nodename, address)


def _gpu_specs(
    host: HostResources, policy: LayoutPolicy, parent_of: Callable[[int | None], str]
) -> list[ProviderSpec]:
    """One provider per GPU offering a type: total = its mdevs of the type + available.

    ``[mdev_$(TYPE)] max_instances`` (nova/virt/libvirt/driver.py
    ``_get_gpu_inventories``): every GPU's existing mdevs of a type count
    first; then, GPU by GPU in address order, the instances it could still
    create are offered only while the type's total stays within the limit (a
    GPU that would pass it offers its existing mdevs only; nova reports 0
    there, which would strand the instances holding them).
    """
    chosen = [(gpu, *gpu_mdev_type(gpu, policy)) for gpu in host.gpus]
    chosen = [(g, t, rc) for g, t, rc in chosen if t is not None]
    existing = {g.address: sum(1 for m in g.mdevs if m.type_id == t.id) for g, t, _ in chosen}
    used: dict[str, int] = {}
    for gpu, mtype, _ in chosen:
        used[mtype.id] = used.get(mtype.id, 0) + existing[gpu.address]
    limits = dict(policy.mdev_max_instances)
    specs = []
    for gpu, mtype, rc in sorted(chosen, key=lambda c: c[0].address):
        total = existing[gpu.address]
        limit = limits.get(mtype.id)
        if limit is None or used[mtype.id] + mtype.available_instances <= limit:
            total += mtype.available_instances
            used[mtype.id] += mtype.available_instances
        if total:
            name = device_provider_name(host.nodename, gpu.address)
            inv = {rc: _inv(rc, total)}
            specs.append(
                ProviderSpec(name, parent_of(gpu.numa_node), inv, {mdev_type_trait(mtype.id)})
            )
    return specs


def _pf_spec(node: str, pf: SriovPF, policy: LayoutPolicy, parent: str) -> ProviderSpec:
    """The provider of ``pf``'s configured VFs.

    With a physnet, or without ``[pci] report_in_placement``: ``SRIOV_NET_VF``
    under ``parent`` (its NUMA cell when modelled), traits ``HW_NIC_*``,
    ``CUSTOM_PHYSNET_*`` and the spec's. Else nova's PCI-in-placement shape
    (pci_placement_translator.py ``PciResourceProvider.add_child``): under the
    compute node, class the spec's ``resource_class`` or
    ``CUSTOM_PCI_{VF VENDOR}_{VF PRODUCT}``, traits
    ``COMPUTE_MANAGED_PCI_DEVICE`` and the spec's.
    """
    if uses_pci_placement(pf, policy):
        vendor, product = pf.vf_vendor_id or "0000", pf.vf_product_id or "0000"
        rc = pci_resource_class(vendor, product, pf.resource_class)
        traits = {trait_name(t) for t in pf.spec_traits} | {os_traits.COMPUTE_MANAGED_PCI_DEVICE}
        name = pci_placement_provider_name(node, pf.address)
        return ProviderSpec(name, node, {rc: _inv(rc, pf.num_vfs)}, traits)
    traits = {trait_name(t) for t in pf.traits}
    if pf.physnet:
        traits.add(physnet_trait(pf.physnet))
    inv = {"SRIOV_NET_VF": _inv("SRIOV_NET_VF", pf.num_vfs)}
    return ProviderSpec(device_provider_name(node, pf.address), parent, inv, traits)


def pci_resource_class(vendor_id: str, product_id: str, override: str | None = None) -> str:
    """``override`` (normalised) or ``CUSTOM_PCI_{VENDOR}_{PRODUCT}`` (nova's default)."""
    if override:
        return resource_class_name(override)
    return f"CUSTOM_PCI_{vendor_id.upper()}_{product_id.upper()}"


def physnet_trait(physnet: str) -> str:
    """``CUSTOM_PHYSNET_{NAME}`` for a physical network (``physnet-1`` -> ``..._PHYSNET_1``)."""
    return "CUSTOM_PHYSNET_" + trait_name(physnet).removeprefix("CUSTOM_")


def mdev_type_trait(type_id: str) -> str:
    """The ``CUSTOM_`` trait that names an mdev type, e.g. ``CUSTOM_NVIDIA_35``."""
    return trait_name(type_id)


def pinned_mdev_type(gpu: Gpu, policy: LayoutPolicy) -> str | None:
    """The type ``[mdev_$(TYPE)] device_addresses`` gives ``gpu``, or None when not listed."""
    for type_id, addresses in policy.mdev_addresses:
        if gpu.address in {normalize_pci_address(a) for a in addresses}:
            return type_id
    return None


def gpu_mdev_type(gpu: Gpu, policy: LayoutPolicy) -> tuple[MdevType | None, str]:
    """``(the mdev type gpu offers, its resource class)``.

    Rules: a GPU listed in a type's ``device_addresses`` offers that type
    only, with that type's ``mdev_class`` (nova/virt/libvirt/driver.py
    ``_get_supported_vgpu_types``, ``_get_vgpu_type_per_pgpu``,
    ``_get_resource_class_for_device``); any other GPU offers, among the
    types not pinned to addresses, the type of its existing mdevs, else the
    first it supports (:func:`gpu_vgpu_type`), as VGPU (nova's default class).
    """
    pinned = pinned_mdev_type(gpu, policy)
    if pinned is not None:
        return gpu.mdev_types.get(pinned), dict(policy.mdev_classes).get(pinned, "VGPU")
    listed = {t for t, addresses in policy.mdev_addresses if addresses}
    free = [t for t in policy.enabled_mdev_types if t not in listed]
    return gpu_vgpu_type(gpu, free), "VGPU"


def gpu_vgpu_type(gpu: Gpu, enabled: Iterable[str]) -> MdevType | None:
    """The mdev type a GPU offers: that of its existing mdevs, else the first enabled it supports.

    Returns None when no enabled type fits (the GPU is then not reported).
    """
    enabled = tuple(enabled)
    for mdev in gpu.mdevs:
        if mdev.type_id in gpu.mdev_types and mdev.type_id in enabled:
            return gpu.mdev_types[mdev.type_id]
    for type_id in enabled:
        if type_id in gpu.mdev_types:
            return gpu.mdev_types[type_id]
    return None


@dataclass(slots=True)
class ProviderSpec:
    """One provider the host should have: what :func:`apply_layout` writes into the tree.

    Attributes:
        name: provider name.
        parent: parent provider name; None for the compute node.
        inventory: resource class -> Inventory.
        traits: traits the agent sets.
    """

    name: str
    parent: str | None
    inventory: dict[str, Inventory]
    traits: set[str]


class _Ratios:
    """Picks the allocation ratio per class: configured, else Placement's, else initial."""

    def __init__(self, tree: ProviderTree, policy: LayoutPolicy) -> None:
        self._tree = tree
        self._policy = policy

    def __call__(self, provider: str, rc: str) -> float:
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


def _inv(rc: str, total: int, reserved: int = 0, ratio: float = 1.0) -> Inventory:
    return Inventory(
        total=total, reserved=reserved, max_unit=total, allocation_ratio=ratio, resource_class=rc
    )


def _check_reserved(option: str, rc: str, reserved: int, total: int) -> None:
    if reserved > total:
        raise ConfigError(
            f"[DEFAULT] {option} = {reserved} is more than the host's {rc} total of {total}; "
            f"lower {option}"
        )


def desired_providers(
    host: HostResources, policy: LayoutPolicy, tree: ProviderTree | None = None
) -> list[ProviderSpec]:
    """The providers ``host`` should have under ``policy``, parents first.

    Args:
        host: what the driver found.
        policy: the configuration that shapes the tree.
        tree: the current tree, read only to keep Placement's allocation
            ratios when no ratio is configured (nova's rule).

    Returns:
        A list of :class:`ProviderSpec`, the compute node first.

    Raises:
        ConfigError: a ``reserved_host_*`` option exceeds what the host has.
    """
    ratio = _Ratios(tree or ProviderTree(), policy)
    node = host.nodename
    root = ProviderSpec(node, None, {}, set(host.traits))
    specs = [root]
    reserved_cpus = policy.reserved_host_cpus
    reserved_mem = policy.reserved_host_memory_mb
    numa = policy.model_numa and bool(host.numa_cells)

    if numa:
        cells = sorted(host.numa_cells, key=lambda c: c.id)
        _check_reserved("reserved_host_cpus", "VCPU", reserved_cpus, sum(c.vcpus for c in cells))
        _check_reserved(
            "reserved_host_memory_mb", "MEMORY_MB", reserved_mem, sum(c.memory_mb for c in cells)
        )
        cpu_res = _split_reserved(reserved_cpus, [c.vcpus for c in cells])
        mem_res = _split_reserved(reserved_mem, [c.memory_mb for c in cells])
        for cell, r_cpu, r_mem in zip(cells, cpu_res, mem_res, strict=True):
            name = numa_provider_name(node, cell.id)
            inv: dict[str, Inventory] = {}
            if cell.vcpus:
                inv["VCPU"] = _inv("VCPU", cell.vcpus, r_cpu, ratio(name, "VCPU"))
            if cell.pcpus:
                inv["PCPU"] = _inv("PCPU", cell.pcpus)
            if cell.memory_mb:
                inv["MEMORY_MB"] = _inv(
                    "MEMORY_MB", cell.memory_mb, r_mem, ratio(name, "MEMORY_MB")
                )
            traits = {os_traits.HW_NUMA_ROOT} | cell_cpu_traits(host.traits, cell)
            specs.append(ProviderSpec(name, node, inv, traits))
    else:
        if host.vcpus:
            _check_reserved("reserved_host_cpus", "VCPU", reserved_cpus, host.vcpus)
            root.inventory["VCPU"] = _inv("VCPU", host.vcpus, reserved_cpus, ratio(node, "VCPU"))
        if host.pcpus:
            root.inventory["PCPU"] = _inv("PCPU", host.pcpus)
        if host.memory_mb:
            _check_reserved("reserved_host_memory_mb", "MEMORY_MB", reserved_mem, host.memory_mb)
            root.inventory["MEMORY_MB"] = _inv(
                "MEMORY_MB", host.memory_mb, reserved_mem, ratio(node, "MEMORY_MB")
            )
    if host.disk_gb and not host.shared_storage:
        reserved_disk = math.ceil(policy.reserved_host_disk_mb / 1024)
        _check_reserved("reserved_host_disk_mb", "DISK_GB", reserved_disk, host.disk_gb)
        root.inventory["DISK_GB"] = _inv(
            "DISK_GB", host.disk_gb, reserved_disk, ratio(node, "DISK_GB")
        )

    cell_ids = {c.id for c in host.numa_cells}

    def parent_of(numa_node: int | None) -> str:
        if numa and numa_node is not None and numa_node in cell_ids:
            return numa_provider_name(node, numa_node)
        return node

    for pf in host.sriov_pfs:
        if pf.num_vfs:
            specs.append(_pf_spec(node, pf, policy, parent_of(pf.numa_node)))
    specs += _gpu_specs(host, policy, parent_of)
    for dev in host.pci_devices:
        rc = pci_resource_class(dev.vendor_id, dev.product_id, dev.resource_class)
        traits = {trait_name(t) for t in dev.traits}
        if policy.pci_in_placement:
            name, parent = pci_placement_provider_name(node, dev.address), node
            traits.add(os_traits.COMPUTE_MANAGED_PCI_DEVICE)
        else:
            name, parent = device_provider_name(node, dev.address), parent_of(dev.numa_node)
        specs.append(ProviderSpec(name, parent, {rc: _inv(rc, 1)}, traits))
    if policy.resource_class_renames:
        _rename_classes(specs, dict(policy.resource_class_renames))
    return specs


def _rename_classes(specs: list[ProviderSpec], renames: dict[str, str]) -> None:
    """Report NEW wherever OLD would be reported (``[compute] resource_class_renames``).

    Raises:
        ConfigError: a provider would report both OLD and NEW (the two would merge).
    """
    for spec in specs:
        for old in [rc for rc in spec.inventory if rc in renames]:
            new = renames[old]
            if new in spec.inventory:
                raise ConfigError(
                    f"[compute] resource_class_renames: provider {spec.name} already reports "
                    f"{new}, so {old} cannot be renamed to it; choose another NEW name"
                )
            spec.inventory[new] = spec.inventory.pop(old)


def apply_layout(tree: ProviderTree, host: HostResources, policy: LayoutPolicy) -> None:
    """Edit ``tree`` in place so the compute node ``host.nodename`` has the desired shape.

    The compute node must already be in the tree (its caller chose its UUID).
    Children are created and updated, and those the host no longer has, or
    whose parent changed, are removed (a moved one is created again under its
    new parent with the same UUID). Every provider laid out carries
    the owner trait (``policy.owner_trait``); the compute node also carries
    ``COMPUTE_NODE`` (nova's ``ResourceTracker._get_traits``).
    Ownership (:mod:`agent.model.ownership`): a child provider that is not the
    agent's (no owner trait, and not one to take over) was made by
    someone else (a network agent's bandwidth provider, an operator): it is
    never changed or removed, nor is any provider above it; a provider the
    layout wants under a name such a child holds is not reported, and a
    warning says so once per process.
    Operator-set traits on the compute node outside
    :func:`agent.shape.node_traits.is_managed_root_trait` are kept; aggregates are never touched.

    Raises:
        ProviderNotFound: the compute node is not in the tree.
        ConfigError: a reserved amount exceeds the host's total.
    """
    specs = desired_providers(host, policy, tree)
    node = host.nodename
    owner = policy.owner_trait
    root_uuid = tree.data(node).uuid
    _log_adoption(tree, node, owner)
    foreign = ownership.foreign(tree, node, owner)
    protected = set(foreign)
    for uuid in foreign:
        parent = tree.data(uuid).parent_uuid
        while parent is not None:
            protected.add(parent)
            parent = tree.data(parent).parent_uuid
    for uuid in foreign:
        _warn_foreign(tree.data(uuid).name, uuid, node, owner)
    moved = _remove_unwanted(tree, root_uuid, protected, {s.name: s for s in specs})
    for spec in specs:
        if spec.parent is not None:
            if tree.exists(spec.name) and tree.data(spec.name).uuid in foreign:
                continue
            if not tree.exists(spec.parent) or tree.data(spec.parent).uuid in foreign:
                continue
            if not tree.exists(spec.name):
                tree.new_child(spec.name, spec.parent, uuid=moved.get(spec.name))
        tree.update_inventory(spec.name, spec.inventory)
        tree.update_traits(spec.name, _traits(tree, spec, owner))


def _remove_unwanted(
    tree: ProviderTree, root_uuid: str, protected: set[str], wanted: dict[str, ProviderSpec]
) -> dict[str, str]:
    """Remove the children the layout does not want where they are; return the moved ones.

    Returns:
        ``{name: UUID}`` of the providers wanted under another parent: they are
        created again under it with the same UUID (a UUID nova chose at random
        included), so Placement sees a re-parented provider, not a new one
        beside the old name.
    """
    moved: dict[str, str] = {}
    # Deepest first, so a subtree is never visited after its parent went.
    for uuid in reversed(tree.get_provider_uuids(root_uuid)[1:]):
        if not tree.exists(uuid) or uuid in protected:
            continue
        p = tree.data(uuid)
        spec = wanted.get(p.name)
        parent_name = tree.data(p.parent_uuid).name if p.parent_uuid else None
        if spec is None or spec.parent != parent_name:
            if spec is not None:
                moved[p.name] = uuid
            tree.remove(uuid)
    return moved


def _traits(tree: ProviderTree, spec: ProviderSpec, owner: str) -> set[str]:
    """What ``spec``'s provider carries: a child, its traits and the owner trait; the
    compute node also ``COMPUTE_NODE`` and every trait the agent does not decide."""
    if spec.parent is not None:
        return spec.traits | {owner}
    capabilities = any(is_capability_trait(t) for t in spec.traits)
    kept = {
        t for t in tree.data(spec.name).traits if not is_managed_root_trait(t, owner, capabilities)
    }
    return kept | spec.traits | {os_traits.COMPUTE_NODE, owner}


_warned_foreign: set[str] = set()
_logged_adoption: set[str] = set()


def _log_adoption(tree: ProviderTree, node: str, owner: str) -> None:
    """Log once per provider what this write takes over (nova's, or an earlier agent's)."""
    for name, uuid, reason in ownership.to_adopt(tree, node, owner):
        if uuid in _logged_adoption:
            continue
        _logged_adoption.add(uuid)
        LOG.warning(
            "compute node %s: taking over provider %s (%s): %s; it gets trait %s and its "
            "allocations are kept",
            node,
            name,
            uuid,
            reason,
            owner,
        )


def _warn_foreign(name: str, uuid: str, node: str, owner: str) -> None:
    if uuid in _warned_foreign:
        return
    _warned_foreign.add(uuid)
    LOG.warning(
        "provider %s (%s) in the tree of compute node %s lacks trait %s: it belongs to "
        "another service or an operator and is left unchanged. If it is this agent's, add "
        "the trait to it (openstack resource provider trait set ...)",
        name,
        uuid,
        node,
        owner,
    )
