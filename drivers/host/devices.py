"""Every PCI function of the host, and why each is or is not offered (``discover --devices``).

Read-only and after the fact: it takes a :class:`~drivers.host.discovery.Discovery`
(what was offered) and the functions it read, and explains each function
by the same rules the collectors apply (:mod:`drivers.host.passthrough`,
:mod:`drivers.host.sriov`, :mod:`drivers.host.mdev`), so the explanation
cannot disagree with what is reported.
"""

from __future__ import annotations

from collections.abc import Mapping

from drivers.host.device_spec import first_match
from drivers.host.discovery import Discovery
from drivers.host.mdev import discover_mdevs
from drivers.host.nvidia import discover_nvidia_vgpus
from drivers.host.pci import PciFunction
from drivers.host.settings import HostSettings
from drivers.host.sriov import pf_spec
from drivers.host.sysfs import SysfsReader
from drivers.records import (
    REASON_IN_USE_BY_HOST,
    REASON_MDEV_NOT_ENABLED,
    REASON_NO_SPEC,
    REASON_NO_VFS,
    REASON_OFFERED,
    REASON_PARENT_NOT_OFFERED,
    REASON_VF_OF_OFFERED,
    DeviceView,
    Gpu,
)


def _supported_types(
    settings: HostSettings, functions: Mapping[str, PciFunction]
) -> dict[str, tuple[str, ...]]:
    """GPU address -> every mdev type it supports, enabled or not.

    A reader of its own: its warnings repeat the discovery's, which are
    reported already.
    """
    reader = SysfsReader(settings.sysfs_root)
    gpus: tuple[Gpu, ...] = discover_mdevs(reader, None) + discover_nvidia_vgpus(
        reader, functions, None
    )
    return {g.address: tuple(sorted(g.mdev_types)) for g in gpus}


def device_views(discovery: Discovery, settings: HostSettings) -> tuple[DeviceView, ...]:
    """One :class:`DeviceView` per PCI function discovery read, by address.

    Args:
        discovery: a discovery run with ``settings``.
        settings: the host driver's settings (device specs, enabled mdev types).

    Raises:
        SysfsError: the mdev listing became unreadable since the discovery.
    """
    functions = discovery.functions
    res = discovery.resources
    gpus = {g.address: g for g in res.gpus}
    pfs = {p.address: p for p in res.sriov_pfs}
    whole = {d.address: d for d in res.pci_devices}
    supported = _supported_types(settings, functions)
    enabled = ", ".join(settings.enabled_mdev_types) or "(empty)"
    views = []
    for fn in sorted(functions.values(), key=lambda f: f.address):
        offered_as: str | None = None
        offered = False
        if fn.address in gpus:
            offered, offered_as, kind = True, "VGPU", REASON_OFFERED
            gpu = gpus[fn.address]
            if gpu.mdev_types:
                types = ", ".join(sorted(gpu.mdev_types))
                reason = f"vGPU parent: mdev type {types} enabled ([devices] enabled_mdev_types)"
            else:
                types = ", ".join(sorted({m.type_id for m in gpu.mdevs}))
                reason = f"vGPU parent: holds mdevs of type {types} (not in enabled_mdev_types)"
            if first_match(settings.specs, fn) is not None:
                kind = REASON_IN_USE_BY_HOST
                reason += (
                    "; [pci] device_spec matches it too, but a GPU in use by the host as a "
                    "vGPU parent is not also offered for passthrough"
                )
        elif fn.address in supported:
            kind = REASON_MDEV_NOT_ENABLED
            reason = (
                f"mdev type not enabled: supports {', '.join(supported[fn.address])}; "
                f"[devices] enabled_mdev_types is {enabled}"
            )
        elif fn.physfn is not None:
            if fn.physfn in pfs and pfs[fn.physfn].num_vfs:
                offered, offered_as, kind = True, "SRIOV_NET_VF", REASON_VF_OF_OFFERED
                reason = f"a VF of {fn.physfn}: counted in its SRIOV_NET_VF inventory"
            elif fn.nvidia_vgpu and fn.physfn in gpus:
                offered, offered_as, kind = True, "VGPU", REASON_VF_OF_OFFERED
                reason = f"an NVIDIA vGPU VF of {fn.physfn}: counted in its VGPU inventory"
            else:
                kind = REASON_PARENT_NOT_OFFERED
                reason = f"a VF of {fn.physfn}, which is not offered"
        elif fn.total_vfs:
            if fn.address in pfs and pfs[fn.address].num_vfs:
                pf = pfs[fn.address]
                offered, offered_as, kind = True, "SRIOV_NET_VF", REASON_OFFERED
                physnet = f", physnet {pf.physnet}" if pf.physnet else ""
                reason = f"SR-IOV PF with {pf.num_vfs} of {pf.total_vfs} VFs configured{physnet}"
            elif pf_spec(fn, functions, settings.specs) is not None:
                kind = REASON_NO_VFS
                reason = (
                    f"no VFs configured: sriov_numvfs is 0 (up to {fn.total_vfs}); a PF is "
                    "offered by its VFs"
                )
            else:
                kind = REASON_NO_SPEC
                reason = "no [pci] device_spec matches the PF or its VFs"
        elif fn.address in whole:
            device = whole[fn.address]
            offered, offered_as, kind = True, device.resource_class, REASON_OFFERED
            reason = "[pci] device_spec matches: offered whole for passthrough"
        else:
            kind = REASON_NO_SPEC
            reason = "no [pci] device_spec matches"
        views.append(
            DeviceView(
                address=fn.address,
                vendor_id=fn.vendor_id,
                product_id=fn.product_id,
                class_code=fn.class_code,
                driver=fn.driver,
                netdevs=fn.netdevs,
                numa_node=fn.numa_node,
                total_vfs=fn.total_vfs,
                num_vfs=len(fn.vf_addresses),
                physfn=fn.physfn,
                mdev_types=supported.get(fn.address, ()),
                offered=offered,
                offered_as=offered_as,
                reason=reason,
                reason_kind=kind,
            )
        )
    return tuple(views)
