"""Options of the libvirt driver (``[libvirt]``; nova's name for the URI)."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "libvirt"

LIBVIRT_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "connection_uri",
        default="qemu:///system",
        help="libvirt URI of the hypervisor whose host and domains are reported, as "
        "nova's [libvirt] connection_uri. 'test:///path/host.xml' reads libvirt's test "
        "driver description instead (tests and labs).",
    ),
    cfg.StrOpt(
        "unowned_project_id",
        default="unowned",
        help="Placement project_id of the allocations of a domain that has neither the "
        "agent's owner metadata nor nova's (docs/libvirt-driver.md). Such a domain is "
        "still counted, so the resources it holds are never offered twice.",
    ),
    cfg.StrOpt(
        "unowned_user_id",
        default="unowned",
        help="Placement user_id of the allocations of a domain without owner metadata.",
    ),
    cfg.IntOpt(
        "reconnect_attempts",
        default=5,
        min=1,
        help="Attempts to open the libvirt connection (at start, or when libvirtd went "
        "away) before the cycle fails; the next cycle tries again.",
    ),
    cfg.FloatOpt(
        "reconnect_min_delay",
        default=0.5,
        min=0.0,
        help="Seconds before the second connection attempt; doubled before each further "
        "attempt up to reconnect_max_delay.",
    ),
    cfg.FloatOpt(
        "reconnect_max_delay",
        default=8.0,
        min=0.0,
        help="Longest wait, in seconds, between two connection attempts.",
    ),
    cfg.StrOpt(
        "virt_type",
        default="kvm",
        choices=("kvm", "lxc", "qemu", "parallels"),
        help="Nova's [libvirt] virt_type: the domain type whose domain capabilities "
        "(virConnectGetDomainCapabilities) give the storage-bus, video-model, TPM and "
        "secure-boot traits, and whose VIF models give COMPUTE_NET_VIF_MODEL_* "
        "(docs/tree-shape.md, capability traits).",
    ),
    cfg.StrOpt(
        "images_type",
        default="default",
        choices=("raw", "flat", "qcow2", "lvm", "rbd", "ploop", "default"),
        help="Nova's [libvirt] images_type: with rbd or lvm and force_raw_images off, "
        "COMPUTE_IMAGE_TYPE_QCOW2 is not reported (nova's rule).",
    ),
    cfg.BoolOpt(
        "swtpm_enabled",
        default=False,
        help="Nova's [libvirt] swtpm_enabled: report COMPUTE_SECURITY_TPM_* for the TPM "
        "models and versions libvirt's domain capabilities list.",
    ),
    cfg.StrOpt(
        "domain_capabilities_file",
        help="Read the domain capabilities from this file (a saved 'virsh "
        "domcapabilities' document) instead of asking libvirt. Only allowed with a "
        "'test:///' connection_uri (libvirt's test driver cannot answer "
        "virConnectGetDomainCapabilities), to replay a captured host.",
    ),
    cfg.StrOpt(
        "capabilities_file",
        help="Read the host capabilities (NUMA cells, CPU model and features) from this "
        "file, a saved 'virsh capabilities' document, instead of asking libvirt. Only "
        "allowed with a 'test:///' connection_uri: libvirt's test driver always reports "
        "the same capabilities (no NUMA cell, an i686 CPU), so a captured host is "
        "replayed with its domains and node devices in the test driver file and its "
        "capabilities here.",
    ),
]


DEFAULT_OPTS: list[cfg.Opt] = [
    cfg.BoolOpt(
        "force_raw_images",
        default=True,
        help="Nova's [DEFAULT] force_raw_images; read for COMPUTE_IMAGE_TYPE_QCOW2 "
        "(see [libvirt] images_type).",
    ),
]

COMPUTE_OPTS: list[cfg.Opt] = [
    cfg.ListOpt(
        "image_type_exclude_list",
        default=[],
        help="Nova's [compute] image_type_exclude_list: image formats (qcow2, raw, iso, "
        "...) whose COMPUTE_IMAGE_TYPE_* trait is not reported even when supported.",
    ),
]


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """The libvirt driver's options by group (merged with the core's by agent.conf.config)."""
    return [(GROUP, LIBVIRT_OPTS), ("DEFAULT", DEFAULT_OPTS), ("compute", COMPUTE_OPTS)]
