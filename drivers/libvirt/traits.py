"""Compute-capability traits of a libvirt host, derived as nova's libvirt driver derives them.

Source: nova 34 ``nova/virt/libvirt/driver.py`` (``LibvirtDriver.capabilities``,
``_update_host_specific_capabilities``, ``static_traits`` and the
``_get_*_traits`` functions), ``nova/virt/libvirt/host.py``
(``supports_secure_boot``, ``tpm_models``, ``tpm_versions``,
``supports_remote_managed_ports``, ``supports_virtio_fs``),
``nova/virt/libvirt/vif.py`` ``SUPPORTED_VIF_MODELS`` and ``nova/virt/driver.py``
``CAPABILITY_TRAITS_MAP``. Rules were read there and are restated here; the
full table is in docs/tree-shape.md ("Capability traits").

What libvirt answers:

* host capabilities (``virConnectGetCapabilities``): the host CPU's
  ``<arch>`` -> ``HW_ARCH_*``; each ``<guest><arch name=...>`` ->
  ``COMPUTE_ARCH_*`` (nova uses the architectures it gets domain
  capabilities for, which are these guests');
* domain capabilities (``virConnectGetDomainCapabilities`` for every guest
  architecture and each of its machine types nova asks for, with ``[libvirt]
  virt_type``: nova's ``Host.get_domain_capabilities``), parsed by
  :func:`parse_domain_capabilities`: disk buses -> ``COMPUTE_STORAGE_BUS_*``
  and video models -> ``COMPUTE_GRAPHICS_MODEL_*`` from all of them; from the
  host architecture's, a secure-capable firmware loader ->
  ``COMPUTE_SECURITY_UEFI_SECURE_BOOT`` (any machine type), TPM models and
  backend versions -> ``COMPUTE_SECURITY_TPM_*`` and ``[libvirt]
  supported_tpm_secret_security`` -> ``COMPUTE_SECURITY_TPM_SECRET_SECURITY_*``
  (the first machine type; only with ``[libvirt] swtpm_enabled`` and a usable
  emulated TPM, :func:`vtpm_problem`). A connection that cannot answer
  (libvirt's ``test:///`` driver) gives none of these;
* libvirt's version (``virConnectGetLibVersion``): the version-gated ones
  (nova also checks QEMU's version for some; the agent checks libvirt's only).

``COMPUTE_STATUS_DISABLED`` is never reported (nova-compute's service
status, not a capability).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import os_traits

from drivers.libvirt.xmlutil import parse_xml

ALWAYS = frozenset(
    {
        # LibvirtDriver.capabilities (True for every libvirt host) via CAPABILITY_TRAITS_MAP.
        os_traits.COMPUTE_NET_ATTACH_INTERFACE,
        os_traits.COMPUTE_DEVICE_TAGGING,
        os_traits.COMPUTE_NET_ATTACH_INTERFACE_WITH_TAG,
        os_traits.COMPUTE_VOLUME_ATTACH_WITH_TAG,
        os_traits.COMPUTE_VOLUME_EXTEND,
        os_traits.COMPUTE_VOLUME_MULTI_ATTACH,
        os_traits.COMPUTE_TRUSTED_CERTS,
        os_traits.COMPUTE_ACCELERATORS,
        os_traits.COMPUTE_RESCUE_BFV,
        os_traits.COMPUTE_SOCKET_PCI_NUMA_AFFINITY,
        # _get_packed_virtqueue_traits.
        os_traits.COMPUTE_NET_VIRTIO_PACKED,
    }
)
"""Traits nova's libvirt driver reports on every host."""

ALWAYS_IMAGE_TYPES = ("aki", "ari", "ami", "raw", "iso")
"""``supports_image_type_*`` True in ``LibvirtDriver.capabilities``."""

_VIF_COMMON = ("virtio", "ne2k_pci", "pcnet", "rtl8139", "e1000", "e1000e")
VIF_MODELS = {
    "qemu": (*_VIF_COMMON, "lan9118", "spapr-vlan", "vmxnet3", "igb"),
    "kvm": (*_VIF_COMMON, "spapr-vlan", "vmxnet3", "igb"),
}
"""``SUPPORTED_VIF_MODELS`` (vif.py) per virt_type; ``igb`` needs libvirt 9.3.0."""

