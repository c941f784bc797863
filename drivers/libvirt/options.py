"""Options of the libvirt driver (``[libvirt]``; nova's name for the URI)."""

from __future__ import annotations

from oslo_config import cfg, types

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
        "models and versions libvirt's domain capabilities list, and the secret "
        "security policies of supported_tpm_secret_security, when libvirt offers an "
        "emulated TPM (virt_type qemu or kvm, TPM backend 'emulator'; else a warning "
        "says why none is reported).",
    ),
    cfg.ListOpt(
        "supported_tpm_secret_security",
        default=["user", "host", "deployment"],
        item_type=types.String(choices=("user", "host", "deployment")),
        help="Nova's [libvirt] supported_tpm_secret_security: the vTPM secret security "
        "policies this host accepts, each reported (with swtpm_enabled) as "
        "COMPUTE_SECURITY_TPM_SECRET_SECURITY_{USER,HOST,DEPLOYMENT}, which nova's "
        "scheduler requires of every vTPM server (request filter "
        "tpm_secret_security_filter, from the flavor's hw:tpm_secret_security, default "
        "user).",
    ),
    cfg.ListOpt(
        "pmem_namespaces",
        default=[],
        help="Nova's [libvirt] pmem_namespaces: '$LABEL:$NSNAME[|$NSNAME]' entries; each "
        "label is reported as CUSTOM_PMEM_NAMESPACE_$LABEL on the compute node, one unit "
        "per namespace. Each namespace must exist on the host in device-DAX mode (read "
        "from sysfs, as ndctl shows it); otherwise the agent refuses to start, as nova.",
    ),
    cfg.StrOpt(
        "cpu_mode",
        choices=("host-model", "host-passthrough", "custom", "none"),
        help="Nova's [libvirt] cpu_mode, read for Intel TDX only: nova reports TDX only "
        "with host-passthrough (a TDX guest must see the host CPU as it is). With custom, "
        "nova's CPU traits are the guest CPU models' features and the agent's the host "
        "CPU's (warned about).",
    ),
    cfg.IntOpt(
        "num_intel_tdx_guests",
        min=0,
        help="Nova's [libvirt] num_intel_tdx_guests: how many Intel TDX guests this host "
        "may run at once (MEM_ENCRYPTION_CONTEXT on {nodename}_intel_tdx). Unset: the "
        "'tdx' line of the misc cgroup's /sys/fs/cgroup/misc.capacity. When both are "
        "known the option is used, with a warning when it exceeds the cgroup's (nova's "
        "rule); neither: no TDX slots, with a warning.",
    ),
    cfg.ListOpt(
        "hw_machine_type",
        help="Nova's [libvirt] hw_machine_type: 'arch=machine-type' pairs giving an "
        "architecture's default machine type (else nova's: pc for x86, virt for ARM, "
        "pseries for ppc64le, s390-ccw-virtio for s390x). The domain capabilities of "
        "that machine type and of the canonical ones (pc, q35) of every guest "
        "architecture give the storage-bus and video-model traits, as in nova.",
    ),
    cfg.ListOpt(
        "domain_capabilities_file",
        help="Read the domain capabilities from these files (saved 'virsh "
        "domcapabilities' documents, one per guest architecture and machine type, the "
        "host architecture's default machine type first) instead of asking libvirt. "
        "Only allowed with a 'test:///' connection_uri (libvirt's test driver cannot "
        "answer virConnectGetDomainCapabilities), to replay a captured host.",
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


WORKAROUNDS_OPTS: list[cfg.Opt] = [
    cfg.BoolOpt(
        "reserve_disk_resource_for_image_cache",
        default=False,
        help="Nova's [workarounds] reserve_disk_resource_for_image_cache: DISK_GB's reserved "
        "grows by the disk space the image cache ($instances_path/[image_cache] "
        "subdirectory_name) takes, in whole GiB rounded up, measured every cycle; nothing "
        "when the cache is on another file system than instances_path (nova's rule).",
    ),
]

IMAGE_CACHE_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "subdirectory_name",
        default="_base",
        deprecated_name="image_cache_subdirectory_name",
        deprecated_group="DEFAULT",
        help="Nova's [image_cache] subdirectory_name: the image cache's folder under "
        "instances_path, measured with [workarounds] reserve_disk_resource_for_image_cache.",
    ),
]


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """The libvirt driver's options by group (merged with the core's by agent.conf.config)."""
    return [
        (GROUP, LIBVIRT_OPTS),
        ("DEFAULT", DEFAULT_OPTS),
        ("compute", COMPUTE_OPTS),
        ("workarounds", WORKAROUNDS_OPTS),
        ("image_cache", IMAGE_CACHE_OPTS),
    ]
