"""Domains: what one libvirt domain holds of the host.

Source: ``virDomainGetXMLDesc`` (format: libvirt's formatdomain.html). Read:

* ``<uuid>``, ``<name>``; ``<vcpu>`` (the maximum: what the domain may use);
  ``<memory unit='KiB'>`` (MiB, rounded up);
* dedicated CPUs: every vCPU has a ``<cputune><vcpupin>`` on exactly one
  host CPU (how nova pins ``hw:cpu_policy=dedicated`` guests); the pins and
  ``<emulatorpin>`` are kept for :mod:`drivers.libvirt.cpu_policy` (mixed
  guests, isolated emulator threads);
* memory encryption: ``<launchSecurity>`` (:func:`.mem_encryption.guest_model`);
* NUMA affinity: host cells of ``<numatune><memnode nodeset>`` or, without
  those, ``<numatune><memory nodeset>``; the guest's own cells
  (``<cpu><numa><cell id cpus memory unit>``), each with the host cells of its
  ``<memnode cellid>`` (how nova 34 lays a guest over host cells,
  ``_get_guest_numa_config``);
* disks (``device='disk'``): the root disk is the one with the lowest
  ``<boot order>``, else the first; it is a volume when its type is
  ``network`` or ``volume``. Local disks (``file``, ``block``) are measured
  by the driver (``virDomainGetBlockInfo``) when no flavor says their size;
* ``<hostdev type='pci'>`` and ``<interface type='hostdev'>`` source
  addresses (whole devices and VFs), ``<hostdev type='mdev'>`` UUIDs, and
  the interfaces of ``<interface type='direct'>`` (macvtap on a VF).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from drivers.host.cpuset import parse_cpu_spec
from drivers.libvirt.mem_encryption import guest_model
from drivers.libvirt.xmlutil import LibvirtXMLError, parse_xml, to_int

ACCOUNTED_HOSTDEV_TYPES = frozenset({"pci", "mdev"})
"""``<hostdev type>`` values that hold Placement resources (others are reported once)."""

_VOLUME_DISK_TYPES = frozenset({"network", "volume"})
_LOCAL_DISK_TYPES = frozenset({"file", "block"})
_UNIT_KIB = {
    "b": 1 / 1024,
    "bytes": 1 / 1024,
    "KiB": 1,
    "k": 1,
    "MiB": 1024,
    "M": 1024,
    "GiB": 1024**2,
    "G": 1024**2,
}


@dataclass(frozen=True, slots=True)
class Disk:
    """One ``<disk device='disk'>``.

    Attributes:
        target: the guest device name (``vda``), what ``blockInfo`` takes.
        type: ``file``, ``block``, ``network``, ``volume`` ...
        source: file path, device, or ``protocol:name`` for network disks ("" if none).
        boot_order: ``<boot order>``, or None.
    """

    target: str
    type: str
    source: str
    boot_order: int | None = None

    @property
    def is_volume(self) -> bool:
        """A network or storage-pool volume (the instance booted from it is boot-from-volume)."""
        return self.type in _VOLUME_DISK_TYPES

    @property
    def is_local(self) -> bool:
        """A file or block device on this host."""
        return self.type in _LOCAL_DISK_TYPES


@dataclass(frozen=True, slots=True)
class GuestCell:
    """One of the guest's NUMA cells (``<cpu><numa><cell>``).

    Attributes:
        id: the guest cell's ``id``.
        cpus: its vCPUs (``cpus``).
        memory_mb: its memory, MiB (rounded up).
        host_cells: host cells of its ``<numatune><memnode cellid=id nodeset>``;
            empty when no memnode names it.
    """

    id: int
    cpus: frozenset[int]
    memory_mb: int
    host_cells: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class DomainDef:
    """What one domain's XML says it holds.

    Attributes:
        uuid: the domain UUID (the Placement consumer), lower-case.
        name: the domain name.
        vcpus: vCPU count (maximum).
        memory_mb: memory, MiB (rounded up).
        pinned: every vCPU is pinned to one host CPU (dedicated, PCPU).
        numa_cells: host NUMA cells its memory is bound to, sorted.
        disks: its ``device='disk'`` disks, in document order.
        root: the root disk, or None when it has no disk.
        pci_addresses: PCI addresses of hostdevs and hostdev interfaces.
        mdev_uuids: mdev UUIDs of mdev hostdevs, lower-case.
        direct_interfaces: host interface names of ``type='direct'`` interfaces.
        other_hostdevs: ``<hostdev type>`` values that hold no Placement resource
            (usb, scsi, ...) or that are unknown.
        vcpu_pins: vCPU number -> host CPUs of its ``<vcpupin>``.
        emulator_pin: host CPUs of ``<emulatorpin>`` (empty when none).
        mem_encryption: ``amd_sev``, ``amd_sev_es``, ``amd_sev_snp``, another
            ``<launchSecurity type>``, or "".
        guest_cells: the guest's NUMA cells, by id (empty: it has none).
    """

    uuid: str
    name: str
    vcpus: int
    memory_mb: int
    pinned: bool = False
    numa_cells: tuple[int, ...] = ()
    disks: tuple[Disk, ...] = ()
    root: Disk | None = None
    pci_addresses: tuple[str, ...] = ()
    mdev_uuids: tuple[str, ...] = ()
    direct_interfaces: tuple[str, ...] = ()
    other_hostdevs: tuple[str, ...] = ()
    vcpu_pins: Mapping[int, frozenset[int]] = field(default_factory=lambda: MappingProxyType({}))
    emulator_pin: frozenset[int] = frozenset()
    mem_encryption: str = ""
    guest_cells: tuple[GuestCell, ...] = ()


def _mib(amount: str | None, unit: str, what: str, field: str) -> int:
    """``amount`` of ``unit`` (libvirt's units, KiB when none) in MiB, rounded up."""
    if unit not in _UNIT_KIB:
        raise LibvirtXMLError(what, f"{field} unit {unit!r} is not a unit libvirt writes")
    return math.ceil(to_int(amount, what, field) * _UNIT_KIB[unit] / 1024)


def _memory_mb(elem: ET.Element | None, what: str) -> int:
    if elem is None:
        raise LibvirtXMLError(what, "no <memory>")
    return _mib(elem.text, elem.get("unit", "KiB"), what, "memory")


def _pci_address(elem: ET.Element, what: str) -> str:
    try:
        return (
            f"{int(elem.get('domain', '0'), 16):04x}:{int(elem.get('bus', ''), 16):02x}:"
            f"{int(elem.get('slot', ''), 16):02x}.{int(elem.get('function', ''), 16):x}"
        )
    except ValueError:
        raise LibvirtXMLError(what, f"garbled PCI address {dict(elem.attrib)}") from None


def _cells(numatune: ET.Element | None, what: str) -> tuple[int, ...]:
    if numatune is None:
        return ()
    sets = [m.get("nodeset", "") for m in numatune.findall("memnode")]
    if not any(sets):
        mem = numatune.find("memory")
        sets = [mem.get("nodeset", "")] if mem is not None else []
    cells: set[int] = set()
    for text in sets:
        if not text:
            continue
        try:
            cells |= parse_cpu_spec(text)
        except ValueError as exc:
            raise LibvirtXMLError(what, f"<numatune> nodeset {text!r}: {exc}") from None
    return tuple(sorted(cells))


def _guest_cells(root: ET.Element, what: str) -> tuple[GuestCell, ...]:
    """The guest's NUMA cells with the host cells their ``<memnode>`` binds them to."""
    memnodes: dict[int, frozenset[int]] = {}
    for node in root.findall("numatune/memnode"):
        cell = to_int(node.get("cellid"), what, "memnode cellid")
        try:
            memnodes[cell] = parse_cpu_spec(node.get("nodeset", ""))
        except ValueError as exc:
            raise LibvirtXMLError(
                what, f"<memnode cellid={cell}> nodeset {node.get('nodeset')!r}: {exc}"
            ) from None
    cells = []
    for index, elem in enumerate(root.findall("cpu/numa/cell")):
        cid = to_int(elem.get("id", str(index)), what, "numa cell id")
        try:
            cpus = parse_cpu_spec(elem.get("cpus", ""))
        except ValueError as exc:
            raise LibvirtXMLError(
                what, f"<numa><cell id={cid}> cpus {elem.get('cpus')!r}: {exc}"
            ) from None
        memory = _mib(elem.get("memory"), elem.get("unit", "KiB"), what, f"numa cell {cid} memory")
        cells.append(GuestCell(cid, cpus, memory, memnodes.get(cid, frozenset())))
    return tuple(sorted(cells, key=lambda c: c.id))


def _pins(root: ET.Element, what: str) -> tuple[dict[int, frozenset[int]], frozenset[int]]:
    """``({vcpu: host CPUs}, emulator host CPUs)`` of ``<cputune>``."""
    pins: dict[int, frozenset[int]] = {}
    for pin in root.findall("cputune/vcpupin"):
        try:
            pins[to_int(pin.get("vcpu"), what, "vcpupin vcpu")] = parse_cpu_spec(
                pin.get("cpuset", "")
            )
        except ValueError as exc:
            raise LibvirtXMLError(what, f"<vcpupin cpuset={pin.get('cpuset')!r}>: {exc}") from None
    emulator = root.find("cputune/emulatorpin")
    text = emulator.get("cpuset", "") if emulator is not None else ""
    try:
        return pins, parse_cpu_spec(text)
    except ValueError as exc:
        raise LibvirtXMLError(what, f"<emulatorpin cpuset={text!r}>: {exc}") from None


def _disk(elem: ET.Element, what: str) -> Disk:
    target = elem.find("target")
    dev = target.get("dev", "") if target is not None else ""
    if not dev:
        raise LibvirtXMLError(what, "a <disk> has no <target dev>")
    src = elem.find("source")
    source = ""
    if src is not None:
        source = (
            src.get("file")
            or src.get("dev")
            or (f"{src.get('protocol')}:{src.get('name', '')}" if src.get("protocol") else "")
            or (f"{src.get('pool')}/{src.get('volume')}" if src.get("pool") else "")
        )
    boot = elem.find("boot")
    order = to_int(boot.get("order"), what, f"disk {dev} boot order") if boot is not None else None
    return Disk(dev, elem.get("type", "file"), source, order)


def _disks(root: ET.Element, what: str) -> tuple[tuple[Disk, ...], Disk | None]:
    """The domain's disks (not CD-ROMs or floppies) and its root disk.

    The root disk is the one with the lowest ``<boot order>``, else the first
    disk (libvirt boots the first disk when no order is given).
    """
    disks = tuple(
        _disk(d, what) for d in root.findall("devices/disk") if d.get("device", "disk") == "disk"
    )
    ordered = [d for d in disks if d.boot_order is not None]
    if ordered:
        return disks, min(ordered, key=lambda d: d.boot_order or 0)
    return disks, (disks[0] if disks else None)


def _hostdevs(
    root: ET.Element, what: str
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """``<hostdev>`` devices: (PCI addresses, mdev UUIDs, the types of any other kind)."""
    pci: list[str] = []
    mdevs: list[str] = []
    others: list[str] = []
    for hd in root.findall("devices/hostdev"):
        kind = hd.get("type", "")
        address = hd.find("source/address")
        if kind == "pci" and address is not None:
            pci.append(_pci_address(address, what))
        elif kind == "mdev" and address is not None and address.get("uuid"):
            mdevs.append(address.get("uuid", "").lower())
        else:
            others.append(kind or "(none)")
    return tuple(pci), tuple(mdevs), tuple(others)


def _interfaces(root: ET.Element, what: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``<interface>`` devices: (PCI addresses of ``type=hostdev`` ones, host netdevs of
    ``type=direct`` (macvtap) ones)."""
    pci: list[str] = []
    direct: list[str] = []
    for iface in root.findall("devices/interface"):
        kind = iface.get("type")
        address = iface.find("source/address")
        if kind == "hostdev" and address is not None and address.get("type", "pci") == "pci":
            pci.append(_pci_address(address, what))
        elif kind == "direct":
            src = iface.find("source")
            if src is not None and src.get("dev"):
                direct.append(src.get("dev", ""))
    return tuple(pci), tuple(direct)


def parse_domain(text: str, what: str = "domain") -> DomainDef:
    """Parse one ``virDomainGetXMLDesc`` document (see :func:`domain_from_element`).

    Raises:
        LibvirtXMLError: unparsable, or see :func:`domain_from_element`.
    """
    return domain_from_element(parse_xml(text, what), what)


def domain_from_element(root: ET.Element, what: str = "domain") -> DomainDef:
    """What a parsed ``<domain>`` holds.

    Args:
        root: the ``<domain>`` element.
        what: the domain as listed (``domain vm-1 (uuid)``), for messages.

    Raises:
        LibvirtXMLError: not a domain, or a field the driver needs (uuid,
            vcpu, memory, a device address) missing or garbled.
    """
    if root.tag != "domain":
        raise LibvirtXMLError(what, f"<{root.tag}> is not a <domain>")
    uuid = (root.findtext("uuid") or "").strip().lower()
    name = (root.findtext("name") or "").strip()
    if not uuid:
        raise LibvirtXMLError(what, "no <uuid>")
    what = f"domain {name} ({uuid})"
    vcpus = to_int(root.findtext("vcpu"), what, "vcpu")
    disks, root_disk = _disks(root, what)
    pci, mdevs, others = _hostdevs(root, what)
    interface_pci, direct = _interfaces(root, what)
    pins, emulator = _pins(root, what)
    return DomainDef(
        uuid=uuid,
        name=name,
        vcpus=vcpus,
        memory_mb=_memory_mb(root.find("memory"), what),
        pinned=vcpus > 0 and all(len(pins.get(v, ())) == 1 for v in range(vcpus)),
        numa_cells=_cells(root.find("numatune"), what),
        disks=disks,
        root=root_disk,
        pci_addresses=pci + interface_pci,
        mdev_uuids=mdevs,
        direct_interfaces=direct,
        other_hostdevs=others,
        vcpu_pins=MappingProxyType(pins),
        emulator_pin=emulator,
        mem_encryption=guest_model(root, what),
        guest_cells=_guest_cells(root, what),
    )