SOUND_MODELS = ("sb16", "es1370", "pcspk", "ac97", "ich6", "ich9", "usb")
"""``_get_sound_model_traits``: always True; virtio from libvirt 10.4.0."""

# Minimum libvirt versions (nova/virt/libvirt/driver.py and host.py constants),
# as virConnectGetLibVersion encodes them: major * 1_000_000 + minor * 1000 + micro.
MIN_REMOTE_MANAGED_PORTS = 7_009_000
MIN_VIRTIO_FS = 8_000_000
MIN_VIOMMU_VIRTIO = 8_003_000
MIN_STATELESS_FIRMWARE = 8_006_000
MIN_MAXPHYSADDR = 8_007_000
MIN_IGB = 9_003_000
MIN_VIRTIO_SOUND = 10_004_000


TPM_SECRET_SECURITY = ("user", "host", "deployment")
"""``[libvirt] supported_tpm_secret_security`` values, nova's default (all of them)."""


@dataclass(frozen=True, slots=True)
class DomainCapabilities:
    """What ``virConnectGetDomainCapabilities`` says, as far as traits need it.

    Attributes:
        arch: the guest arch the answer is for (``x86_64``).
        machine: the machine type it is for, as libvirt expands it
            (``pc-q35-8.2``), or "" when the document names none.
        disk_buses: ``<devices><disk><enum name='bus'>`` values.
        video_models: ``<devices><video><enum name='modelType'>`` values.
        tpm_supported: ``<devices><tpm supported='yes'>``.
        tpm_models: ``<devices><tpm><enum name='model'>`` values.
        tpm_backend_models: ``<enum name='backendModel'>`` values
            (``emulator`` is swtpm).
        tpm_versions: ``<enum name='backendVersion'>`` values, or None when
            libvirt does not list them (before 8.6.0: nova then assumes both).
        secure_boot: ``<os><loader>`` offers ``<enum name='secure'>`` ``yes``.
        tdx_supported: ``<features><tdx supported='yes'>`` (nova's
            ``LibvirtConfigDomainCapsFeatureTDX``; Intel TDX, :mod:`.tdx`).
    """

    arch: str
    machine: str = ""
    disk_buses: frozenset[str] = frozenset()
    video_models: frozenset[str] = frozenset()
    tpm_supported: bool = False
    tpm_models: frozenset[str] = frozenset()
    tpm_backend_models: frozenset[str] = frozenset()
    tpm_versions: frozenset[str] | None = None
    secure_boot: bool = False
    tdx_supported: bool = False


@dataclass(frozen=True, slots=True)
class TraitSettings:
    """The nova.conf options nova's rules read (nova's names and defaults).

    Attributes:
        virt_type: ``[libvirt] virt_type`` (``kvm``).
        images_type: ``[libvirt] images_type`` (``default``).
        force_raw_images: ``[DEFAULT] force_raw_images`` (True).
        swtpm_enabled: ``[libvirt] swtpm_enabled`` (False).
        tpm_secret_security: ``[libvirt] supported_tpm_secret_security``
            (``user``, ``host``, ``deployment``).
        image_type_exclude_list: ``[compute] image_type_exclude_list``.
    """

    virt_type: str = "kvm"
    images_type: str = "default"
    force_raw_images: bool = True
    swtpm_enabled: bool = False
    tpm_secret_security: tuple[str, ...] = TPM_SECRET_SECURITY
    image_type_exclude_list: tuple[str, ...] = ()


def _enum(elem: ET.Element | None, name: str) -> frozenset[str] | None:
    if elem is None or elem.get("supported", "yes") != "yes":
        return None
    for enum in elem.findall("enum"):
        if enum.get("name") == name:
            return frozenset((v.text or "").strip() for v in enum.findall("value"))
    return None


