"""Whole PCI devices offered for passthrough (PCI_DEVICE-like classes).

A function matched by ``[pci] device_spec`` is offered whole when it is
neither an SR-IOV VF (counted on its PF as SRIOV_NET_VF), nor an SR-IOV
capable PF whose VFs a spec matches (offered by :mod:`drivers.host.sriov`),
nor a GPU offered as vGPU. A PF a spec names itself, none of its VFs matched,
is one whole device: nova's libvirt driver reports it as a ``type-PF``
device (``nova/virt/libvirt/host.py`` ``_get_device_type``) and its PCI
placement translator gives it a provider of total 1 (``add_parent``).
Its class is the spec's ``resource_class``, else the layout's default
``CUSTOM_PCI_{VENDOR}_{PRODUCT}`` (nova's rule for ``[pci]
report_in_placement``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from drivers.host.device_spec import DeviceSpec, first_match
from drivers.host.pci import PciFunction, read_pci_functions
from drivers.host.sriov import vf_spec
from drivers.host.sysfs import Root
from drivers.records import PciDevice


def discover_passthrough(
    functions: Mapping[str, PciFunction],
    specs: Sequence[DeviceSpec],
    exclude: frozenset[str] = frozenset(),
) -> tuple[PciDevice, ...]:
    """The whole devices to offer, by address.

    Args:
        functions: every PCI function.
        specs: parsed ``[pci] device_spec``.
        exclude: addresses offered otherwise (vGPU-capable GPUs).
    """
    out = []
    for fn in sorted(functions.values(), key=lambda f: f.address):
        if fn.is_vf or fn.address in exclude:
            continue
        spec = first_match(specs, fn)
        if spec is None or (fn.total_vfs and vf_spec(fn, functions, specs) is not None):
            continue
        out.append(
            PciDevice(
                address=fn.address,
                vendor_id=fn.vendor_id,
                product_id=fn.product_id,
                numa_node=fn.numa_node,
                resource_class=spec.resource_class,
                traits=spec.traits,
                remote_managed=spec.remote_managed,
                live_migratable=spec.live_migratable,
                one_time_use=spec.one_time_use,
                physnet=spec.physical_network,
            )
        )
    return tuple(out)


def discover_pci(
    root: Root, specs: Sequence[DeviceSpec]
) -> tuple[tuple[PciDevice, ...], dict[str, PciFunction]]:
    """Convenience for other drivers: read every function and pick the whole devices.

    Args:
        root: sysfs root or :class:`~drivers.host.sysfs.SysfsReader`.
        specs: parsed ``[pci] device_spec``.

    Returns:
        ``(whole devices, every function by address)``.
    """
    functions = read_pci_functions(root)
    return discover_passthrough(functions, specs), functions
