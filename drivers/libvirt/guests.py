"""Which domain capabilities nova asks libvirt for: every guest arch, a few machine types each.

Source: nova 34 ``nova/virt/libvirt/host.py`` ``Host.get_domain_capabilities``,
``_get_machine_types`` and ``_add_to_domain_capabilities``,
``nova/virt/libvirt/config.py`` ``LibvirtConfigCapsGuest.parse_arch`` and
``nova/virt/libvirt/utils.py`` ``get_default_machine_type``. For each
``<guest><arch>`` of the host capabilities, nova takes the ``<domain>`` of
``[libvirt] virt_type`` when it has children of its own (its emulator and
machines), else the arch's own emulator and machines, and calls
``virConnectGetDomainCapabilities(emulator, arch, machine, virt_type)`` for
the arch's default machine type (``[libvirt] hw_machine_type``, else nova's
table) and for every machine type marked ``canonical`` (the aliases ``pc``
and ``q35``). A call libvirt refuses (e.g. a non-native arch with kvm) drops
what was gathered for that arch so far, as nova does.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

from drivers.libvirt.xmlutil import parse_xml

DEFAULT_MACHINE_TYPES = {
    "armv7l": "virt",
    "aarch64": "virt",
    "ppc64le": "pseries",
    "s390": "s390-ccw-virtio",
    "s390x": "s390-ccw-virtio",
    "i686": "pc",
    "x86_64": "pc",
}
"""nova's ``get_default_machine_type`` table, used when ``hw_machine_type`` names none."""


@dataclass(frozen=True, slots=True)
class GuestArch:
    """One guest architecture as nova reads it for ``[libvirt] virt_type``.

    Attributes:
        arch: ``<arch name=...>`` (``x86_64``).
        emulator: the ``<emulator>`` path, or None.
        canonical: machine types with a ``canonical`` attribute (aliases
            such as ``pc``, ``q35``), in document order.
    """

    arch: str
    emulator: str | None
    canonical: tuple[str, ...]


def _domain_part(arch: ET.Element, virt_type: str) -> ET.Element:
    """The element holding the emulator and machines: the virt_type's ``<domain>`` with
    children, else the ``<arch>`` itself (nova's default domain)."""
    for domain in arch.findall("domain"):
        if domain.get("type") == virt_type and len(domain):
            return domain
    return arch


def parse_guest_arches(capabilities_xml: str, virt_type: str) -> tuple[GuestArch, ...]:
    """The guest architectures of a host capabilities document, for ``virt_type``.

    Raises:
        LibvirtXMLError: the text is not XML.
    """
    root = parse_xml(capabilities_xml, "host capabilities")
    out = []
    for arch in root.findall("guest/arch"):
        name = arch.get("name", "")
        if not name:
            continue
        part = _domain_part(arch, virt_type)
        emulator = (part.findtext("emulator") or "").strip() or None
        canonical = tuple(
            (m.text or "").strip() for m in part.findall("machine") if "canonical" in m.attrib
        )
        out.append(GuestArch(name, emulator, tuple(c for c in canonical if c)))
    return tuple(out)


def default_machine_type(arch: str, hw_machine_type: Sequence[str]) -> str | None:
    """``[libvirt] hw_machine_type``'s ``arch=type`` for ``arch``, else nova's default (or None).

    An entry without ``=type`` is skipped (nova logs it as invalid).
    """
    for mapping in hw_machine_type:
        host_arch, _, machine = mapping.partition("=")
        if machine and host_arch.strip() == arch:
            return machine.strip()
    return DEFAULT_MACHINE_TYPES.get(arch)


def machine_types(guest: GuestArch, hw_machine_type: Sequence[str]) -> tuple[str | None, ...]:
    """The machine types nova asks the domain capabilities of ``guest`` for.

    Returns:
        The default machine type first (None: libvirt picks its default),
        then the canonical ones not already listed.
    """
    first = default_machine_type(guest.arch, hw_machine_type)
    return (first, *(m for m in dict.fromkeys(guest.canonical) if m != first))
