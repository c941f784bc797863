"""What ``discover --devices`` shows: one record per PCI function, offered or not and why,
and the view of a driver that offers every device it reports."""

from __future__ import annotations

from dataclasses import dataclass

from drivers.records import HostResources


@dataclass(frozen=True, slots=True)
class DeviceView:
    """One PCI function as ``compute-agent discover --devices`` shows it: offered or not, and why.

    Plain facts from the driver; names from pci.ids are added by the command.

    Attributes:
        address: canonical PCI address.
        vendor_id: 4 hex digits, lower-case.
        product_id: 4 hex digits, lower-case.
        class_code: 6 hex digits (class, subclass, programming interface), or
            None when the driver does not know it.
        driver: the bound kernel driver, or None.
        netdevs: network interface names.
        numa_node: NUMA cell, or None.
        total_vfs: most VFs the function can have (0: not an SR-IOV PF).
        num_vfs: VFs configured now.
        physfn: the PF's address when this is a VF.
        mdev_types: mediated device types the function supports (all of
            them, enabled or not).
        offered: the function (or what it is counted in) is reported to Placement.
        offered_as: what it is counted as: ``SRIOV_NET_VF``, ``VGPU``,
            ``PCI_DEVICE``-like class (None: the layout's default
            ``CUSTOM_PCI_{VENDOR}_{PRODUCT}`` for a whole device), or None
            when not offered.
        reason: why it is or is not offered, for an operator (one of the
            ``REASON_*`` kinds below, then details).
        reason_kind: the ``REASON_*`` constant, for scripts.
    """

    address: str
    vendor_id: str
    product_id: str
    class_code: str | None = None
    driver: str | None = None
    netdevs: tuple[str, ...] = ()
    numa_node: int | None = None
    total_vfs: int = 0
    num_vfs: int = 0
    physfn: str | None = None
    mdev_types: tuple[str, ...] = ()
    offered: bool = False
    offered_as: str | None = None
    reason: str = ""
    reason_kind: str = ""


REASON_OFFERED = "offered"
"""Matched by ``[pci] device_spec`` (or a vGPU parent) and reported."""
REASON_VF_OF_OFFERED = "counted-on-parent"
"""A VF counted in its PF's SRIOV_NET_VF (or its GPU's VGPU) inventory."""
REASON_NO_SPEC = "no-device-spec-match"
"""No ``[pci] device_spec`` matches the function (nor, for a PF, any of its VFs)."""
REASON_NO_VFS = "no-vfs-configured"
"""An SR-IOV PF a spec matches, with ``sriov_numvfs`` 0."""
REASON_MDEV_NOT_ENABLED = "mdev-type-not-enabled"
"""A GPU whose mdev types are all outside ``[devices] enabled_mdev_types``."""
REASON_IN_USE_BY_HOST = "in-use-by-host"
"""The host uses the function otherwise (a vGPU parent, not also passed through)."""
REASON_PARENT_NOT_OFFERED = "parent-not-offered"
"""A VF whose PF is not offered."""
REASON_VENDOR_VGPU_NOT_OFFERED = "vendor-vgpu-not-offered"
"""A VF (or the GPU) of a vendor-VFIO vGPU GPU offered by neither path: no ``[pci]
device_spec`` matches it and VGPU is off, or neither path can count it (the reason says)."""


def offered_device_views(host: HostResources, name: str) -> tuple[DeviceView, ...]:
    """Every device of ``host`` as offered, sorted by PCI address.

    The view of a driver whose records list only what it offers (a host
    description): whole devices and GPUs are offered, a PF when it has VFs.

    Args:
        host: the node's hardware records.
        name: the driver's class name, quoted in each reason.

    Returns:
        One :class:`DeviceView` per whole device, PF and GPU.
    """
    views = [
        DeviceView(
            address=d.address,
            vendor_id=d.vendor_id,
            product_id=d.product_id,
            numa_node=d.numa_node,
            offered=True,
            offered_as=d.resource_class,
            reason=f"a whole device the {name} reports",
            reason_kind=REASON_OFFERED,
        )
        for d in host.pci_devices
    ]
    for pf in host.sriov_pfs:
        views.append(
            DeviceView(
                address=pf.address,
                vendor_id="",
                product_id="",
                netdevs=(pf.netdev,) if pf.netdev else (),
                numa_node=pf.numa_node,
                total_vfs=pf.total_vfs,
                num_vfs=pf.num_vfs,
                offered=bool(pf.num_vfs),
                offered_as="SRIOV_NET_VF" if pf.num_vfs else None,
                reason=f"an SR-IOV PF the {name} reports, {pf.num_vfs} VFs",
                reason_kind=REASON_OFFERED if pf.num_vfs else REASON_NO_VFS,
            )
        )
    for gpu in host.gpus:
        views.append(
            DeviceView(
                address=gpu.address,
                vendor_id="",
                product_id="",
                numa_node=gpu.numa_node,
                mdev_types=tuple(sorted(gpu.mdev_types)),
                offered=True,
                offered_as="VGPU",
                reason=f"a vGPU parent the {name} reports",
                reason_kind=REASON_OFFERED,
            )
        )
    return tuple(sorted(views, key=lambda v: v.address))
