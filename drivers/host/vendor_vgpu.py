"""Which path offers each VF of a vendor-VFIO GPU: PCI (nova 34's), VGPU (opt-in), or none.

The two paths (docs/host-driver.md, "GPUs without mdev"):

* **PCI**, what nova 34 can use: VFs that a ``[pci] device_spec`` matches are
  PCI devices like any other VF (nova 34's libvirt driver never reads
  ``current_vgpu_type``; it passes a VF that already holds a vGPU to the
  guest as a hostdev). They become one :class:`~drivers.records.SriovPF`
  record per GPU holding the matched VFs only, as nova's PCI tracker counts
  the devices its specs match; the layout gives it nova's provider
  (``pci_placement_translator``: ``{nodename}_{PF ADDRESS}``, the spec's
  class and traits). Warned about: a matched VF holding no vGPU (nova would
  hand out an empty VF), matched VFs of one GPU holding different types (one
  class cannot tell them apart), and matched VFs whose specs give different
  classes or traits (nova 34 refuses a PF's VFs so: ``add_child`` raises
  ``PlacementPciMixedResourceClassException`` / ``...MixedTraitsException``);
  such a GPU is left out.
* **VGPU**, only with ``[devices] vendor_vgpu_inventory`` (a consumer that
  writes ``current_vgpu_type`` itself): a :class:`~drivers.records.Gpu` per
  GPU whose enabled types have a known maximum per GPU; a type's total is the
  VFs holding it plus what can still be created within the type's maximum,
  the card's vGPU ceiling (instances of every type), the framebuffer left and
  the free VFs listing it (:mod:`drivers.host.vgpu_capacity`), so
  ``[mdev_$(TYPE)] max_instances`` keeps nova's meaning over true totals
  (:mod:`agent.shape.vgpu`).
* **none**: anything else, each VF with its reason.

A GPU with a VF on the PCI path offers no VGPU: its capacity would be counted twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from drivers.host.device_spec import DeviceSpec, first_match
from drivers.host.nvidia import VendorGpu, VendorVf
from drivers.host.nvml import VgpuTypes
from drivers.host.pci import PciFunction
from drivers.host.settings import HostSettings
from drivers.host.vgpu_capacity import more_instances, type_table
from drivers.records import Gpu, Mdev, MdevType, SriovPF

PATH_PCI = "PCI"
PATH_VGPU = "VGPU"
PATH_NONE = "none"


@dataclass(frozen=True, slots=True)
class VfPath:
    """How one function of a vendor-VFIO GPU (a VF, or the GPU's PF) is offered.

    Attributes:
        address: the function's address.
        path: :data:`PATH_PCI`, :data:`PATH_VGPU` or :data:`PATH_NONE`.
        offered_as: the class it is counted in: ``VGPU``, or on the PCI path the
            spec's ``resource_class`` (upper-case) or ``CUSTOM_PCI_{VENDOR}_{PRODUCT}``
            of the VFs, as nova's translator names it; None when not offered.
        reason: why, for an operator.
    """

    address: str
    path: str
    offered_as: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class VendorPaths:
    """What the vendor-VFIO GPUs offer, and why, from one discovery.

    Attributes:
        sriov_pfs: the PCI path: one record per GPU, its matched VFs.
        gpus: the VGPU path.
        functions: address -> :class:`VfPath` of every PF and VF of those GPUs.
    """

    sriov_pfs: tuple[SriovPF, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    functions: Mapping[str, VfPath] = field(default_factory=lambda: MappingProxyType({}))


def _describe(vf: VendorVf) -> str:
    if vf.current is None:
        return "holds no vGPU (current_vgpu_type 0)"
    return f"holds vGPU type {vf.current}"


def _spec_key(spec: DeviceSpec, fn: PciFunction) -> tuple[str, frozenset[str]]:
    """What nova's translator compares among a PF's VFs: class and traits (as written)."""
    rc = (spec.resource_class or f"CUSTOM_PCI_{fn.vendor_id}_{fn.product_id}").upper()
    return rc, frozenset(t.upper() for t in spec.traits)


def _warn_contents(
    gpu: VendorGpu,
    matched: Mapping[str, DeviceSpec],
    vfs: Mapping[str, VendorVf],
    warn: Callable[[str], None],
) -> None:
    """Matched VFs holding no vGPU, or holding different types: nova counts them all."""
    empty = sorted(a for a in matched if vfs[a].current is None)
    if empty:
        warn(
            f"[pci] device_spec matches VFs of GPU {gpu.address} that hold no vGPU "
            f"(current_vgpu_type 0): {', '.join(empty)}; nova would pass an empty VF to a "
            "guest: write a type ID to each VF's nvidia/current_vgpu_type, or narrow the spec"
        )
    held = sorted({vfs[a].current for a in matched if vfs[a].current is not None})
    if len(held) > 1:
        warn(
            f"[pci] device_spec matches VFs of GPU {gpu.address} holding different vGPU types "
            f"({', '.join(held)}) under one resource class: a flavor cannot choose the type; "
            "give each GPU's VFs one type"
        )


def _pci_path(
    gpu: VendorGpu,
    matched: dict[str, DeviceSpec],
    functions: Mapping[str, PciFunction],
    warn: Callable[[str], None],
) -> tuple[SriovPF | None, dict[str, VfPath]]:
    """The GPU's matched VFs as one SR-IOV record (nova's PCI path), and each VF's verdict."""
    vfs = {vf.address: vf for vf in gpu.vfs}
    keys = {_spec_key(spec, functions[a]) for a, spec in matched.items()}
    paths: dict[str, VfPath] = {}
    if len(keys) > 1:
        warn(
            f"[pci] device_spec gives the VFs of GPU {gpu.address} different resource classes "
            f"or traits ({', '.join(sorted(rc for rc, _ in keys))}); nova 34 refuses that "
            "(one class and one trait set per PF, pci_placement_translator); the GPU is left "
            "out: give each GPU's VFs one spec, or VFs of one vGPU type per GPU"
        )
        for address in matched:
            reason = "PCI path refused: the specs matching this GPU's VFs disagree (see log)"
            paths[address] = VfPath(address, PATH_NONE, None, reason)
        return None, paths
    _warn_contents(gpu, matched, vfs, warn)
    spec = next(iter(matched.values()))
    first = functions[min(matched)]
    pf = functions[gpu.address]
    record = SriovPF(
        address=gpu.address,
        total_vfs=pf.total_vfs,
        vf_addresses=tuple(sorted(matched)),
        numa_node=pf.numa_node,
        physnet=spec.physical_network,
        traits=frozenset(spec.traits),
        vf_vendor_id=first.vendor_id,
        vf_product_id=first.product_id,
        resource_class=spec.resource_class,
        spec_traits=frozenset(spec.traits),
        remote_managed=spec.remote_managed,
        live_migratable=spec.live_migratable,
    )
    ((rc, _traits),) = keys
    for address, s in matched.items():
        reason = (
            f"PCI path: a vendor-VFIO vGPU VF of {gpu.address} that "
            f"{_describe(vfs[address])}; [pci] device_spec {s.text} matches it: counted in "
            f"{gpu.address}'s provider, passed through whole (nova's [pci] alias)"
        )
        paths[address] = VfPath(address, PATH_PCI, rc, reason)
    return record, paths


