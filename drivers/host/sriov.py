"""SR-IOV physical functions offered as SRIOV_NET_VF.

A PF is a function with ``sriov_totalvfs`` > 0 (kernel sysfs-bus-pci ABI).
Its VFs are offered when a device spec matches one of them, as nova matches
each VF (``nova/pci/devspec.py`` ``PciDeviceSpec.match``: by the VF's own ids
and address, by the PF's address when the spec names that one PF, by the PF's
interface for ``devname``). A spec that matches the PF itself and none of its
VFs offers the PF as one whole device (:mod:`drivers.host.passthrough`), as
nova's type-PF device. The matching spec gives the physnet (trait
``CUSTOM_PHYSNET_{NAME}``) and extra traits. VFs are counted here only,
never as whole PCI devices.

A ``remote_managed`` spec matches a VF only when the VF's VPD, or its PF's,
has a card serial number (nova/pci/devspec.py, nova/virt/libvirt/host.py
``_get_vpd_details``); a VF it would match but for that is warned about.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import os_traits

from drivers.host.device_spec import DeviceSpec, first_match
from drivers.host.pci import PciFunction
from drivers.records import SriovPF

LOG = logging.getLogger(__name__)


def vf_spec(
    pf: PciFunction, functions: Mapping[str, PciFunction], specs: Sequence[DeviceSpec]
) -> DeviceSpec | None:
    """The spec offering ``pf``'s VFs: the first one matching one of its VFs, or None."""
    for vf_address in pf.vf_addresses:
        vf = functions.get(vf_address)
        if vf is None:
            continue
        spec = first_match(specs, vf, pf.netdevs, pf.vpd_serial)
        if spec is not None:
            return spec
    return None


def warn_unserialed(
    pf: PciFunction, functions: Mapping[str, PciFunction], specs: Sequence[DeviceSpec]
) -> None:
    """Warn about ``pf``'s VFs a ``remote_managed`` spec leaves out for want of a serial."""
    for vf_address in pf.vf_addresses:
        vf = functions.get(vf_address)
        if vf is None:
            continue
        for spec in specs:
            if spec.wants_serial(vf, pf.netdevs, pf.vpd_serial):
                LOG.warning(
                    "[pci] device_spec %s: VFs of PF %s (%s...) are not offered for it: "
                    "remote_managed needs a card serial number in the VF's or the PF's PCI "
                    "VPD, and neither has one (nova drops them: nova/pci/devspec.py); "
                    "update the card's firmware or drop the tag",
                    spec.text,
                    pf.address,
                    vf.address,
                )
                return


def warn_dependent(pf: PciFunction, vfs: DeviceSpec, specs: Sequence[DeviceSpec]) -> None:
    """Warn when a spec names ``pf`` itself too while its VFs are offered for Placement.

    nova's PCI-in-placement translator refuses a PF and its VFs both
    (``PciResourceProvider.add_parent`` / ``add_child``:
    ``PlacementPciDependentDeviceException``), so nova-compute's resource updates fail;
    devices with a ``physical_network`` are neutron's and out of it (``_add_dev``).
    """
    own = first_match(specs, pf)
    if own is None or own.physical_network or vfs.physical_network:
        return
    LOG.warning(
        "[pci] device_spec %s matches PF %s itself and %s its VFs: with [pci] "
        "report_in_placement nova refuses a PF and its VFs both "
        "(PlacementPciDependentDeviceException, nova-compute's resource updates fail); "
        "the agent offers the VFs; make the specs name one or the other",
        own.text,
        pf.address,
        vfs.text,
    )


def _warn_vf_spec(
    pf: PciFunction, spec: DeviceSpec, specs: Sequence[DeviceSpec], pci_in_placement: bool
) -> None:
    """What nova refuses of the spec offering ``pf``'s VFs costs a warning, not the host."""
    if pci_in_placement:
        warn_dependent(pf, spec, specs)
    if spec.one_time_use:
        # nova's pci_placement_translator refuses it on a VF (only type-PCI and
        # type-PF devices qualify).
        LOG.warning(
            "[pci] device_spec %s: one_time_use is for whole devices only (nova: "
            "type-PCI and type-PF); the VFs of PF %s are offered without it",
            spec.text,
            pf.address,
        )


def discover_sriov(
    functions: Mapping[str, PciFunction],
    specs: Sequence[DeviceSpec],
    exclude: frozenset[str] = frozenset(),
    pci_in_placement: bool = False,
) -> tuple[SriovPF, ...]:
    """The SR-IOV PFs to offer, by address.

    Args:
        functions: every PCI function (:func:`drivers.host.pci.read_pci_functions`).
        specs: parsed ``[pci] device_spec``.
        exclude: PF addresses offered otherwise (vGPU-capable GPUs).
        pci_in_placement: ``[pci] report_in_placement`` (:func:`warn_dependent`).

    Returns:
        :class:`SriovPF` records; traits are ``HW_NIC_SRIOV`` (and
        ``HW_NIC_SRIOV_TRUSTED`` for a ``trusted`` spec) plus the spec's.
        Only PFs with a VF a spec matches: any other PF a spec matches is a whole
        device (:func:`drivers.host.passthrough.discover_passthrough`).
    """
    out = []
    for pf in sorted(functions.values(), key=lambda f: f.address):
        if pf.is_vf or not pf.total_vfs or pf.address in exclude:
            continue
        warn_unserialed(pf, functions, specs)
        spec = vf_spec(pf, functions, specs)
        if spec is None:
            continue
        _warn_vf_spec(pf, spec, specs, pci_in_placement)
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
