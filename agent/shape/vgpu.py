"""vGPU providers: one child per physical GPU offering an mdev type (nova's libvirt driver shape).

Which type a GPU offers, and under which resource class, follows nova's
``[devices] enabled_mdev_types`` and ``[mdev_$(TYPE)]`` options
(nova/virt/libvirt/driver.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.model.names import trait_name
from agent.shape.policy import LayoutPolicy
from agent.shape.provider_names import device_provider_name
from agent.shape.spec import ParentOf, ProviderSpec, inventory
from drivers.records import Gpu, HostResources, MdevType, normalize_pci_address


def vgpu_specs(
    host: HostResources, policy: LayoutPolicy, parent_of: ParentOf
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
            inv = {rc: inventory(rc, total)}
            offered = frozenset(mdev_type_trait(t) for t in gpu.mdev_types)
            specs.append(
                ProviderSpec(
                    name, parent_of(gpu.numa_node), inv, {mdev_type_trait(mtype.id)}, offered
                )
            )
    return specs


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