def parse_domain_capabilities(text: str) -> DomainCapabilities:
    """Parse a ``virsh domcapabilities`` document.

    Raises:
        LibvirtXMLError: the text is not XML.
    """
    root = parse_xml(text, "domain capabilities")
    devices = root.find("devices")
    dev = devices if devices is not None else ET.Element("devices")
    loader = root.find("os/loader")
    tpm = dev.find("tpm")
    tdx = root.find("features/tdx")
    return DomainCapabilities(
        arch=(root.findtext("arch") or "").strip(),
        machine=(root.findtext("machine") or "").strip(),
        disk_buses=_enum(dev.find("disk"), "bus") or frozenset(),
        video_models=_enum(dev.find("video"), "modelType") or frozenset(),
        tpm_supported=tpm is not None and tpm.get("supported", "yes") == "yes",
        tpm_models=_enum(tpm, "model") or frozenset(),
        tpm_backend_models=_enum(tpm, "backendModel") or frozenset(),
        tpm_versions=_enum(tpm, "backendVersion"),
        secure_boot="yes" in (_enum(loader, "secure") or frozenset()),
        tdx_supported=tdx is not None and tdx.get("supported") == "yes",
    )


def guest_arches(capabilities_xml: str) -> frozenset[str]:
    """The ``<guest><arch name=...>`` architectures of a host capabilities document.

    Raises:
        LibvirtXMLError: the text is not XML.
    """
    root = parse_xml(capabilities_xml, "host capabilities")
    return frozenset(a.get("name", "") for a in root.findall("guest/arch")) - {""}


def _known(prefix: str, names: Iterable[str]) -> set[str]:
    """``prefix + NAME`` for each name os-traits defines (nova's ``ot.check_traits`` filter)."""
    valid = set(os_traits.get_traits(prefix=prefix))
    return {prefix + n.replace("-", "_").upper() for n in names} & valid


def _image_type_traits(s: TraitSettings) -> set[str]:
    """``COMPUTE_IMAGE_TYPE_*``: LibvirtDriver.capabilities, less the exclude list."""
    types = set(ALWAYS_IMAGE_TYPES)
    requires_raw = s.images_type in ("rbd", "lvm") and not s.force_raw_images
    if not requires_raw:
        types.add("qcow2")
    if s.virt_type == "parallels":
        types.add("ploop")
    return _known("COMPUTE_IMAGE_TYPE_", types - set(s.image_type_exclude_list))


def _version_traits(version: int, arches: frozenset[str], virt_type: str) -> set[str]:
    """Traits gated on libvirt's version and the guest architectures."""
    out: set[str] = set()
    gated = (
        (MIN_REMOTE_MANAGED_PORTS, os_traits.COMPUTE_REMOTE_MANAGED_PORTS),
        (MIN_VIRTIO_FS, os_traits.COMPUTE_STORAGE_VIRTIO_FS),
        (MIN_STATELESS_FIRMWARE, os_traits.COMPUTE_SECURITY_STATELESS_FIRMWARE),
        (MIN_MAXPHYSADDR, os_traits.COMPUTE_ADDRESS_SPACE_PASSTHROUGH),
        (MIN_MAXPHYSADDR, os_traits.COMPUTE_ADDRESS_SPACE_EMULATED),
    )
    out.update(trait for minimum, trait in gated if version >= minimum)
    vif = set(VIF_MODELS.get(virt_type, ()))
    if version < MIN_IGB:
        vif.discard("igb")
    out |= _known("COMPUTE_NET_VIF_MODEL_", vif)
    sound = set(SOUND_MODELS) | ({"virtio"} if version >= MIN_VIRTIO_SOUND else set())
    out |= _known("COMPUTE_SOUND_MODEL_", sound)
    viommu = {"auto"}
    viommu |= {"intel"} if "x86_64" in arches else set()
    viommu |= {"smmuv3"} if "aarch64" in arches else set()
    viommu |= {"virtio"} if version >= MIN_VIOMMU_VIRTIO else set()
    return out | _known("COMPUTE_VIOMMU_MODEL_", viommu)


def vtpm_problem(host_arch: str, domains: Sequence[DomainCapabilities], virt_type: str) -> str:
    """Why an emulated TPM cannot be offered, or "" when it can.

    nova's ``LibvirtDriver._check_vtpm_support`` (run at start with
    ``[libvirt] swtpm_enabled``): ``virt_type`` must be qemu or kvm, and the
    first domain capabilities of the host arch must list a supported TPM with
    the ``emulator`` backend (``Host.supports_vtpm``). nova refuses to start
    otherwise; the agent reports no TPM trait and says why.
    """
    if virt_type not in ("qemu", "kvm"):
        return f"[libvirt] virt_type is {virt_type!r}; vTPM needs qemu or kvm"
    first = _first_of(host_arch, domains)
    if first is None:
        return f"libvirt gave no domain capabilities for the host arch {host_arch or '?'}"
    if not first.tpm_supported or "emulator" not in first.tpm_backend_models:
        return (
            f"libvirt's domain capabilities ({first.machine or first.arch}) offer no emulated TPM"
        )
    return ""


