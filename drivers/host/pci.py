"""PCI functions: what ``/sys/bus/pci/devices/*`` says about each one.

Enumeration uses pyudev (subsystem ``pci``) on the real host and a directory
listing of ``{root}/sys/bus/pci/devices`` on a fixture, because libudev always
reads the real /sys; attributes are read from sysfs in both cases, so both
give the same records (kernel ABI: Documentation/ABI/testing/sysfs-bus-pci).

This module only reads; which functions are offered, and as what, is decided
by :mod:`drivers.host.passthrough` and :mod:`drivers.host.sriov`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from drivers.host.sysfs import Root, SysfsError, SysfsReader, as_reader, natural_key
from drivers.records import normalize_pci_address

PCI_DIR = "sys/bus/pci/devices"
_ADDRESS_RE = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_ANY_RE = re.compile(r".+")
_VIRTFN_RE = re.compile(r"virtfn\d+")
_NAME_RE = re.compile(r"[^.].*")


@dataclass(frozen=True, slots=True)
class PciFunction:
    """One PCI function.

    Attributes:
        address: canonical address ``dddd:bb:ss.f``.
        vendor_id: 4 lower-case hex digits (``vendor`` without ``0x``).
        product_id: 4 lower-case hex digits (``device``).
        class_code: 6 lower-case hex digits (``class``), e.g. ``020000``.
        driver: name of the bound driver, or None.
        numa_node: NUMA node, or None (``-1`` or absent).
        iommu_group: IOMMU group number, or None (no IOMMU).
        total_vfs: ``sriov_totalvfs``; 0 when the function cannot do SR-IOV.
        vf_addresses: addresses of its VFs (``virtfn*`` links, in index order).
        physfn: the PF's address when this function is a VF, else None.
        netdevs: network interface names (``net/*``).
        nvidia_vgpu: this VF has ``nvidia/creatable_vgpu_types`` (NVIDIA
            vGPU on SR-IOV without mdev).
        vpd_serial: the card serial number of the function's own PCI VPD (the
            ``SN`` keyword; libvirt's ``<capability type='vpd'>`` read-only
            ``<serial_number>``), or None when it has none or it was not read.
    """

    address: str
    vendor_id: str
    product_id: str
    class_code: str
    driver: str | None = None
    numa_node: int | None = None
    iommu_group: int | None = None
    total_vfs: int = 0
    vf_addresses: tuple[str, ...] = ()
    physfn: str | None = None
    netdevs: tuple[str, ...] = ()
    nvidia_vgpu: bool = False
    vpd_serial: str | None = None

    @property
    def is_vf(self) -> bool:
        """True for an SR-IOV virtual function."""
        return self.physfn is not None


def _hex_id(digits: int) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = int(text, 16)
        if not 0 <= value < 16**digits:
            raise ValueError(f"more than {digits} hex digits")
        return f"{value:0{digits}x}"

    return parse


_HEX4 = _hex_id(4)
_HEX6 = _hex_id(6)


def _numa(text: str) -> int | None:
    value = int(text)
    return None if value < 0 else value


def _link_address(reader: SysfsReader, rel: str) -> str | None:
    name = reader.link_name(rel)
    if name is None:
        return None
    try:
        return normalize_pci_address(name)
    except ValueError:
        raise SysfsError(reader.path(rel), f"garbled (link to {name!r})") from None


def enumerate_pci(root: Root) -> list[str]:
    """Addresses (sysfs names) of every PCI function, sorted.

    pyudev on the real host, a listing of ``sys/bus/pci/devices`` otherwise.

    Raises:
        SysfsError: the listing is unreadable.
    """
    reader = as_reader(root)
    if reader.is_live:
        import pyudev  # imported here: fixture-only runs need no libudev

        context = pyudev.Context()
        names = sorted(d.sys_name for d in context.list_devices(subsystem="pci"))
        if reader.recorder is not None:
            reader.recorder.dirs.setdefault(PCI_DIR, set()).update(names)
        return names
    return reader.listdir(PCI_DIR, _ANY_RE) or []


def read_pci_function(root: Root, name: str) -> PciFunction:
    """Read one function's attributes from ``sys/bus/pci/devices/{name}``.

    Raises:
        SysfsError: the name is not a PCI address, or a file is missing
            (vendor, device, class), unreadable or garbled.
    """
    reader = as_reader(root)
    base = f"{PCI_DIR}/{name}"
    if not _ADDRESS_RE.fullmatch(name):
        raise SysfsError(reader.path(base), "not a PCI address")
    vendor = reader.parse(f"{base}/vendor", _HEX4)
    product = reader.parse(f"{base}/device", _HEX4)
    class_code = reader.parse(f"{base}/class", _HEX6)
    assert vendor is not None and product is not None and class_code is not None
    numa = reader.parse(f"{base}/numa_node", _numa, optional=True)
    group = reader.link_name(f"{base}/iommu_group")
    physfn = _link_address(reader, f"{base}/physfn")
    total_vfs = 0 if physfn else reader.optional_integer(f"{base}/sriov_totalvfs") or 0
    vfs: tuple[str, ...] = ()
    if total_vfs:
        links = reader.listdir(base, _VIRTFN_RE) or []
        vfs = tuple(
            a
            for a in (_link_address(reader, f"{base}/{n}") for n in sorted(links, key=natural_key))
            if a is not None
        )
        num_vfs = reader.integer(f"{base}/sriov_numvfs")
        if num_vfs != len(vfs):
            raise SysfsError(
                reader.path(f"{base}/sriov_numvfs"),
                f"garbled (says {num_vfs} VFs but there are {len(vfs)} virtfn links)",
            )
    nvidia = (
        bool(physfn) and reader.optional_text(f"{base}/nvidia/creatable_vgpu_types") is not None
    )
    try:
        iommu_group = int(group) if group is not None else None
    except ValueError:
        raise SysfsError(reader.path(f"{base}/iommu_group"), f"garbled (group {group!r})") from None
    return PciFunction(
        address=normalize_pci_address(name),
        vendor_id=vendor,
        product_id=product,
        class_code=class_code,
        driver=reader.link_name(f"{base}/driver"),
        numa_node=numa,
        iommu_group=iommu_group,
        total_vfs=total_vfs,
        vf_addresses=vfs,
        physfn=physfn,
        netdevs=tuple(reader.listdir(f"{base}/net", _NAME_RE) or ()),
        nvidia_vgpu=nvidia,
    )


def read_pci_functions(root: Root) -> dict[str, PciFunction]:
    """Every readable PCI function, by address.

    A function whose files are missing, unreadable or garbled is warned about
    (naming the path) and left out; so are the VFs of a PF left out, since
    what they belong to is unknown.
    """
    reader = as_reader(root)
    try:
        names = enumerate_pci(reader)
    except SysfsError as exc:
        reader.skip(exc, "every PCI device")
        return {}
    functions: dict[str, PciFunction] = {}
    for name in names:
        try:
            fn = read_pci_function(reader, name)
        except SysfsError as exc:
            reader.skip(exc, f"PCI device {name}")
            continue
        functions[fn.address] = fn
    lost_pfs = {f.physfn for f in functions.values() if f.physfn and f.physfn not in functions}
    return {a: f for a, f in functions.items() if f.physfn not in lost_pfs}
