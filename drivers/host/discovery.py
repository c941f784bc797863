"""One full discovery: every collector run once, assembled into :class:`HostResources`.

Order matters only for exclusions: GPUs offered as vGPU are found first so
that a device spec matching them does not offer them a second time as a PCI
device or SR-IOV PF; the PFs of vendor-VFIO GPUs (:mod:`drivers.host.vendor_vgpu`)
are offered by that module alone, through their VFs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from drivers.host.cpu import CpuInfo, discover_cpus
from drivers.host.disk import DiskInfo, discover_disk
from drivers.host.mdev import discover_mdevs
from drivers.host.memory import MemoryInfo, discover_memory
from drivers.host.numa import NumaNode, discover_numa, numa_cells
from drivers.host.nvidia import VendorGpu, read_vendor_gpus
from drivers.host.nvml import NvmlVgpuTypes, VgpuTypes, no_vgpu_types
from drivers.host.passthrough import discover_passthrough
from drivers.host.pci import PciFunction, read_pci_functions
from drivers.host.settings import HostSettings
from drivers.host.sriov import discover_sriov
from drivers.host.sysfs import SysfsError, SysfsReader
from drivers.host.vendor_vgpu import VendorPaths, vendor_paths
from drivers.host.vpd import with_vpd_serials
from drivers.records import Gpu, HostResources


@dataclass(frozen=True, slots=True)
class Discovery:
    """Everything one run found, the records and the raw facts behind them.

    Attributes:
        resources: the :class:`HostResources` the driver reports.
        cpu: :class:`~drivers.host.cpu.CpuInfo`.
        memory: :class:`~drivers.host.memory.MemoryInfo`.
        disk: :class:`~drivers.host.disk.DiskInfo`.
        numa: raw NUMA nodes.
        functions: every PCI function read, by address.
        warnings: one line per file that could not be used.
        vendor: the path of every function of a vendor-VFIO GPU (``discover --devices``).
    """

    resources: HostResources
    cpu: CpuInfo
    memory: MemoryInfo
    disk: DiskInfo
    numa: tuple[NumaNode, ...]
    functions: dict[str, PciFunction]
    warnings: tuple[str, ...]
    vendor: VendorPaths = field(default_factory=VendorPaths)


def check_root(reader: SysfsReader) -> None:
    """Refuse a root that is not a sysfs root before reading anything in it.

    Raises:
        SysfsError: ``sys/`` or ``proc/`` is not a directory below the root,
            naming it and what the root must hold.
    """
    for part in ("sys", "proc"):
        if not os.path.isdir(reader.path(part)):
            raise SysfsError(
                reader.path(part),
                f"missing; {reader.root} is not a sysfs root ([host_driver] sysfs_root or "
                "--sysfs-root must name a directory holding sys/ and proc/, as / does and "
                "as 'compute-agent capture' writes)",
            )


def discover_host(
    settings: HostSettings,
    reader: SysfsReader | None = None,
    vgpu_types: VgpuTypes | None = None,
) -> Discovery:
    """Run every collector against ``reader`` (default: ``settings.sysfs_root``).

    Totals are before any ``reserved_host_*`` amount (the layout applies them).

    Args:
        settings: the host driver's settings.
        reader: the sysfs reader (default: one on ``settings.sysfs_root``).
        vgpu_types: what NVML says of each GPU's vGPU types (:mod:`drivers.host.nvml`);
            default: NVML on the live host, nothing on a captured tree (NVML would
            describe this machine).

    Raises:
        ConfigError: ``cpu_dedicated_set`` / ``cpu_shared_set`` name CPUs
            that are not online.
        SysfsError: the root lacks ``sys/`` or ``proc/``, or has no CPU or no
            /proc/meminfo at all (nothing sensible to report; exit 2).
        OSError: the instances file system cannot be measured.
    """
    reader = reader or SysfsReader(settings.sysfs_root)
    check_root(reader)
    cpu = discover_cpus(reader, settings.dedicated, settings.shared)
    memory = discover_memory(reader)
    disk = discover_disk(reader, settings.instances_path, settings.shared_storage)
    numa = discover_numa(reader)
    functions = read_pci_functions(reader)
    if any(spec.remote_managed for spec in settings.specs):
        functions = with_vpd_serials(reader, functions, settings.specs)
    gpus = _mdev_gpus(reader, functions, settings)
    vendor_gpus = read_vendor_gpus(reader, functions)
    vendor = _vendor_paths(reader, vendor_gpus, functions, settings, vgpu_types)
    exclude = frozenset(g.address for g in gpus) | {g.address for g in vendor_gpus}
    sriov = discover_sriov(functions, settings.specs, exclude, settings.report_in_placement)
    sriov += vendor.sriov_pfs
    resources = HostResources(
        nodename=settings.nodename,
        vcpus=len(cpu.vcpu_ids),
        pcpus=len(cpu.pcpu_ids),
        memory_mb=memory.total_mb,
        disk_gb=disk.total_gb,
        shared_storage=disk.shared,
        traits=cpu.traits,
        numa_cells=numa_cells(numa, cpu.vcpu_ids, cpu.pcpu_ids),
        pci_devices=discover_passthrough(functions, settings.specs, exclude),
        sriov_pfs=tuple(sorted(sriov, key=lambda p: p.address)),
        gpus=tuple(sorted(gpus + vendor.gpus, key=lambda g: g.address)),
    )
    warnings = tuple(reader.warnings)
    return Discovery(resources, cpu, memory, disk, numa, functions, warnings, vendor)


def _mdev_gpus(
    reader: SysfsReader, functions: Mapping[str, PciFunction], settings: HostSettings
) -> tuple[Gpu, ...]:
    """The mdev-capable GPUs offered as vGPU (:func:`discover_mdevs`); a ``[pci]
    device_spec`` that matches one of them costs a warning (it is not offered twice)."""
    gpus = discover_mdevs(reader, settings.enabled_mdev_types)
    for spec in settings.specs:
        for address in sorted(g.address for g in gpus):
            if spec.matches(functions[address]) if address in functions else False:
                reader.warn(
                    f"[pci] device_spec {spec.text} matches {address}, which is offered as "
                    "vGPU; it is not also offered for passthrough"
                )
    return gpus


def _vendor_paths(
    reader: SysfsReader,
    vendor_gpus: Sequence[VendorGpu],
    functions: Mapping[str, PciFunction],
    settings: HostSettings,
    vgpu_types: VgpuTypes | None,
) -> VendorPaths:
    """The path of each vendor-VFIO GPU (:func:`vendor_paths`); the vGPU type facts from
    ``vgpu_types``, else NVML on a live host, else none known."""
    if vgpu_types is None and reader.is_live:
        with NvmlVgpuTypes(reader.warn) as nvml:
            return vendor_paths(vendor_gpus, functions, settings, nvml, reader.warn)
    facts = vgpu_types or no_vgpu_types
    return vendor_paths(vendor_gpus, functions, settings, facts, reader.warn)