def _vgpu_types(
    gpu: VendorGpu,
    settings: HostSettings,
    names: Mapping[str, str],
    vgpu_types: VgpuTypes,
    warn: Callable[[str], None],
) -> dict[str, MdevType]:
    """Each enabled type the GPU names, with what more of it can be created
    (:func:`~drivers.host.vgpu_capacity.more_instances`); a type without a known
    maximum is left out, and where the framebuffer left is unknown none more is counted,
    each with one warning."""
    gpu_names = gpu.names()
    wanted = [t for t in settings.enabled_mdev_types if t in gpu_names]
    if not wanted:
        return {}
    operator = dict(settings.vendor_vgpu_max_instances)
    table = type_table(gpu, names, operator, vgpu_types(gpu.address, gpu_names))
    types: dict[str, MdevType] = {}
    for type_id in wanted:
        if table[type_id].max_instances is None:
            warn(
                f"vGPU type {type_id} on GPU {gpu.address}: maximum instances per GPU unknown "
                "(no NVML: install nvidia-ml-py with NVIDIA's vGPU manager); set [devices] "
                f"vendor_vgpu_max_instances = {type_id}:<N>; no VGPU for it"
            )
            continue
        more = more_instances(gpu, type_id, table)
        if isinstance(more, str):
            warn(
                f"vGPU type {type_id} on GPU {gpu.address}: the framebuffer left is unknown "
                f"({more}); only the instances held are counted: install nvidia-ml-py with "
                "NVIDIA's vGPU manager (nvmlVgpuTypeGetFramebufferSize)"
            )
            more = 0
        types[type_id] = MdevType(type_id, gpu_names[type_id], more, "vfio-pci")
    return types


