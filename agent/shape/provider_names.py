"""Names of the providers the layout makes (DESIGN.md, "Tree shape"; nova's where it has one)."""

from __future__ import annotations

from agent.shape.policy import LayoutPolicy
from drivers.records import SriovPF, normalize_pci_address, pci_address_slug


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


def mem_encryption_provider_name(nodename: str, model: str) -> str:
    """``{nodename}_{model}``, e.g. ``cn1_amd_sev``: nova's memory encryption child.

    Source: nova/virt/libvirt/driver.py ``_ensure_memory_encryption_providers``
    (``'%s_%s' % (nodename, me_id)``, the model with ``_`` for ``-``).
    """
    return f"{nodename}_{model}"
