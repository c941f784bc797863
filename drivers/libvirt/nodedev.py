"""Node devices: PCI functions, SR-IOV PFs and VFs, mdev types, existing mdevs.

Source: ``virConnectListAllDevices`` and ``virNodeDeviceGetXMLDesc`` (format:
libvirt's formatnode.html). The parts read::

    <device><name>pci_0000_3b_00_0</name><parent/>
      <driver><name>i40e</name></driver>
      <capability type='pci'>
        <class>0x020000</class><domain/><bus/><slot/><function/>
        <product id='0x1572'/><vendor id='0x8086'/>
        <capability type='virt_functions' maxCount='64'><address .../>...</capability>
        <capability type='phys_function'><address .../></capability>
        <capability type='mdev_types'>
          <type id='nvidia-35'><name/><deviceAPI/><availableInstances/></type>
        </capability>
        <iommuGroup number='40'/><numa node='1'/>
      </capability></device>
    <device><name>mdev_UUID</name><parent>pci_...</parent>
      <capability type='mdev'><type id='nvidia-35'/><uuid>UUID</uuid></capability></device>
    <device><name>net_ens1f0_...</name><parent>pci_...</parent>
      <capability type='net'><interface>ens1f0</interface></capability></device>

PCI functions become the host driver's :class:`~drivers.host.pci.PciFunction`
records so that the host driver's rules (``[pci] device_spec`` matching,
SR-IOV, passthrough) decide what is offered: the same hardware gives the same
tree with either driver.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from drivers.host.mdev import keep_types
from drivers.host.pci import PciFunction
from drivers.libvirt.xmlutil import LibvirtXMLError, parse_xml, to_int
from drivers.records import Gpu, Mdev, MdevType


@dataclass(frozen=True, slots=True)
class PciNodeDevice:
    """A ``pci`` node device.

    Attributes:
        name: the node device name (``pci_0000_3b_00_0``).
        function: the PCI function, as the host driver's record.
        mdev_types: the mdev types it can create, by id (a vGPU-capable GPU).
    """

    name: str
    function: PciFunction
    mdev_types: dict[str, MdevType] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MdevNodeDevice:
    """An ``mdev`` node device (an existing mediated device).

    Attributes:
        name: the node device name.
        parent: the parent node device name (``pci_...``).
        uuid: the mdev UUID (lower-case).
        type_id: its mdev type.
    """

    name: str
    parent: str
    uuid: str
    type_id: str


@dataclass(frozen=True, slots=True)
class NetNodeDevice:
    """A ``net`` node device: a network interface and the PCI device it is on.

    Attributes:
        name: the node device name.
        parent: the parent node device name.
        interface: the interface name (``ens1f0``).
    """

    name: str
    parent: str
    interface: str


NodeDevice = PciNodeDevice | MdevNodeDevice | NetNodeDevice


# Largest value of each PCI address component (PCI Local Bus spec: 8-bit bus,
# 5-bit device, 3-bit function; Linux's 16-bit segment as sysfs names it).
_PCI_LIMITS = (("domain", 0xFFFF), ("bus", 0xFF), ("slot", 0x1F), ("function", 0x7))


def _format_address(parts: list[int], what: str) -> str:
    """``dddd:bb:ss.f`` of four components, each checked against its range.

    libvirt writes some components it could not read as ``4294967295``
    (``(unsigned)-1``); such an address names no device.

    Raises:
        LibvirtXMLError: a component is out of range, naming it and its value.
    """
    for (name, limit), value in zip(_PCI_LIMITS, parts, strict=True):
        if not 0 <= value <= limit:
            raise LibvirtXMLError(
                what, f"PCI {name} {value} is out of range (0-{limit}); not a usable PCI address"
            )
    return f"{parts[0]:04x}:{parts[1]:02x}:{parts[2]:02x}.{parts[3]:x}"


def _address(elem: ET.Element, what: str) -> str:
    try:
        parts = [int(elem.get(name, ""), 16) for name, _ in _PCI_LIMITS]
    except ValueError:
        raise LibvirtXMLError(what, f"garbled PCI address {elem.attrib}") from None
    return _format_address(parts, what)


def _hex_id(elem: ET.Element | None, what: str, field_name: str) -> str:
    if elem is None:
        raise LibvirtXMLError(what, f"no <{field_name}>")
    value = to_int(elem.get("id"), what, f"{field_name} id", 16)
    if not 0 <= value <= 0xFFFF:
        raise LibvirtXMLError(what, f"{field_name} id {elem.get('id')!r} out of range")
    return f"{value:04x}"


def _pci(name: str, cap: ET.Element, root: ET.Element, what: str) -> PciNodeDevice:
    parts = [to_int(cap.findtext(f), what, f, 0) for f, _ in _PCI_LIMITS]
    address = _format_address(parts, what)
    class_text = cap.findtext("class")
    class_value = to_int(class_text, what, "class", 16) if class_text else None
    if class_value is not None and not 0 <= class_value <= 0xFFFFFF:
        raise LibvirtXMLError(what, f"class {class_text!r} is more than 6 hex digits")
    class_code = "" if class_value is None else f"{class_value:06x}"
    numa = cap.find("numa")
    numa_node = to_int(numa.get("node"), what, "numa node") if numa is not None else None
    group = cap.find("iommuGroup")
    total_vfs, vfs, physfn, serial = 0, (), None, None
    types: dict[str, MdevType] = {}
    for sub in cap.findall("capability"):
        kind = sub.get("type")
        if kind == "vpd":
            # nova's LibvirtConfigNodeDeviceVpdCap.card_serial_number: the read-only
            # fields' <serial_number> (the VPD-R "SN" keyword).
            serial = (sub.findtext("fields[@access='readonly']/serial_number") or "").strip()
        elif kind == "virt_functions":
            vfs = tuple(_address(a, what) for a in sub.findall("address"))
            total_vfs = to_int(sub.get("maxCount", str(len(vfs))), what, "maxCount")
        elif kind == "phys_function":
            a = sub.find("address")
            physfn = _address(a, what) if a is not None else None
        elif kind == "mdev_types":
            for t in sub.findall("type"):
                tid = t.get("id")
                if not tid:
                    raise LibvirtXMLError(what, "mdev type without id")
                available = to_int(
                    t.findtext("availableInstances"), what, f"{tid} availableInstances"
                )
                if available < 0:
                    raise LibvirtXMLError(what, f"{tid} availableInstances is negative")
                types[tid] = MdevType(
                    id=tid,
                    name=(t.findtext("name") or tid).strip(),
                    available_instances=available,
                    device_api=(t.findtext("deviceAPI") or "vfio-pci").strip(),
                )
    driver = (root.findtext("driver/name") or "").strip() or None
    function = PciFunction(
        address=address,
        vendor_id=_hex_id(cap.find("vendor"), what, "vendor"),
        product_id=_hex_id(cap.find("product"), what, "product"),
        class_code=class_code,
        driver=driver,
        numa_node=numa_node if numa_node is None or numa_node >= 0 else None,
        iommu_group=to_int(group.get("number"), what, "iommuGroup") if group is not None else None,
        total_vfs=0 if physfn else total_vfs,
        vf_addresses=vfs,
        physfn=physfn,
        vpd_serial=serial or None,
    )
    return PciNodeDevice(name, function, types)


def parse_node_device(text: str, name: str = "") -> NodeDevice | None:
    """Parse one ``virNodeDeviceGetXMLDesc`` document.

    Args:
        text: the XML.
        name: the device name as listed (for messages when the XML has none).

    Returns:
        A :class:`PciNodeDevice`, :class:`MdevNodeDevice` or
        :class:`NetNodeDevice`; None for any other kind (USB, SCSI, storage...).

    Raises:
        LibvirtXMLError: unparsable, or a PCI/mdev/net device with a missing
            or garbled field; the message names the device.
    """
    root = parse_xml(text, f"node device {name}")
    # The name libvirt listed it under wins: it is what virsh needs, and a
    # garbled document must not rename the device in the warning.
    name = name or (root.findtext("name") or "").strip()
    what = f"node device {name}"
    if root.tag != "device":
        raise LibvirtXMLError(what, f"<{root.tag}> is not a <device>")
    parent = (root.findtext("parent") or "").strip()
    for cap in root.findall("capability"):
        kind = cap.get("type")
        if kind == "pci":
            return _pci(name, cap, root, what)
        if kind == "mdev":
            t = cap.find("type")
            uuid = (cap.findtext("uuid") or "").strip()
            if not uuid and name.startswith("mdev_"):
                # libvirt before 7.3 had no <uuid>: the name is mdev_<uuid with underscores>.
                uuid = name[5:41].replace("_", "-")
            if t is None or not t.get("id") or not uuid:
                raise LibvirtXMLError(what, "mdev without <type id> or <uuid>")
            return MdevNodeDevice(name, parent, uuid.lower(), t.get("id", ""))
        if kind == "net":
            interface = (cap.findtext("interface") or "").strip()
            if not interface:
                raise LibvirtXMLError(what, "net device without <interface>")
            return NetNodeDevice(name, parent, interface)
    return None


@dataclass(frozen=True, slots=True)
class HostDevices:
    """Every node device that matters to Placement, as found in one read.

    Attributes:
        functions: every PCI function by address (with ``netdevs`` filled in).
        mdev_types: PCI address -> the mdev types it can create.
        mdevs: existing mdevs whose parent is a known PCI device.
        netdev_to_pci: interface name -> PCI address of the function it is on.
    """

    functions: dict[str, PciFunction]
    mdev_types: dict[str, dict[str, MdevType]]
    mdevs: tuple[Mdev, ...]
    netdev_to_pci: dict[str, str]

    def gpus(self, enabled: Iterable[str] | None) -> tuple[Gpu, ...]:
        """The vGPU-capable GPUs, as the host driver selects them.

        Args:
            enabled: ``[devices] enabled_mdev_types`` (None keeps every type).

        Returns:
            :class:`Gpu` records sorted by address: those with an enabled type
            or an existing mdev (:func:`drivers.host.mdev.discover_mdevs`' rule).
        """
        enabled = None if enabled is None else tuple(enabled)
        parents = sorted(set(self.mdev_types) | {m.parent for m in self.mdevs})
        out = []
        for address in parents:
            kept = keep_types(self.mdev_types.get(address, {}), enabled)
            own = tuple(m for m in self.mdevs if m.parent == address)
            if kept or own:
                fn = self.functions.get(address)
                out.append(Gpu(address, MappingProxyType(kept), own, fn.numa_node if fn else None))
        return tuple(out)


def _device_name(address: str) -> str:
    """libvirt's name of the PCI node device at ``address``: ``pci_dddd_bb_ss_f``."""
    return "pci_" + address.replace(":", "_").replace(".", "_")


def assemble(
    devices: Iterable[NodeDevice],
    warn: Callable[[str], None],
    left_out: frozenset[str] = frozenset(),
) -> HostDevices:
    """Put parsed node devices together: interfaces onto functions, mdevs onto GPUs.

    Args:
        devices: parsed devices (any order).
        warn: called with one line per device left out.
        left_out: names of listed devices already warned about and left out;
            their VFs and mdevs are left out silently (one bad document costs
            one warning).

    Returns:
        :class:`HostDevices`. An mdev whose parent is not a PCI device, and
        the VFs of a PF that was left out, are warned about and left out
        (the host driver's rule: what they belong to is unknown).
    """
    pcis = {d.name: d for d in devices if isinstance(d, PciNodeDevice)}
    by_address = {d.function.address: d for d in pcis.values()}
    netdevs: dict[str, list[str]] = {}
    netdev_to_pci: dict[str, str] = {}
    mdevs = []
    for d in devices:
        if isinstance(d, NetNodeDevice) and d.parent in pcis:
            address = pcis[d.parent].function.address
            netdevs.setdefault(address, []).append(d.interface)
            netdev_to_pci[d.interface] = address
        elif isinstance(d, MdevNodeDevice):
            parent = pcis.get(d.parent)
            if parent is None and d.parent in left_out:
                continue
            if parent is None:
                warn(
                    f"node device {d.name}: parent {d.parent!r} is not a PCI device; mdev left out"
                )
                continue
            mdevs.append(Mdev(uuid=d.uuid, type_id=d.type_id, parent=parent.function.address))
    functions = {}
    for address, d in by_address.items():
        fn = d.function
        if fn.physfn and fn.physfn not in by_address:
            if _device_name(fn.physfn) not in left_out:
                warn(f"node device {d.name}: its PF {fn.physfn} was not read; VF left out")
            continue
        if address in netdevs:
            fn = replace(fn, netdevs=tuple(sorted(netdevs[address])))
        functions[address] = fn
    return HostDevices(
        functions=dict(sorted(functions.items())),
        mdev_types={a: d.mdev_types for a, d in by_address.items() if d.mdev_types},
        mdevs=tuple(sorted(mdevs, key=lambda m: m.uuid)),
        netdev_to_pci=netdev_to_pci,
    )
