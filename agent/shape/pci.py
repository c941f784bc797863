"""PCI providers: SR-IOV PFs (their VFs) and whole PCI devices (passthrough).

Two shapes, as nova has them: ``{nodename}_pci_{dddd_bb_ss_f}`` providers
(SRIOV_NET_VF, or the device's class, under its NUMA cell when modelled),
or with ``[pci] report_in_placement`` nova's PCI-in-placement providers
``{nodename}_{PCI ADDRESS}`` under the compute node
(nova/compute/pci_placement_translator.py).
"""

from __future__ import annotations

import os_resource_classes
import os_traits

from agent.model.names import resource_class_name, trait_name
from agent.model.provider_tree import ProviderTree
from agent.shape.policy import LayoutPolicy
from agent.shape.provider_names import (
    device_provider_name,
    pci_placement_provider_name,
    uses_pci_placement,
)
from agent.shape.spec import ParentOf, ProviderSpec, inventory
from drivers.records import HostResources, PciDevice, SriovPF


def sriov_pf_specs(
    host: HostResources, policy: LayoutPolicy, parent_of: ParentOf
) -> list[ProviderSpec]:
    """One provider per SR-IOV PF with configured VFs (:func:`_pf_spec`)."""
    return [
        _pf_spec(host.nodename, pf, policy, parent_of(pf.numa_node))
        for pf in host.sriov_pfs
        if pf.num_vfs
    ]


def pci_device_specs(
    host: HostResources, policy: LayoutPolicy, parent_of: ParentOf, tree: ProviderTree
) -> list[ProviderSpec]:
    """One provider per whole PCI device: one unit of its class, the spec's traits.

    With ``[pci] report_in_placement``: nova's PCI-in-placement provider
    under the compute node (pci_placement_translator.py ``add_parent``; none for
    a device with a ``physical_network``, which nova leaves to neutron),
    with ``COMPUTE_MANAGED_PCI_DEVICE``, ``HW_PCI_LIVE_MIGRATABLE`` for a
    ``live_migratable`` device and ``HW_PCI_ONE_TIME_USE`` for a
    ``one_time_use`` one, whose reserved is :func:`one_time_use_reserved`.

    Args:
        tree: the tree as Placement holds it (a one-time-use device's reserved).
    """
    node = host.nodename
    specs = []
    for dev in host.pci_devices:
        if policy.pci_in_placement and dev.physnet:
            # Neutron's (a direct-physical port's): nova's translator leaves it out
            # (``PlacementView._add_dev``) and deletes a PCI provider it does not know.
            continue
        rc = pci_resource_class(dev.vendor_id, dev.product_id, dev.resource_class)
        traits = {nova_pci_trait(t) for t in dev.traits}
        reserved = 0
        if policy.pci_in_placement:
            name, parent = pci_placement_provider_name(node, dev.address), node
            traits.add(os_traits.COMPUTE_MANAGED_PCI_DEVICE)
            if dev.live_migratable:
                traits.add(os_traits.HW_PCI_LIVE_MIGRATABLE)
            if dev.one_time_use:
                traits.add(os_traits.HW_PCI_ONE_TIME_USE)
                reserved = one_time_use_reserved(dev, tree, name, rc)
        else:
            name, parent = device_provider_name(node, dev.address), parent_of(dev.numa_node)
        specs.append(ProviderSpec(name, parent, {rc: inventory(rc, 1, reserved)}, traits))
    return specs


def one_time_use_reserved(dev: PciDevice, tree: ProviderTree, name: str, rc: str) -> int:
    """A one-time-use device's reserved amount: all of it once used, else what Placement has.

    nova (pci_placement_translator.py ``_handle_one_time_use``): while an
    instance holds the device, reserved is set to the total (1); otherwise
    nova sends no reserved, so the one in Placement stays: the device stays
    reserved after its user is gone until an operator sets reserved to 0
    (``openstack resource provider inventory set``), which is kept too.

    Args:
        dev: the device (``in_use``: a domain holds it now).
        tree: the tree as Placement holds it.
        name: its provider's name.
        rc: its resource class.
    """
    if dev.in_use:
        return 1
    if tree.exists(name):
        held = tree.data(name).inventory.get(rc)
        if held is not None:
            return min(held.reserved, 1)
    return 0