def _first_of(host_arch: str, domains: Sequence[DomainCapabilities]) -> DomainCapabilities | None:
    """The host arch's first domain capabilities (nova's ``tpm_models`` / ``tpm_versions``)."""
    return next((d for d in domains if d.arch == host_arch), None)


def _tpm_traits(
    host_arch: str, domains: Sequence[DomainCapabilities], s: TraitSettings
) -> set[str]:
    """nova's ``_get_tpm_traits`` when swtpm is enabled and usable (:func:`vtpm_problem`)."""
    first = _first_of(host_arch, domains)
    if not s.swtpm_enabled or first is None or vtpm_problem(host_arch, domains, s.virt_type):
        return set()
    out = set()
    if "tpm-tis" in first.tpm_models:
        out.add(os_traits.COMPUTE_SECURITY_TPM_TIS)
    if "tpm-crb" in first.tpm_models:
        out.add(os_traits.COMPUTE_SECURITY_TPM_CRB)
    versions = {"1.2", "2.0"} if first.tpm_versions is None else first.tpm_versions
    if "2.0" in versions:
        out.add(os_traits.COMPUTE_SECURITY_TPM_2_0)
    if "1.2" in versions:
        out.add(os_traits.COMPUTE_SECURITY_TPM_1_2)
    security = {
        "user": os_traits.COMPUTE_SECURITY_TPM_SECRET_SECURITY_USER,
        "host": os_traits.COMPUTE_SECURITY_TPM_SECRET_SECURITY_HOST,
        "deployment": os_traits.COMPUTE_SECURITY_TPM_SECRET_SECURITY_DEPLOYMENT,
    }
    return out | {security[p] for p in s.tpm_secret_security if p in security}


def _domain_traits(
    host_arch: str, domains: Sequence[DomainCapabilities], s: TraitSettings
) -> set[str]:
    """Traits read from the domain capabilities (module docstring: which from which)."""
    buses = {b for d in domains for b in d.disk_buses}
    out = _known("COMPUTE_STORAGE_BUS_", buses)
    out |= _known("COMPUTE_GRAPHICS_MODEL_", {m for d in domains for m in d.video_models})
    if any(d.secure_boot for d in domains if d.arch == host_arch):
        out.add(os_traits.COMPUTE_SECURITY_UEFI_SECURE_BOOT)
    return out | _tpm_traits(host_arch, domains, s)


def capability_traits(
    host_arch: str,
    arches: frozenset[str],
    domains: Sequence[DomainCapabilities],
    lib_version: int,
    settings: TraitSettings,
) -> frozenset[str]:
    """Every compute-capability and architecture trait nova's libvirt driver would report.

    Args:
        host_arch: the host CPU's ``<arch>`` (``x86_64``); "" when unknown.
        arches: guest architectures (:func:`guest_arches`): ``COMPUTE_ARCH_*``
            and the vIOMMU models come from the architectures of ``domains``
            (nova's ``_get_cpu_emulation_arch_traits``,
            ``_get_iommu_model_traits``), from these when ``domains`` is empty.
        domains: the domain capabilities of every guest arch and machine
            type libvirt answered for, in the order asked (the host arch's
            default machine type first); empty when libvirt cannot give them
            (then no bus, video, TPM or secure-boot trait).
        lib_version: ``virConnectGetLibVersion`` (e.g. 9000000 for 9.0.0).
        settings: the nova.conf options the rules read.

    Returns:
        Trait names, each defined by os-traits.
    """
    out = set(ALWAYS) | _image_type_traits(settings)
    out |= _known("HW_ARCH_", [host_arch] if host_arch else [])
    # nova reads both from the architectures it got domain capabilities for
    # (a non-native arch refused with kvm counts not); the guest arches stand in
    # when libvirt gives none at all (the test driver).
    emulated = frozenset(d.arch for d in domains) or arches
    out |= _known("COMPUTE_ARCH_", emulated)
    out |= _version_traits(lib_version, emulated, settings.virt_type)
    return frozenset(out | _domain_traits(host_arch, domains, settings))
