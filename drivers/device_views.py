"""What ``discover --devices`` shows for a driver that offers every device it reports."""

from __future__ import annotations

from drivers.records import REASON_NO_VFS, REASON_OFFERED, DeviceView, HostResources


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