def _pf_spec(node: str, pf: SriovPF, policy: LayoutPolicy, parent: str) -> ProviderSpec:
    """The provider of ``pf``'s configured VFs.

    With a physnet, or without ``[pci] report_in_placement``: ``SRIOV_NET_VF``
    under ``parent`` (its NUMA cell when modelled), traits ``HW_NIC_*``,
    ``CUSTOM_PHYSNET_*`` and the spec's. Else nova's PCI-in-placement shape
    (pci_placement_translator.py ``PciResourceProvider.add_child``): under the
    compute node, class the spec's ``resource_class`` or
    ``CUSTOM_PCI_{VF VENDOR}_{VF PRODUCT}``, traits
    ``COMPUTE_MANAGED_PCI_DEVICE`` (``HW_PCI_LIVE_MIGRATABLE`` for
    ``live_migratable`` VFs) and the spec's.
    """
    if uses_pci_placement(pf, policy):
        vendor, product = pf.vf_vendor_id or "0000", pf.vf_product_id or "0000"
        rc = pci_resource_class(vendor, product, pf.resource_class)
        traits = {nova_pci_trait(t) for t in pf.spec_traits}
        traits.add(os_traits.COMPUTE_MANAGED_PCI_DEVICE)
        if pf.live_migratable:
            traits.add(os_traits.HW_PCI_LIVE_MIGRATABLE)
        name = pci_placement_provider_name(node, pf.address)
        return ProviderSpec(name, node, {rc: inventory(rc, pf.num_vfs)}, traits)
    traits = {nova_pci_trait(t) for t in pf.traits}
    if pf.physnet:
        traits.add(physnet_trait(pf.physnet))
    inv = {"SRIOV_NET_VF": inventory("SRIOV_NET_VF", pf.num_vfs)}
    return ProviderSpec(device_provider_name(node, pf.address), parent, inv, traits)


def pci_resource_class(vendor_id: str, product_id: str, override: str | None = None) -> str:
    """``override`` as nova normalises it, or ``CUSTOM_PCI_{VENDOR}_{PRODUCT}`` (nova's default).

    nova/compute/pci_placement_translator.py ``_normalize_resource_class``: upper-cased;
    kept when standard (``vgpu`` is ``VGPU``) or custom (``custom_fpga`` is
    ``CUSTOM_FPGA``), else made custom. nova replaces a PCI provider's inventory at every
    claim, so the agent's class must be nova's. A custom name Placement would refuse is
    made legal (:func:`agent.model.names.resource_class_name`).
    """
    if override:
        rc = override.upper()
        if rc in os_resource_classes.STANDARDS:
            return rc
        return resource_class_name(rc)
    return f"CUSTOM_PCI_{vendor_id.upper()}_{product_id.upper()}"


def nova_pci_trait(name: str) -> str:
    """A ``[pci] device_spec`` trait as nova normalises it (``_normalize_traits``).

    A standard trait is kept as written; any other is upper-cased, kept when custom
    (``custom_gold`` is ``CUSTOM_GOLD``), else made custom (``gold`` is ``CUSTOM_GOLD``).
    nova replaces the whole trait set of the PCI providers it manages at every claim,
    so the agent's names must be nova's. A custom name Placement would refuse is made
    legal (:func:`agent.model.names.trait_name`).
    """
    if os_traits.check_traits([name])[0]:
        return name
    upper = name.upper()
    if upper.startswith("CUSTOM_"):
        return trait_name(upper)
    return os_traits.normalize_name(upper)


def physnet_trait(physnet: str) -> str:
    """``CUSTOM_PHYSNET_{NAME}`` for a physical network (``physnet-1`` -> ``..._PHYSNET_1``)."""
    return "CUSTOM_PHYSNET_" + trait_name(physnet).removeprefix("CUSTOM_")