def _vgpu_path(
    gpu: VendorGpu,
    settings: HostSettings,
    names: Mapping[str, str],
    vgpu_types: VgpuTypes,
    warn: Callable[[str], None],
) -> tuple[Gpu | None, dict[str, VfPath]]:
    """The GPU as a VGPU parent with true totals (``vendor_vgpu_inventory``), and each VF."""
    types = _vgpu_types(gpu, settings, names, vgpu_types, warn)
    existing = tuple(
        Mdev(uuid=vf.address, type_id=vf.current, parent=gpu.address)
        for vf in gpu.vfs
        if vf.current is not None
    )
    paths = {}
    for vf in gpu.vfs:
        offered = (vf.current in types) if vf.current else any(t in vf.creatable for t in types)
        if offered and vf.current:
            reason = (
                f"VGPU path ([devices] vendor_vgpu_inventory): a vendor-VFIO vGPU VF of "
                f"{gpu.address} that {_describe(vf)}: counted in its VGPU inventory"
            )
        elif offered:
            more = ", ".join(
                f"{t}: {m.available_instances} more" for t, m in types.items() if t in vf.creatable
            )
            reason = (
                f"VGPU path ([devices] vendor_vgpu_inventory): a free vendor-VFIO vGPU VF of "
                f"{gpu.address}; its GPU can still create {more} (counted in its VGPU inventory)"
            )
        else:
            reason = (
                f"none: a vendor-VFIO vGPU VF of {gpu.address} that {_describe(vf)}; no type "
                "of [devices] enabled_mdev_types with a known maximum is held or creatable here"
            )
        path, offered_as = (PATH_VGPU, "VGPU") if offered else (PATH_NONE, None)
        paths[vf.address] = VfPath(vf.address, path, offered_as, reason)
    if not types and not existing:
        return None, paths
    return Gpu(gpu.address, MappingProxyType(types), existing, gpu.numa_node), paths


def _none_path(gpu: VendorGpu) -> dict[str, VfPath]:
    """Every VF of a GPU neither path offers (no spec matches; VGPU not asked for)."""
    return {
        vf.address: VfPath(
            vf.address,
            PATH_NONE,
            None,
            f"none: a vendor-VFIO vGPU VF of {gpu.address} that {_describe(vf)}; no [pci] "
            "device_spec matches it, and VGPU is off ([devices] vendor_vgpu_inventory: "
            "nova 34 creates vGPUs only as mdevs and cannot use VGPU here)",
        )
        for vf in gpu.vfs
    }


def _pf_path(gpu: VendorGpu, vfs: Mapping[str, VfPath]) -> VfPath:
    """The GPU's own row: the path its VFs take."""
    taken = sorted({p.path for a, p in vfs.items() if a != gpu.address and p.path != PATH_NONE})
    counts = {
        path: sum(1 for p in vfs.values() if p.path == path) for path in (PATH_PCI, PATH_VGPU)
    }
    if not taken:
        reason = f"vendor-VFIO vGPU GPU ({len(gpu.vfs)} VFs): none of its VFs is offered"
        return VfPath(gpu.address, PATH_NONE, None, reason)
    path = taken[0]
    as_ = (
        "VGPU"
        if path == PATH_VGPU
        else next((p.offered_as for p in vfs.values() if p.path == PATH_PCI), None)
    )
    reason = f"vendor-VFIO vGPU GPU ({len(gpu.vfs)} VFs): {counts[path]} offered on the {path} path"
    return VfPath(gpu.address, path, as_, reason)


