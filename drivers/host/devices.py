"""Every PCI function of the host, and why each is or is not offered (``discover --devices``).

Read-only and after the fact: it takes a :class:`~drivers.host.discovery.Discovery`
(what was offered) and the functions it read, and explains each function
by the same rules the collectors apply (:mod:`drivers.host.passthrough`,
:mod:`drivers.host.sriov`, :mod:`drivers.host.mdev`), so the explanation
cannot disagree with what is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from drivers.device_views import (
    REASON_IN_USE_BY_HOST,
    REASON_MDEV_NOT_ENABLED,
    REASON_NO_SPEC,
    REASON_OFFERED,
    REASON_PARENT_NOT_OFFERED,
    REASON_VENDOR_VGPU_NOT_OFFERED,
    REASON_VF_OF_OFFERED,
    DeviceView,
)
from drivers.host.device_spec import first_match
from drivers.host.discovery import Discovery
from drivers.host.mdev import discover_mdevs
from drivers.host.nvidia import read_vendor_gpus
from drivers.host.pci import PciFunction
from drivers.host.settings import HostSettings
from drivers.host.sysfs import SysfsReader
from drivers.host.vendor_vgpu import PATH_NONE, PATH_VGPU, VfPath
from drivers.records import Gpu, PciDevice, SriovPF


def _supported_types(
    settings: HostSettings, functions: Mapping[str, PciFunction]
) -> dict[str, tuple[str, ...]]:
    """GPU address -> every mdev type it supports, enabled or not.

    A reader of its own: its warnings repeat the discovery's, which are
    reported already.
    """
    reader = SysfsReader(settings.sysfs_root)
    gpus: tuple[Gpu, ...] = discover_mdevs(reader, None)
    out = {g.address: tuple(sorted(g.mdev_types)) for g in gpus}
    for vendor in read_vendor_gpus(reader, functions):
        out[vendor.address] = tuple(sorted(vendor.names()))
    return out


class _Verdict(NamedTuple):
    """Whether a function is offered, as what, and why (a ``REASON_*`` kind and a sentence)."""

    offered: bool
    offered_as: str | None
    kind: str
    reason: str


@dataclass(frozen=True)
class _Offered:
    """What the discovery offered, by address, and what explains the rest."""

    settings: HostSettings
    functions: Mapping[str, PciFunction]
    gpus: Mapping[str, Gpu]
    pfs: Mapping[str, SriovPF]
    whole: Mapping[str, PciDevice]
    supported: Mapping[str, tuple[str, ...]]
    vendor: Mapping[str, VfPath]


def _vendor(fn: PciFunction, seen: _Offered) -> _Verdict:
    """A PF or VF of a vendor-VFIO GPU: the path discovery chose (drivers.host.vendor_vgpu)."""
    path = seen.vendor[fn.address]
    if path.path == PATH_NONE:
        return _Verdict(False, None, REASON_VENDOR_VGPU_NOT_OFFERED, path.reason)
    offered_as = path.offered_as
    if path.path != PATH_VGPU and not seen.settings.report_in_placement:
        # Without [pci] report_in_placement every VF counts as SRIOV_NET_VF (DESIGN.md).
        offered_as = "SRIOV_NET_VF"
    kind = REASON_OFFERED if fn.physfn is None else REASON_VF_OF_OFFERED
    return _Verdict(True, offered_as, kind, path.reason)


def _vgpu_parent(fn: PciFunction, seen: _Offered) -> _Verdict:
    """A GPU offered as vGPU parent (drivers.host.mdev, drivers.host.nvidia)."""
    gpu = seen.gpus[fn.address]
    kind = REASON_OFFERED
    if gpu.mdev_types:
        types = ", ".join(sorted(gpu.mdev_types))
        reason = f"vGPU parent: mdev type {types} enabled ([devices] enabled_mdev_types)"
    else:
        types = ", ".join(sorted({m.type_id for m in gpu.mdevs}))
        reason = f"vGPU parent: holds mdevs of type {types} (not in enabled_mdev_types)"
    if first_match(seen.settings.specs, fn) is not None:
        kind = REASON_IN_USE_BY_HOST
        reason += (
            "; [pci] device_spec matches it too, but a GPU in use by the host as a "
            "vGPU parent is not also offered for passthrough"
        )
    return _Verdict(True, "VGPU", kind, reason)


def _mdev_not_enabled(fn: PciFunction, seen: _Offered) -> _Verdict:
    """A GPU that supports mdev types, none of them enabled."""
    enabled = ", ".join(seen.settings.enabled_mdev_types) or "(empty)"
    reason = (
        f"mdev type not enabled: supports {', '.join(seen.supported[fn.address])}; "
        f"[devices] enabled_mdev_types is {enabled}"
    )
    return _Verdict(False, None, REASON_MDEV_NOT_ENABLED, reason)


def _virtual_function(fn: PciFunction, seen: _Offered) -> _Verdict:
    """A VF: offered through its PF (SR-IOV) or its GPU (NVIDIA vGPU), or not at all."""
    if fn.physfn in seen.pfs and seen.pfs[fn.physfn].num_vfs:
        reason = f"a VF of {fn.physfn}: counted in its SRIOV_NET_VF inventory"
        return _Verdict(True, "SRIOV_NET_VF", REASON_VF_OF_OFFERED, reason)
    if fn.physfn in seen.whole:
        reason = (
            f"a VF of {fn.physfn}, which is offered whole: no [pci] device_spec matches its VFs"
        )
        return _Verdict(False, None, REASON_NO_SPEC, reason)
    reason = f"a VF of {fn.physfn}, which is not offered"
    return _Verdict(False, None, REASON_PARENT_NOT_OFFERED, reason)


def _physical_function(fn: PciFunction, seen: _Offered) -> _Verdict:
    """An SR-IOV capable PF: offered by its VFs (drivers.host.sriov), or whole when a
    spec names the PF itself and none of its VFs (drivers.host.passthrough)."""
    if fn.address in seen.pfs and seen.pfs[fn.address].num_vfs:
        pf = seen.pfs[fn.address]
        physnet = f", physnet {pf.physnet}" if pf.physnet else ""
        reason = f"SR-IOV PF with {pf.num_vfs} of {pf.total_vfs} VFs configured{physnet}"
        return _Verdict(True, "SRIOV_NET_VF", REASON_OFFERED, reason)
    if fn.address in seen.whole:
        reason = (
            f"[pci] device_spec matches the PF itself and none of its {len(fn.vf_addresses)} "
            "VFs: offered whole for passthrough, as nova offers a type-PF device"
        )
        return _Verdict(True, seen.whole[fn.address].resource_class, REASON_OFFERED, reason)
    reason = "no [pci] device_spec matches the PF or its VFs"
    vfs = [seen.functions[a] for a in fn.vf_addresses if a in seen.functions]
    for spec in seen.settings.specs:
        if any(spec.wants_serial(vf, fn.netdevs, fn.vpd_serial) for vf in vfs):
            reason += (
                f"; {spec.text} would, but it is remote_managed and neither the VFs nor "
                "the PF have a card serial number in their PCI VPD (nova's rule)"
            )
            break
    return _Verdict(False, None, REASON_NO_SPEC, reason)


def _whole_device(fn: PciFunction, seen: _Offered) -> _Verdict:
    """Any other function: offered whole for passthrough if a device_spec matched it."""
    if fn.address in seen.whole:
        reason = "[pci] device_spec matches: offered whole for passthrough"
        return _Verdict(True, seen.whole[fn.address].resource_class, REASON_OFFERED, reason)
    return _Verdict(False, None, REASON_NO_SPEC, "no [pci] device_spec matches")


def _verdict(fn: PciFunction, seen: _Offered) -> _Verdict:
    """The rule of the first kind ``fn`` is, in the collectors' order of precedence."""
    if fn.address in seen.vendor:
        return _vendor(fn, seen)
    if fn.address in seen.gpus:
        return _vgpu_parent(fn, seen)
    if fn.address in seen.supported:
        return _mdev_not_enabled(fn, seen)
    if fn.physfn is not None:
        return _virtual_function(fn, seen)
    if fn.total_vfs:
        return _physical_function(fn, seen)
    return _whole_device(fn, seen)


def device_views(discovery: Discovery, settings: HostSettings) -> tuple[DeviceView, ...]:
    """One :class:`DeviceView` per PCI function discovery read, by address.

    Args:
        discovery: a discovery run with ``settings``.
        settings: the host driver's settings (device specs, enabled mdev types).

    Raises:
        SysfsError: the mdev listing became unreadable since the discovery.
    """
    res = discovery.resources
    seen = _Offered(
        settings=settings,
        functions=discovery.functions,
        gpus={g.address: g for g in res.gpus},
        pfs={p.address: p for p in res.sriov_pfs},
        whole={d.address: d for d in res.pci_devices},
        supported=_supported_types(settings, discovery.functions),
        vendor=discovery.vendor.functions,
    )
    views = []
    for fn in sorted(discovery.functions.values(), key=lambda f: f.address):
        verdict = _verdict(fn, seen)
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
                mdev_types=seen.supported.get(fn.address, ()),
                offered=verdict.offered,
                offered_as=verdict.offered_as,
                reason=verdict.reason,
                reason_kind=verdict.kind,
            )
        )
    return tuple(views)
