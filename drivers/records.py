"""Plain records that drivers produce: what a host has and what runs on it.

Drivers (fake, host sysfs, libvirt) fill these in and know nothing of
Placement; ``agent.shape.layout`` alone turns them into resource providers and
``agent.shape.planning`` into allocations (DESIGN.md: "discovery produces plain
data; one place turns data into providers").

Units: memory in MiB, disk in GiB (``swap_mb`` in MiB as flavors give it),
CPUs and devices as counts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

_PCI_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,4}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<slot>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$"
)


def normalize_pci_address(address: str) -> str:
    """Canonical PCI address ``dddd:bb:ss.f`` (lower-case hex, domain 0000 if absent).

    Raises:
        ValueError: ``address`` is not a PCI address.
    """
    m = _PCI_RE.match(address.strip())
    if not m:
        raise ValueError(f"{address!r} is not a PCI address (expected dddd:bb:ss.f)")
    domain = int(m["domain"] or "0", 16)
    return f"{domain:04x}:{int(m['bus'], 16):02x}:{int(m['slot'], 16):02x}.{m['function']}"


def pci_address_slug(address: str) -> str:
    """``0000:af:00.0`` -> ``0000_af_00_0``: the address as a provider-name suffix."""
    return normalize_pci_address(address).replace(":", "_").replace(".", "_")


def pci_routing_id(address: str) -> int:
    """The 16-bit routing ID (bus << 8 | slot << 3 | function) of an address."""
    a = normalize_pci_address(address)
    bus, slot, function = int(a[5:7], 16), int(a[8:10], 16), int(a[11])
    return bus << 8 | slot << 3 | function


def vf_addresses(pf_address: str, count: int, offset: int, stride: int) -> tuple[str, ...]:
    """Addresses of a PF's first ``count`` VFs by the SR-IOV rule.

    VF *i* has routing ID ``PF RID + offset + i * stride`` (PCIe SR-IOV
    spec; sysfs ``sriov_offset`` / ``sriov_stride``), in the PF's domain.

    Raises:
        ValueError: a VF would fall beyond bus 0xff.
    """
    domain = normalize_pci_address(pf_address)[:4]
    base = pci_routing_id(pf_address) + offset
    out = []
    for i in range(count):
        rid = base + i * stride
        if rid > 0xFFFF:
            raise ValueError(
                f"VF {i} of {pf_address} falls beyond bus ff (offset/stride too large)"
            )
        out.append(f"{domain}:{rid >> 8:02x}:{(rid >> 3) & 0x1F:02x}.{rid & 7}")
    return tuple(out)


def cells_mib(kib: Sequence[int]) -> tuple[int, ...]:
    """Whole MiB per NUMA cell from KiB per cell, summing to ``sum(kib) // 1024``.

    Rounding each cell down on its own loses up to 1 MiB per cell, so the
    cells' MEMORY_MB would sum to less than the host's (``MemTotal // 1024``,
    which the flat layout reports) though the cells' KiB add up to
    MemTotal. Each cell gets instead the whole MiB reached by the running
    total minus those reached before it (largest-remainder style, in cell
    order), which keeps every cell within 1 MiB of its exact size.

    Args:
        kib: memory of each cell, KiB, in cell order.

    Returns:
        MiB of each cell, same order.
    """
    out = []
    before = 0
    running = 0
    for k in kib:
        running += k
        out.append(running // 1024 - before)
        before = running // 1024
    return tuple(out)


@dataclass(frozen=True, slots=True)
class NumaCell:
    """One NUMA cell.

    Attributes:
        id: the cell number (``node{N}`` in sysfs).
        vcpus: CPUs of this cell offered as shared CPUs (VCPU).
        pcpus: CPUs of this cell offered as dedicated CPUs (PCPU).
        memory_mb: RAM of the cell, MiB.
        hugepages: page size in KiB -> number of pages in the cell.
    """

    id: int
    vcpus: int
    pcpus: int
    memory_mb: int
    hugepages: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class PciDevice:
    """A whole PCI device offered for passthrough.

    Attributes:
        address: canonical PCI address.
        vendor_id: 4 hex digits, lower-case.
        product_id: 4 hex digits, lower-case.
        numa_node: the NUMA cell it is attached to, or None.
        resource_class: class to report; None means the default
            ``CUSTOM_PCI_{VENDOR}_{PRODUCT}``.
        traits: extra traits of its provider.
        remote_managed: the device spec tags it ``remote_managed``.
        live_migratable: the device spec tags it ``live_migratable``.
        one_time_use: the device spec tags it ``one_time_use``.
        in_use: an instance on this host holds it now (a domain's hostdev);
            drivers fill it in only for ``one_time_use`` devices.
        physnet: the device spec's ``physical_network`` (a NIC for neutron's
            ``direct-physical`` ports, e.g. a PF named whole), or None.
    """

    address: str
    vendor_id: str
    product_id: str
    numa_node: int | None = None
    resource_class: str | None = None
    traits: frozenset[str] = frozenset()
    remote_managed: bool = False
    live_migratable: bool = False
    one_time_use: bool = False
    in_use: bool = False
    physnet: str | None = None


@dataclass(frozen=True, slots=True)
class SriovPF:
    """An SR-IOV physical function and the VFs it has configured.

    Attributes:
        address: the PF's canonical PCI address.
        total_vfs: ``sriov_totalvfs``, the most VFs the PF can have.
        vf_addresses: addresses of the configured VFs (``sriov_numvfs`` of them).
        numa_node: the NUMA cell, or None.
        physnet: the physical network from the device spec, or None.
        netdev: the PF's network interface name, or None.
        traits: extra traits (``HW_NIC_*``).
        vf_vendor_id: the VFs' vendor id (4 hex digits), or "" when unknown.
        vf_product_id: the VFs' product id (4 hex digits), or "" when unknown.
        resource_class: the device spec's ``resource_class`` for the VFs, or
            None (nova's PCI-in-placement class then is
            ``CUSTOM_PCI_{VF VENDOR}_{VF PRODUCT}``).
        spec_traits: the device spec's own ``traits`` (without ``HW_NIC_*``
            the driver adds), for nova's PCI-in-placement providers.
        remote_managed: the device spec tags its VFs ``remote_managed``.
        live_migratable: the device spec tags its VFs ``live_migratable``.
    """

    address: str
    total_vfs: int
    vf_addresses: tuple[str, ...]
    numa_node: int | None = None
    physnet: str | None = None
    netdev: str | None = None
    traits: frozenset[str] = frozenset()
    vf_vendor_id: str = ""
    vf_product_id: str = ""
    resource_class: str | None = None
    spec_traits: frozenset[str] = frozenset()
    remote_managed: bool = False
    live_migratable: bool = False

    @property
    def num_vfs(self) -> int:
        """VFs configured now."""
        return len(self.vf_addresses)


@dataclass(frozen=True, slots=True)
class MdevType:
    """One mediated device type a GPU supports (``mdev_supported_types/<id>``).

    Attributes:
        id: the type id, e.g. ``nvidia-35``.
        name: the human name, e.g. ``GRID M60-2Q``.
        available_instances: how many more of this type can be created.
        device_api: e.g. ``vfio-pci``.
    """

    id: str
    name: str
    available_instances: int
    device_api: str = "vfio-pci"


@dataclass(frozen=True, slots=True)
class Mdev:
    """An existing mediated device.

    Attributes:
        uuid: the mdev UUID (what a domain's hostdev names).
        type_id: its mdev type.
        parent: canonical PCI address of the physical GPU holding it.
    """

    uuid: str
    type_id: str
    parent: str


@dataclass(frozen=True, slots=True)
class Gpu:
    """A physical GPU that can be carved into vGPUs.

    Attributes:
        address: canonical PCI address.
        mdev_types: type id -> :class:`MdevType`.
        mdevs: mdevs already created on this GPU.
        numa_node: the NUMA cell, or None.
    """

    address: str
    mdev_types: Mapping[str, MdevType]
    mdevs: tuple[Mdev, ...] = ()
    numa_node: int | None = None


@dataclass(frozen=True, slots=True)
class MemEncryption:
    """A memory encryption model guests can use: ``model`` (``amd_sev``, ``amd_sev_es``,
    ``amd_sev_snp``, ``intel_tdx``: nova's names), ``slots`` (how many such guests may run
    at once, the MEM_ENCRYPTION_CONTEXT total) and the model's ``trait``
    (``HW_CPU_X86_AMD_SEV`` ... ``HW_CPU_X86_INTEL_TDX``)."""

    model: str
    slots: int
    trait: str


@dataclass(frozen=True, slots=True)
class HostResources:
    """Everything one node (nodename) offers, as the driver found it.

    Attributes:
        nodename: the compute node's name (root provider name).
        vcpus: CPUs offered as shared CPUs (VCPU), before reserved_host_cpus.
        pcpus: CPUs offered as dedicated CPUs (PCPU).
        memory_mb: RAM, MiB, before reserved_host_memory_mb.
        disk_gb: local disk for instances, GiB, before reserved_host_disk_mb.
        shared_storage: instance disks live on shared storage (no DISK_GB
            on the compute node; compute-node-inventory.rst 4b).
        traits: traits of the compute node (CPU features, COMPUTE_*).
        numa_cells: NUMA cells; empty when the host has none or hides them.
        pci_devices: whole devices for passthrough.
        sriov_pfs: SR-IOV PFs.
        gpus: vGPU-capable physical GPUs.
        image_cache_gb: disk the image cache takes on the instances' file
            system, GiB rounded up (nova: reserved on DISK_GB by a workaround).
        pmem_namespaces: ``[libvirt] pmem_namespaces`` found on the host:
            label -> namespace names.
        mem_encryption: memory encryption models offered (AMD SEV, SEV-ES, SEV-SNP, Intel TDX).
    """

    nodename: str
    vcpus: int
    pcpus: int
    memory_mb: int
    disk_gb: int
    shared_storage: bool = False
    traits: frozenset[str] = frozenset()
    numa_cells: tuple[NumaCell, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()
    sriov_pfs: tuple[SriovPF, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    image_cache_gb: int = 0
    pmem_namespaces: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    mem_encryption: tuple[MemEncryption, ...] = ()

    def pf_of_vf(self) -> dict[str, str]:
        """VF address -> its PF's address, for every configured VF."""
        return {vf: pf.address for pf in self.sriov_pfs for vf in pf.vf_addresses}

    def gpu_of_mdev(self) -> dict[str, str]:
        """mdev UUID -> the address of the GPU that holds it."""
        return {m.uuid: g.address for g in self.gpus for m in g.mdevs}


@dataclass(frozen=True, slots=True)
class Flavor:
    """The amounts an instance was built with.

    Attributes:
        vcpus: CPU count.
        memory_mb: RAM, MiB.
        root_gb: root disk, GiB (ignored when booted from volume).
        ephemeral_gb: ephemeral disk, GiB.
        swap_mb: swap, MiB (counted in whole GiB, rounded up, as nova does).
        name: flavor name, for display only.
    """

    vcpus: int
    memory_mb: int
    root_gb: int = 0
    ephemeral_gb: int = 0
    swap_mb: int = 0
    name: str = ""


@dataclass(frozen=True, slots=True)
class GuestCellShare:
    """What one of a guest's NUMA cells holds of one host cell.

    Attributes:
        host_cell: the host NUMA cell it is bound to.
        vcpus: its vCPUs, shared and dedicated.
        dedicated: of those, the vCPUs on dedicated host CPUs (PCPU).
        memory_mb: its memory, MiB.
    """

    host_cell: int
    vcpus: int
    dedicated: int
    memory_mb: int


@dataclass(frozen=True, slots=True)
class Instance:
    """An instance running (or defined) on a node: one Placement consumer.

    Attributes:
        uuid: the consumer UUID.
        project_id: owning project.
        user_id: owning user.
        flavor: its :class:`Flavor`.
        boot_from_volume: root disk is a volume (root_gb counts as 0).
        pinned: dedicated CPUs (allocates PCPU instead of VCPU).
        dedicated_vcpus: of a mixed-policy instance (``hw:cpu_policy=mixed``), the vCPUs
            on dedicated host CPUs (PCPU; the rest VCPU); 0 otherwise.
        emulator_isolated: its emulator threads have a dedicated host CPU of their own
            (``hw:emulator_threads_policy=isolate``: one PCPU more).
        mem_encryption: its memory encryption model (``amd_sev`` ... ``intel_tdx``), or "".
        numa_cells: NUMA cells its CPUs and memory are pinned to; empty
            when it has no NUMA affinity.
        guest_cells: how its own NUMA cells lie on the host's, guest cell 0 first (the
            libvirt driver: the domain's ``<cpu><numa>``, ``<numatune>`` memnodes and
            pins); empty when the driver does not know (its CPUs and memory are then
            split evenly over ``numa_cells``).
        pci_devices: PCI addresses assigned to it (whole devices or VFs).
        mdevs: mdev UUIDs assigned to it.
        name: display name.
    """

    uuid: str
    project_id: str
    user_id: str
    flavor: Flavor
    boot_from_volume: bool = False
    pinned: bool = False
    numa_cells: tuple[int, ...] = ()
    pci_devices: tuple[str, ...] = ()
    mdevs: tuple[str, ...] = ()
    name: str = ""
    dedicated_vcpus: int = 0
    emulator_isolated: bool = False
    mem_encryption: str = ""
    guest_cells: tuple[GuestCellShare, ...] = ()
