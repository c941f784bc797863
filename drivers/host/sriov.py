"""SR-IOV physical functions offered as SRIOV_NET_VF.

A PF is a function with ``sriov_totalvfs`` > 0 (kernel sysfs-bus-pci ABI).
It is offered when a device spec matches the PF itself or one of its VFs
(nova matches VFs by their own ids and address, and by the PF's interface for
``devname``). The matching spec gives the physnet (trait
``CUSTOM_PHYSNET_{NAME}``) and extra traits. VFs are counted here only,
never as whole PCI devices.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import os_traits

from drivers.host.device_spec import DeviceSpec, first_match
from drivers.host.pci import PciFunction
from drivers.records import SriovPF

LOG = logging.getLogger(__name__)


def pf_spec(
    pf: PciFunction, functions: Mapping[str, PciFunction], specs: Sequence[DeviceSpec]
) -> DeviceSpec | None:
    """The spec offering ``pf``: the first matching the PF, else the first matching a VF."""
    spec = first_match(specs, pf)
    if spec is not None:
        return spec
    for vf_address in pf.vf_addresses:
        vf = functions.get(vf_address)
        if vf is not None and (spec := first_match(specs, vf, pf.netdevs)) is not None:
            return spec
    return None


def discover_sriov(
    functions: Mapping[str, PciFunction],
    specs: Sequence[DeviceSpec],
    exclude: frozenset[str] = frozenset(),
) -> tuple[SriovPF, ...]:
    """The SR-IOV PFs to offer, by address.

    Args:
        functions: every PCI function (:func:`drivers.host.pci.read_pci_functions`).
        specs: parsed ``[pci] device_spec``.
        exclude: PF addresses offered otherwise (vGPU-capable GPUs).

    Returns:
        :class:`SriovPF` records; traits are ``HW_NIC_SRIOV`` (and
        ``HW_NIC_SRIOV_TRUSTED`` for a ``trusted`` spec) plus the spec's.
        A PF with no VF configured is still returned (``num_vfs`` 0): the
        layout then leaves it out of the tree.
    """
    out = []
    for pf in sorted(functions.values(), key=lambda f: f.address):
        if pf.is_vf or not pf.total_vfs or pf.address in exclude:
            continue
        spec = pf_spec(pf, functions, specs)
        if spec is None:
            continue
        if spec.one_time_use:
            # nova's pci_placement_translator refuses it on a VF (only type-PCI and
            # type-PF devices qualify): one bad spec costs a warning, not the host.
            LOG.warning(
                "[pci] device_spec %s: one_time_use is for whole devices only (nova: "
                "type-PCI and type-PF); the VFs of PF %s are offered without it",
                spec.text,
                pf.address,
            )
        traits = {os_traits.HW_NIC_SRIOV, *spec.traits}
        if spec.trusted:
            traits.add(os_traits.HW_NIC_SRIOV_TRUSTED)
        vf = functions.get(pf.vf_addresses[0]) if pf.vf_addresses else None
        out.append(
            SriovPF(
                address=pf.address,
                total_vfs=pf.total_vfs,
                vf_addresses=pf.vf_addresses,
                numa_node=pf.numa_node,
                physnet=spec.physical_network,
                netdev=pf.netdevs[0] if pf.netdevs else None,
                traits=frozenset(traits),
                vf_vendor_id=vf.vendor_id if vf is not None else "",
                vf_product_id=vf.product_id if vf is not None else "",
                resource_class=spec.resource_class,
                spec_traits=frozenset(spec.traits),
                remote_managed=spec.remote_managed,
                live_migratable=spec.live_migratable,
            )
        )
    return tuple(out)
