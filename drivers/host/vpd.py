"""PCI Vital Product Data: the card serial number a ``remote_managed`` device needs.

nova offers a ``remote_managed`` device only when its PCI VPD, or for a VF its
PF's, holds a card serial number (nova/pci/devspec.py
``_ensure_remote_managed_dev_vpd_serial``, nova/virt/libvirt/host.py
``_get_vpd_details``): neutron's backend finds the card by it. libvirt reads it
from the function's ``vpd`` file (its ``virPCIVPDParse``); the host driver reads
the same file (``/sys/bus/pci/devices/ADDR/vpd``, kernel sysfs-bus-pci ABI).

Format (PCI Local Bus 3.0 Appendix I, PCIe Base 6.0 section 6.27): a sequence of
resource tags. A large resource starts with a byte with bit 7 set (its name in
bits 0-6) and a 16-bit little-endian length; a small one has its name in bits
3-6 and its length in bits 0-2. Large resource 0x10 is VPD-R, the read-only
keywords: two ASCII characters, one length byte, the value. ``SN`` is the serial
number. Small resource 0xF ends the data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from drivers.host.device_spec import DeviceSpec
from drivers.host.pci import PCI_DIR, PciFunction
from drivers.host.sysfs import Root, SysfsError, as_reader

_LARGE = 0x80
_VPD_R = 0x10
_END = 0x0F


def vpd_serial(data: bytes) -> str | None:
    """The ``SN`` keyword of the read-only section of a VPD image, or None.

    Returns None when there is no VPD-R section, no ``SN`` keyword, or an empty
    or unprintable one (nova drops an empty serial as no serial); a truncated
    image gives what was read before the cut.
    """
    i = 0
    while i < len(data):
        tag = data[i]
        if tag & _LARGE:
            if i + 3 > len(data):
                return None
            length = data[i + 1] | data[i + 2] << 8
            body = data[i + 3 : i + 3 + length]
            if tag & 0x7F == _VPD_R:
                return _keyword(body, b"SN")
            i += 3 + length
        else:
            if (tag >> 3) & 0x0F == _END:
                return None
            i += 1 + (tag & 0x07)
    return None


def _keyword(body: bytes, key: bytes) -> str | None:
    j = 0
    while j + 3 <= len(body):
        name, length = body[j : j + 2], body[j + 2]
        value = body[j + 3 : j + 3 + length]
        if name == key:
            text = value.decode("ascii", "replace").strip(" \x00")
            return text if text and text.isprintable() else None
        j += 3 + length
    return None


def with_vpd_serials(
    root: Root, functions: Mapping[str, PciFunction], specs: Sequence[DeviceSpec]
) -> dict[str, PciFunction]:
    """``functions`` with :attr:`PciFunction.vpd_serial` read where a spec needs it.

    Only the functions a ``remote_managed`` spec would match but for the serial, and
    their PFs (nova's fallback), are read: reading VPD goes through the device's
    configuration space and can be slow. A file that cannot be read is warned about,
    naming it, and counts as no serial: one device, not the host.
    """
    reader = as_reader(root)
    wanted: set[str] = set()
    for fn in functions.values():
        pf = functions.get(fn.physfn) if fn.physfn else None
        netdevs = pf.netdevs if pf is not None else ()
        if any(spec.wants_serial(fn, netdevs) for spec in specs):
            wanted.update(a for a in (fn.address, fn.physfn) if a)
    out = dict(functions)
    for address in sorted(wanted & set(functions)):
        try:
            data = reader.optional_bytes(f"{PCI_DIR}/{address}/vpd")
        except SysfsError as exc:
            reader.skip(exc, f"the card serial number of {address}")
            continue
        serial = vpd_serial(data) if data else None
        if serial is not None:
            out[address] = replace(functions[address], vpd_serial=serial)
    return out
