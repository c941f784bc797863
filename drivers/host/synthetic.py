"""Write sysfs trees from a short description: benchmark hosts and test fixtures.

The layout written is the one the collectors read (and ``capture`` writes):
``sys/bus/pci/devices/<address>/`` as directories, ``virtfn*`` / ``physfn`` /
``driver`` / ``iommu_group`` / ``mdev_type`` as relative links that resolve
inside the tree, ``proc/cpuinfo``, ``proc/meminfo``, ``proc/self/mounts``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from drivers.host.cpuset import format_cpu_set
from drivers.records import vf_addresses

SKYLAKE_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi "
    "mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon "
    "pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf pni pclmulqdq dtes64 monitor "
    "ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe "
    "popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch cpuid_fault "
    "epb cat_l3 cdp_l3 invpcid_single pti intel_ppin ssbd mba ibrs ibpb stibp tpr_shadow vnmi "
    "flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm "
    "cqm mpx rdt_a avx512f avx512dq rdseed adx smap clflushopt clwb intel_pt avx512cd avx512bw "
    "avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local "
    "dtherm ida arat pln pts pku ospke md_clear flush_l1d arch_capabilities"
)
"""/proc/cpuinfo flags of an Intel Xeon Gold 6130 (Skylake-SP) under Linux 5.15."""


@dataclass(slots=True)
class FakePci:
    """One PCI function to write.

    Attributes:
        address: canonical address.
        vendor, device: 4 hex digits.
        class_code: 6 hex digits.
        numa: ``numa_node`` (-1: none).
        driver: bound driver name or None.
        iommu_group: group number or None.
        netdev: interface name or None.
        total_vfs: ``sriov_totalvfs`` (0: not SR-IOV capable).
        vf_offset, vf_stride: SR-IOV routing offset and stride.
        vf_device: VF product id; VFs get ``vf_driver``.
        num_vfs: VFs to create.
        vf_driver: VF driver name.
        mdev_types: type id -> (name, available_instances, device_api).
        mdevs: (uuid, type id) of existing mdevs.
        nvidia_vfs: per VF index: (current type ID, {type ID: name}) — NVIDIA
            vGPU without mdev (an empty table is written header-only).
        vf_mdev_types: per VF index: the mdev types that VF offers (an A100's
            VFs are mdev parents), as ``mdev_types``.
        vf_mdevs: per VF index: its existing mdevs, as ``mdevs``.
    """

    address: str
    vendor: str
    device: str
    class_code: str
    numa: int = -1
    driver: str | None = None
    iommu_group: int | None = None
    netdev: str | None = None
    total_vfs: int = 0
    vf_offset: int = 16
    vf_stride: int = 1
    vf_device: str = ""
    num_vfs: int = 0
    vf_driver: str | None = None
    mdev_types: Mapping[str, tuple[str, int, str]] = field(default_factory=dict)
    mdevs: Sequence[tuple[str, str]] = ()
    nvidia_vfs: Mapping[int, tuple[int, Mapping[int, str]]] = field(default_factory=dict)
    vf_mdev_types: Mapping[int, Mapping[str, tuple[str, int, str]]] = field(default_factory=dict)
    vf_mdevs: Mapping[int, Sequence[tuple[str, str]]] = field(default_factory=dict)


@dataclass(slots=True)
class FakeHost:
    """A host to write.

    Attributes:
        cpus: (cpu, physical_package_id, core_id) of every online CPU.
        numa: (node id, cpus, MemTotal kB, {page size kB: pages}); empty: no
            node directory.
        memtotal_kb: MemTotal of /proc/meminfo.
        hugepages: host-wide pools {page size kB: pages}.
        vendor: cpuinfo ``vendor_id``.
        flags: cpuinfo ``flags``.
        mounts: lines of /proc/self/mounts.
        pci: PCI functions (PFs create their VFs).
    """

    cpus: Sequence[tuple[int, int, int]]
    numa: Sequence[tuple[int, Sequence[int], int, Mapping[int, int]]] = ()
    memtotal_kb: int = 16 * 1024 * 1024
    hugepages: Mapping[int, int] = field(default_factory=dict)
    vendor: str = "GenuineIntel"
    flags: str = SKYLAKE_FLAGS
    mounts: Sequence[str] = ("/dev/sda1 / ext4 rw,relatime 0 0",)
    pci: Sequence[FakePci] = ()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="ascii")


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def _pci_function(root: Path, fn: FakePci, physfn: str | None = None) -> None:
    d = root / "sys/bus/pci/devices" / fn.address
    _write(d / "vendor", f"0x{fn.vendor}")
    _write(d / "device", f"0x{fn.device}")
    _write(d / "class", f"0x{fn.class_code}")
    _write(d / "numa_node", str(fn.numa))
    if fn.driver:
        (root / "sys/bus/pci/drivers" / fn.driver).mkdir(parents=True, exist_ok=True)
        _link(d / "driver", f"../../drivers/{fn.driver}")
    if fn.iommu_group is not None:
        (root / "sys/kernel/iommu_groups" / str(fn.iommu_group)).mkdir(parents=True, exist_ok=True)
        _link(d / "iommu_group", f"../../../../kernel/iommu_groups/{fn.iommu_group}")
    if fn.netdev:
        (d / "net" / fn.netdev).mkdir(parents=True, exist_ok=True)
    if physfn:
        _link(d / "physfn", f"../{physfn}")
    if fn.total_vfs:
        _write(d / "sriov_totalvfs", str(fn.total_vfs))
        _write(d / "sriov_numvfs", str(fn.num_vfs))
        _write(d / "sriov_offset", str(fn.vf_offset))
        _write(d / "sriov_stride", str(fn.vf_stride))
        vfs = vf_addresses(fn.address, fn.num_vfs, fn.vf_offset, fn.vf_stride)
        for i, vf_address in enumerate(vfs):
            _link(d / f"virtfn{i}", f"../{vf_address}")
            vf = FakePci(
                vf_address,
                fn.vendor,
                fn.vf_device or fn.device,
                fn.class_code,
                numa=fn.numa,
                driver=fn.vf_driver,
                iommu_group=None if fn.iommu_group is None else 1000 + fn.iommu_group * 256 + i,
            )
            _pci_function(root, vf, physfn=fn.address)
            if i in fn.nvidia_vfs:
                current, creatable = fn.nvidia_vfs[i]
                rows = ["ID    : vGPU Name"] + [f"{k:<5} : {v}" for k, v in creatable.items()]
                nv = root / "sys/bus/pci/devices" / vf_address / "nvidia"
                _write(nv / "creatable_vgpu_types", "\n".join(rows))
                _write(nv / "current_vgpu_type", str(current))
            if i in fn.vf_mdev_types:
                _mdev_parent(root, vf_address, fn.numa, fn.vf_mdev_types[i], fn.vf_mdevs.get(i, ()))
    if fn.mdev_types:
        _mdev_parent(root, fn.address, fn.numa, fn.mdev_types, fn.mdevs)


def _mdev_parent(
    root: Path,
    address: str,
    numa: int,
    types: Mapping[str, tuple[str, int, str]],
    mdevs: Sequence[tuple[str, str]],
) -> None:
    m = root / "sys/class/mdev_bus" / address
    _write(m / "numa_node", str(numa))
    for type_id, (name, available, api) in types.items():
        t = m / "mdev_supported_types" / type_id
        _write(t / "name", name)
        _write(t / "available_instances", str(available))
        _write(t / "device_api", api)
    for uuid, type_id in mdevs:
        _link(m / uuid / "mdev_type", f"../mdev_supported_types/{type_id}")
        _link(
            root / "sys/bus/mdev/devices" / uuid,
            f"../../../class/mdev_bus/{address}/{uuid}",
        )


def write_sysfs(dest: str | os.PathLike[str], host: FakeHost) -> Path:
    """Write ``host`` as a sysfs + /proc tree below ``dest`` (created); returns it."""
    root = Path(dest)
    cpu = root / "sys/devices/system/cpu"
    _write(cpu / "online", format_cpu_set({c for c, _, _ in host.cpus}))
    for c, package, core in host.cpus:
        _write(cpu / f"cpu{c}/topology/physical_package_id", str(package))
        _write(cpu / f"cpu{c}/topology/core_id", str(core))
    for node, cpus, mem_kb, pools in host.numa:
        n = root / f"sys/devices/system/node/node{node}"
        _write(n / "cpulist", format_cpu_set(set(cpus)))
        _write(n / "meminfo", f"Node {node} MemTotal:       {mem_kb} kB\nNode {node} MemFree: 0 kB")
        for size, count in pools.items():
            _write(n / f"hugepages/hugepages-{size}kB/nr_hugepages", str(count))
    for size, count in host.hugepages.items():
        _write(root / f"sys/kernel/mm/hugepages/hugepages-{size}kB/nr_hugepages", str(count))
    _write(
        root / "proc/cpuinfo",
        f"processor\t: 0\nvendor_id\t: {host.vendor}\nflags\t\t: {host.flags}",
    )
    _write(root / "proc/meminfo", f"MemTotal:       {host.memtotal_kb} kB\nMemFree: 0 kB")
    _write(root / "proc/self/mounts", "\n".join(host.mounts))
    (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
    for fn in host.pci:
        _pci_function(root, fn)
    return root


def two_socket_cpus(sockets: int, cores: int, threads: int) -> list[tuple[int, int, int]]:
    """Linux's numbering of ``sockets`` x ``cores`` x ``threads``: first threads of
    every core of every socket, then the second threads (cpu = thread * total_cores + ...)."""
    out = []
    for t in range(threads):
        for s in range(sockets):
            for c in range(cores):
                out.append((t * sockets * cores + s * cores + c, s, c))
    return sorted(out)


def large_host(pfs: int = 8, vfs: int = 128, gpus: int = 8, cells: int = 4) -> FakeHost:
    """The benchmark host: ``pfs`` X710-class PFs with ``vfs`` VFs each, ``gpus``
    Tesla M60-class GPUs with four mdev types, ``cells`` NUMA cells of 16 cores x 2 threads."""
    cpus = two_socket_cpus(cells, 16, 2)
    per_cell = {s: [c for c, p, _ in cpus if p == s] for s in range(cells)}
    numa = [(s, per_cell[s], 64 * 1024 * 1024, {2048: 1024, 1048576: 8}) for s in range(cells)]
    pci = []
    for i in range(pfs):
        bus = 0x20 + i * 0x10
        pci.append(
            FakePci(
                f"0000:{bus:02x}:00.0",
                "8086",
                "1572",
                "020000",
                numa=i % cells,
                driver="i40e",
                iommu_group=10 + i,
                netdev=f"ens{i + 1}f0",
                total_vfs=128,
                vf_offset=16,
                vf_device="154c",
                num_vfs=vfs,
                vf_driver="iavf",
            )
        )
    types = {
        "nvidia-35": ("GRID M60-0B", 16, "vfio-pci"),
        "nvidia-36": ("GRID M60-0Q", 16, "vfio-pci"),
        "nvidia-37": ("GRID M60-1A", 8, "vfio-pci"),
        "nvidia-38": ("GRID M60-1B", 8, "vfio-pci"),
    }
    for g in range(gpus):
        pci.append(
            FakePci(
                f"0000:{0xA0 + g:02x}:00.0",
                "10de",
                "13f2",
                "030000",
                numa=g % cells,
                driver="nvidia",
                iommu_group=100 + g,
                mdev_types=types,
            )
        )
    return FakeHost(
        cpus=cpus,
        numa=numa,
        memtotal_kb=cells * 64 * 1024 * 1024 - 2_000_000,
        hugepages={2048: 1024 * cells, 1048576: 8 * cells},
        pci=pci,
    )
