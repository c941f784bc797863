"""Options of the host driver (nova's names and meanings where nova has them)."""

from __future__ import annotations

from oslo_config import cfg

COMPUTE_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "cpu_dedicated_set",
        help="CPUs offered to instances with dedicated (pinned) CPUs, reported as PCPU. "
        "Nova's syntax: comma-separated CPU numbers, ranges and exclusions, e.g. "
        "'4-15,^8,20'. Must name online CPUs only and must not overlap "
        "cpu_shared_set. When set and cpu_shared_set is not, no VCPU is reported. "
        "Unset: no PCPU.",
    ),
    cfg.StrOpt(
        "cpu_shared_set",
        help="CPUs offered to instances with shared (floating) CPUs, reported as VCPU "
        "(before reserved_host_cpus and cpu_allocation_ratio). Same syntax as "
        "cpu_dedicated_set. Unset, with cpu_dedicated_set unset too: every online "
        "CPU is a VCPU.",
    ),
    cfg.BoolOpt(
        "shared_storage",
        default=False,
        help="Treat instances_path as shared between compute hosts even when its file "
        "system type is not one detected as shared (e.g. a clustered block file "
        "system): DISK_GB is then not reported on the compute node.",
    ),
]

DEFAULT_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "instances_path",
        default="$state_path/instances",
        sample_default="$state_path/instances",
        deprecated_opts=[cfg.DeprecatedOpt("instances_path", group="compute")],
        help="Nova's [DEFAULT] instances_path: the directory holding instance disks. "
        "DISK_GB is the size of the file system holding it (or holding its nearest "
        "existing parent, before the directory is created). When that file system is "
        "NFS, CephFS, GlusterFS or Lustre, the storage is shared and DISK_GB is not "
        "reported on the compute node. Also read from [compute] instances_path "
        "(earlier agents).",
    ),
]

PCI_OPTS: list[cfg.Opt] = [
    cfg.MultiStrOpt(
        "device_spec",
        default=[],
        deprecated_opts=[cfg.DeprecatedOpt("passthrough_whitelist", group="pci")],
        help="PCI devices offered to instances, as in nova: a JSON object (or list of "
        "objects) per value, repeatable. Keys: vendor_id, product_id (hex or '*'), "
        "address ('[[[[domain]:]bus]:][slot][.[function]]' with '*' wildcards, or an "
        "object of regular expressions per field), devname (interface name), "
        "physical_network (SR-IOV NICs: trait CUSTOM_PHYSNET_<NAME>), resource_class "
        "and traits (whole devices), trusted. An SR-IOV PF matched by a spec (or whose "
        "VFs are) is offered as SRIOV_NET_VF; any other matched device is offered "
        "whole, as resource_class or CUSTOM_PCI_<VENDOR>_<PRODUCT>. Example: "
        '{"vendor_id": "8086", "product_id": "154c", "physical_network": "physnet1"}. '
        "See docs/host-driver.md.",
    ),
]

DEVICES_OPTS: list[cfg.Opt] = [
    cfg.BoolOpt(
        "vendor_vgpu_inventory",
        default=False,
        help="Report VGPU on GPUs whose vGPUs are made through NVIDIA's vendor-specific "
        "VFIO framework (no mdev: L40S, H100, H200, RTX PRO 6000 Blackwell on vGPU 17+ and "
        "kernel 6.8+), for a consumer that creates a vGPU by writing a type ID to a VF's "
        "nvidia/current_vgpu_type (not nova 34: its libvirt driver creates vGPUs only as "
        "mdevs, so a VGPU allocation there fails at spawn). The total of a GPU is the VFs "
        "holding the type plus what can still be created: within the type's maximum "
        "instances per GPU (NVML, or vendor_vgpu_max_instances), the card's vGPU ceiling "
        "(instances of every type count) and the framebuffer left (NVML, or the type names "
        "in creatable_vgpu_types). Off: no VGPU on such GPUs; nova 34 uses them through "
        "[pci] device_spec (see docs/host-driver.md).",
    ),
    cfg.DictOpt(
        "vendor_vgpu_max_instances",
        default={},
        help="Maximum instances per GPU of each vendor-VFIO vGPU type, 'nvidia-<ID>:<N>' "
        "pairs (NVIDIA's vGPU type tables, 'nvidia-smi vgpu -s -v' Max Instances), e.g. "
        "'nvidia-1428:1,nvidia-1414:7' on an H200. Used over NVML's answer; without "
        "either, a type gets no VGPU. Without NVML, the card's vGPU ceiling and framebuffer "
        "are read off these maxima (largest maximum; largest maximum x framebuffer): list "
        "the card's smallest type too, e.g. 'nvidia-1552:32' (DC-2B) on an RTX PRO 6000.",
    ),
]

GROUP = "host_driver"
"""Group of the host driver's own options. Not ``[host]``: a group of that name
would shadow ``[DEFAULT] host`` (oslo.config resolves ``conf.host`` to the
group), and every driver reads the nodename from there."""

HOST_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "sysfs_root",
        default="/",
        help="Directory holding the sys/ and proc/ trees the host driver reads: '/' on a "
        "real host; a directory written by 'compute-agent capture' (or a test fixture) "
        "to replay another host's hardware. PCI enumeration uses udev only when this is "
        "'/'.",
    ),
    cfg.FloatOpt(
        "hotplug_debounce",
        default=2.0,
        min=0.0,
        help="Seconds of quiet after a udev event (pci, net, mdev) before an early "
        "resource-tracking cycle is asked for; a burst of events (a PF creating 64 "
        "VFs) then causes one cycle.",
    ),
]


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """The host driver's options by group (merged with the core's by agent.conf.config)."""
    return [
        ("DEFAULT", DEFAULT_OPTS),
        ("compute", COMPUTE_OPTS),
        ("pci", PCI_OPTS),
        ("devices", DEVICES_OPTS),
        (GROUP, HOST_OPTS),
    ]