def vendor_paths(
    gpus: Sequence[VendorGpu],
    functions: Mapping[str, PciFunction],
    settings: HostSettings,
    vgpu_types: VgpuTypes,
    warn: Callable[[str], None],
) -> VendorPaths:
    """Decide every VF's path (module docstring) and build the records each path offers.

    Args:
        gpus: :func:`drivers.host.nvidia.read_vendor_gpus`.
        functions: every PCI function, by address.
        settings: device specs, ``enabled_mdev_types``, ``vendor_vgpu_*``.
        vgpu_types: what NVML says of each GPU's vGPU types (:mod:`drivers.host.nvml`).
        warn: one line per problem (naming the GPU, the VFs and the fix).

    Returns:
        :class:`VendorPaths`.
    """
    pfs, vgpus, out = [], [], {}
    unused: set[str] = set()
    # A type ID names one type for the whole vGPU manager: a name any VF lists serves all.
    names = {t: n for gpu in gpus for vf in gpu.vfs for t, n in vf.creatable.items()}
    for gpu in gpus:
        pf = functions[gpu.address]
        matched = {
            vf.address: spec
            for vf in gpu.vfs
            if (spec := first_match(settings.specs, functions[vf.address], pf.netdevs))
        }
        if not settings.vendor_vgpu_inventory:
            unused |= set(gpu.names()) & set(settings.enabled_mdev_types)
        if first_match(settings.specs, pf) is not None:
            paths = _pf_matched(gpu, warn)
        elif matched:
            record, paths = _pci_path(gpu, matched, functions, warn)
            pfs += [record] if record is not None else []
            for vf in gpu.vfs:
                paths.setdefault(vf.address, _unmatched(gpu, vf))
        elif settings.vendor_vgpu_inventory:
            gpu_record, paths = _vgpu_path(gpu, settings, names, vgpu_types, warn)
            vgpus += [gpu_record] if gpu_record is not None else []
        else:
            paths = _none_path(gpu)
        out.update(paths)
        out[gpu.address] = _pf_path(gpu, paths)
    if unused:
        warn(
            f"[devices] enabled_mdev_types names {', '.join(sorted(unused))}, offered by GPUs "
            "through NVIDIA's vendor-specific VFIO framework (no mdev): nova 34 creates vGPUs "
            "only as mdevs and cannot consume VGPU there, so none is reported. Offer VFs that "
            "hold a vGPU through [pci] device_spec (docs/host-driver.md), or set [devices] "
            "vendor_vgpu_inventory = true for a consumer that writes current_vgpu_type"
        )
    return VendorPaths(tuple(pfs), tuple(vgpus), MappingProxyType(out))


def _pf_matched(gpu: VendorGpu, warn: Callable[[str], None]) -> dict[str, VfPath]:
    """A spec names the GPU's PF: nova 34 refuses it beside its VFs
    (``PlacementPciDependentDeviceException``), and the vGPUs are the VFs: nothing offered."""
    warn(
        f"[pci] device_spec matches GPU {gpu.address} itself, whose vGPUs are its VFs "
        "(vendor-specific VFIO); nova 34 refuses a PF configured with its VFs, and a PF "
        "with VFs enabled is no whole device: the GPU is left out; write the spec for the "
        "VFs holding a vGPU (their addresses)"
    )
    reason = f"none: [pci] device_spec matches its GPU {gpu.address} itself (see log)"
    return {vf.address: VfPath(vf.address, PATH_NONE, None, reason) for vf in gpu.vfs}


def _unmatched(gpu: VendorGpu, vf: VendorVf) -> VfPath:
    reason = (
        f"none: a vendor-VFIO vGPU VF of {gpu.address} that {_describe(vf)}; no [pci] "
        "device_spec matches it, and its GPU's other VFs are on the PCI path (no VGPU "
        "beside them: the GPU's capacity would be counted twice)"
    )
    return VfPath(vf.address, PATH_NONE, None, reason)
