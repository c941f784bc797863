"""Memory encryption (AMD SEV, SEV-ES, SEV-SNP, Intel TDX): what the host offers, what a guest uses.

Rules from nova 34 (``nova/virt/libvirt/host.py`` ``supports_amd_sev``,
``supports_amd_sev_es``, ``supports_amd_sev_snp``,
``get_mem_encryption_inventories`` and the ``_get_mem_encryption_slots_*``
functions; ``nova/virt/libvirt/config.py`` ``LibvirtConfigDomainCapsFeatureSev``,
``LibvirtConfigDomainCapsFeatureLaunchSecurity``):

* the host CPU is ``x86_64``;
* **SEV**: the kernel parameter ``/sys/module/kvm_amd/parameters/sev`` is true
  and the domain capabilities have ``<features><sev supported='yes'>``; its
  slots are ``<maxGuests>``;
* **SEV-ES**: SEV, the kernel's ``sev_es`` true, QEMU 8.0.0 or later, and the
  kernel's ``sev_snp`` *not* true (nova ignores SEV-ES once SEV-SNP is
  there); its slots are ``<maxESGuests>``;
* **SEV-SNP**: SEV, the kernel's ``sev_snp`` true, and ``<launchSecurity
  supported='yes'>`` listing sectype ``sev-snp``; its slots are
  ``<maxESGuests>`` too (SNP guests use the ES ASIDs);
* a model with 0 slots is not offered (nova removes its provider).

nova 34 has no ``[libvirt] num_memory_encrypted_guests`` any more (nova 2025.2
sizes SEV from libvirt alone). Intel TDX (``[libvirt] cpu_mode = host-passthrough``,
``<tdx supported='yes'>``, slots from the misc cgroup or ``[libvirt]
num_intel_tdx_guests``) is :mod:`drivers.libvirt.tdx`.

A guest's model comes from its domain's ``<launchSecurity>``
(``_guest_configure_sev_mem_encryption``, ``_guest_configure_tdx_mem_encryption``):
``type='sev-snp'`` is SEV-SNP; ``type='sev'`` is SEV-ES when its ``<policy>`` has the
ES bit (0x4), else SEV; ``type='tdx'`` is Intel TDX.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

import os_traits
from oslo_utils import strutils

from drivers.host.sysfs import SysfsError, SysfsReader
from drivers.libvirt.xmlutil import LibvirtXMLError, parse_xml, to_int
from drivers.records import MemEncryption

AMD_SEV = "amd_sev"
AMD_SEV_ES = "amd_sev_es"
AMD_SEV_SNP = "amd_sev_snp"
INTEL_TDX = "intel_tdx"

TRAITS = {
    AMD_SEV: os_traits.HW_CPU_X86_AMD_SEV,
    AMD_SEV_ES: os_traits.HW_CPU_X86_AMD_SEV_ES,
    AMD_SEV_SNP: os_traits.HW_CPU_X86_AMD_SEV_SNP,
    INTEL_TDX: os_traits.HW_CPU_X86_INTEL_TDX,
}
"""Model -> trait on its provider (``_get_mem_encryption_traits_*``)."""

KERNEL_PARAMS = "sys/module/kvm_amd/parameters"
"""Where the kvm_amd module says which SEV flavours it enables (``SEV_KERNEL_PARAM_FILE``)."""

MIN_QEMU_SEV_ES = 8_000_000
"""``MIN_QEMU_SEV_ES_VERSION`` (8.0.0) as ``virConnectGetVersion`` encodes it."""

SEV_POLICY_ES = 0x4
"""The SEV policy bit that makes a ``type='sev'`` guest SEV-ES (``SEV_POLICY_ES``)."""


@dataclass(frozen=True, slots=True)
class SevCapabilities:
    """The ``<features>`` of a domain capabilities document that memory encryption needs.

    Attributes:
        sev: ``<sev supported='yes'>``.
        max_guests: ``<sev><maxGuests>`` (0 when absent).
        max_es_guests: ``<sev><maxESGuests>`` (0 when absent).
        sectypes: ``<launchSecurity supported='yes'>`` sectype values.
    """

    sev: bool = False
    max_guests: int = 0
    max_es_guests: int = 0
    sectypes: frozenset[str] = frozenset()


def parse_sev(text: str) -> SevCapabilities:
    """The SEV facts of a ``virConnectGetDomainCapabilities`` document.

    Raises:
        LibvirtXMLError: unparsable, or a garbled guest count.
    """
    what = "domain capabilities"
    root = parse_xml(text, what)
    sev = root.find("features/sev")
    out = SevCapabilities()
    if sev is not None and sev.get("supported") == "yes":
        out = SevCapabilities(
            sev=True,
            max_guests=_count(sev, "maxGuests", what),
            max_es_guests=_count(sev, "maxESGuests", what),
        )
    launch = root.find("features/launchSecurity")
    if launch is not None and launch.get("supported") == "yes":
        values = launch.findall("enum[@name='sectype']/value")
        sectypes = frozenset((v.text or "").strip() for v in values)
        out = SevCapabilities(out.sev, out.max_guests, out.max_es_guests, sectypes)
    return out


def _count(sev: ET.Element, tag: str, what: str) -> int:
    text = sev.findtext(tag)
    return 0 if text is None else max(0, to_int(text, what, f"<sev><{tag}>"))


def kernel_enables(reader: SysfsReader, model: str) -> bool:
    """True when ``kvm_amd``'s parameter ``model`` (``sev``, ``sev_es``, ``sev_snp``) is true.

    An absent file (no kvm_amd module, an Intel host) is False, as in nova; an
    unreadable one is warned about through the reader and False.
    """
    try:
        text = reader.optional_text(f"{KERNEL_PARAMS}/{model}")
    except SysfsError as exc:
        reader.skip(exc, f"AMD {model.upper()}")
        return False
    return text is not None and strutils.bool_from_string(text)


def host_models(
    arch: str, caps: SevCapabilities, reader: SysfsReader, qemu_version: int
) -> tuple[MemEncryption, ...]:
    """The memory encryption models the host offers, by nova's rules (module docstring).

    Args:
        arch: the host CPU's arch (host capabilities).
        caps: :func:`parse_sev` of the host arch's domain capabilities.
        reader: reads ``/sys/module/kvm_amd/parameters`` below the sysfs root.
        qemu_version: ``virConnectGetVersion`` (major * 1_000_000 + minor * 1000 + micro).

    Returns:
        One :class:`MemEncryption` per model with slots, in the order SEV, SEV-ES, SEV-SNP.
    """
    if arch != "x86_64" or not caps.sev or not kernel_enables(reader, "sev"):
        return ()
    snp = kernel_enables(reader, "sev_snp")
    slots = {AMD_SEV: caps.max_guests}
    if kernel_enables(reader, "sev_es") and qemu_version >= MIN_QEMU_SEV_ES and not snp:
        slots[AMD_SEV_ES] = caps.max_es_guests
    if snp and "sev-snp" in caps.sectypes:
        slots[AMD_SEV_SNP] = caps.max_es_guests
    return tuple(MemEncryption(m, n, TRAITS[m]) for m, n in slots.items() if n > 0)


def guest_model(domain: ET.Element, what: str) -> str:
    """The memory encryption model of a parsed ``<domain>``: ``amd_sev``, ``amd_sev_es``,
    ``amd_sev_snp``, ``intel_tdx``, the ``<launchSecurity type>`` itself for another kind
    (``s390-pv``), or "" when it has none.

    Raises:
        LibvirtXMLError: a ``type='sev'`` policy that is not a number.
    """
    launch = domain.find("launchSecurity")
    if launch is None:
        return ""
    kind = launch.get("type", "")
    if kind == "sev-snp":
        return AMD_SEV_SNP
    if kind == "tdx":
        return INTEL_TDX
    if kind != "sev":
        return kind
    policy = (launch.findtext("policy") or "0").strip()
    try:
        bits = int(policy, 0)
    except ValueError:
        raise LibvirtXMLError(what, f"<launchSecurity> policy {policy!r} is not a number") from None
    return AMD_SEV_ES if bits & SEV_POLICY_ES else AMD_SEV
