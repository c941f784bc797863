"""The agent's own options: host, intervals, ratios and reservations, layout, fake driver.

Option names and defaults follow nova.conf where nova has the same knob
(``reserved_host_memory_mb``, ``cpu_allocation_ratio``, ``[compute]
cpu_dedicated_set`` ...), so an operator can carry values over unchanged.
Other layers define their own (agent.placement.options,
agent.service.options, each driver's); :mod:`agent.conf.config` registers
them all and checks the values.
"""

from __future__ import annotations

import socket

from oslo_config import cfg

DEFAULT_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<current_hostname>",
        help="Name of this compute host. Drivers that manage one node (host, "
        "libvirt) use it as the nodename: the name of the compute node's "
        "root resource provider in Placement.",
    ),
    cfg.StrOpt(
        "state_path",
        default="/var/lib/compute-agent",
        help="Directory for the agent's state: the compute node UUIDs, the last "
        "state seen in Placement, the embedded placement database.",
    ),
    cfg.IntOpt(
        "update_interval",
        default=60,
        min=1,
        help="Seconds between two resource-tracking cycles.",
    ),
    cfg.IntOpt(
        "update_resources_interval",
        default=0,
        help="Nova's option: seconds between resource updates; 0 uses the default. "
        "When positive and update_interval is left at its default, it sets "
        "update_interval; negative (nova: never) is warned about and ignored.",
    ),
    cfg.StrOpt(
        "compute_driver",
        help="Nova's option: 'libvirt.LibvirtDriver' selects the libvirt driver when "
        "[compute] driver is unset. Another nova driver is refused by name.",
    ),
    cfg.FloatOpt(
        "cpu_allocation_ratio",
        default=None,
        min=0.0,
        help="Overcommit ratio of VCPU. Unset or 0.0 (nova's rule): new compute nodes get "
        "initial_cpu_allocation_ratio and an existing inventory keeps the ratio "
        "Placement holds (so it can be changed through the Placement API).",
    ),
    cfg.FloatOpt(
        "ram_allocation_ratio",
        default=None,
        min=0.0,
        help="Overcommit ratio of MEMORY_MB. Unset or 0.0: as cpu_allocation_ratio, "
        "with initial_ram_allocation_ratio.",
    ),
    cfg.FloatOpt(
        "disk_allocation_ratio",
        default=None,
        min=0.0,
        help="Overcommit ratio of DISK_GB. Unset or 0.0: as cpu_allocation_ratio, "
        "with initial_disk_allocation_ratio.",
    ),
    cfg.FloatOpt(
        "initial_cpu_allocation_ratio",
        default=4.0,
        min=0.0,
        help="VCPU allocation ratio of a new inventory when cpu_allocation_ratio is unset.",
    ),
    cfg.FloatOpt(
        "initial_ram_allocation_ratio",
        default=1.0,
        min=0.0,
        help="MEMORY_MB allocation ratio of a new inventory when ram_allocation_ratio is unset.",
    ),
    cfg.FloatOpt(
        "initial_disk_allocation_ratio",
        default=1.0,
        min=0.0,
        help="DISK_GB allocation ratio of a new inventory when disk_allocation_ratio is unset.",
    ),
    cfg.IntOpt(
        "reserved_host_cpus",
        default=0,
        min=0,
        help="VCPUs kept for the host: reported as VCPU reserved.",
    ),
    cfg.IntOpt(
        "reserved_host_memory_mb",
        default=512,
        min=0,
        help="MiB of RAM kept for the host: reported as MEMORY_MB reserved.",
    ),
    cfg.IntOpt(
        "reserved_host_disk_mb",
        default=0,
        min=0,
        help="MiB of disk kept for the host: reported as DISK_GB reserved, "
        "rounded up to whole GiB.",
    ),
]

COMPUTE_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "driver",
        help="The compute driver that discovers resources and instances: "
        "'fake' (a host description file, for tests and labs). "
        "'host' reports this machine's real hardware (sysfs, /proc, udev) with no instances.",
    ),
    cfg.StrOpt(
        "owner_trait",
        default="OWNER_NOVA",
        help="Trait that marks the providers this agent owns: the compute node carries it "
        "with COMPUTE_NODE, and so does every child provider laid out. Children without "
        "it (a network agent's, cyborg's OWNER_CYBORG) are never changed. Default: "
        "os-traits' OWNER_NOVA, which nova 34's scheduler requires on the compute node "
        "(root_required=OWNER_NOVA). Either a standard OWNER_* trait of os-traits or a "
        "CUSTOM_ trait. Providers carrying CUSTOM_OWNER_COMPUTE_AGENT (earlier agents) "
        "are taken over (docs/deployment.md).",
    ),
    cfg.StrOpt(
        "provider_config_location",
        default="/etc/nova/provider_config/",
        help="Nova's option: directory of provider config files (*.yaml, nova's schema "
        "1.0) adding custom inventories and traits to the providers of the tree: "
        "identification uuid or name $COMPUTE_NODE for every compute node, else a "
        "provider's name or UUID. A file that is malformed, or adds a class or trait the "
        "driver reports on that provider, is refused naming the file and the key "
        "(exit 2 at start and on reload). A missing directory adds nothing "
        "(docs/tree-shape.md).",
    ),
    cfg.ListOpt(
        "resource_class_renames",
        default=[],
        help="Resource classes to report under a new name, as OLD:NEW pairs, e.g. "
        "CUSTOM_NVME:PCI_DEVICE. OLD must be a CUSTOM_ class; NEW a standard class "
        "(os-resource-classes) or another CUSTOM_ class. The layout reports NEW wherever "
        "it would report OLD, and at start-up the inventories and the allocations held "
        "under OLD are moved to NEW in one POST /reshaper (docs/reshape.md).",
    ),
]

NUMA_OPTS: list[cfg.Opt] = [
    cfg.BoolOpt(
        "model_in_placement",
        default=False,
        help="Model each NUMA cell as a child provider ({nodename}_NUMA{N}, "
        "trait HW_NUMA_ROOT) holding that cell's VCPU, PCPU and MEMORY_MB; "
        "devices hang under the cell they are attached to.",
    ),
]

DEVICES_OPTS: list[cfg.Opt] = [
    cfg.ListOpt(
        "enabled_mdev_types",
        default=[],
        deprecated_opts=[cfg.DeprecatedOpt("enabled_vgpu_types", group="devices")],
        help="Mediated device (vGPU) types to offer, e.g. nvidia-35. Each "
        "physical GPU offers the type its existing mdevs have, else the first "
        "type of this list it supports. Empty: no vGPUs are reported.",
    ),
]

PCI_OPTS: list[cfg.Opt] = [
    cfg.BoolOpt(
        "report_in_placement",
        default=False,
        help="Nova's [pci] report_in_placement: each whole PCI device and each PF whose "
        "VFs are offered without a physical_network gets its own provider named "
        "{nodename}_{PCI ADDRESS} under the compute node, class resource_class of its "
        "device_spec or CUSTOM_PCI_{VENDOR}_{PRODUCT}, traits COMPUTE_MANAGED_PCI_DEVICE "
        "and the device_spec traits (nova/compute/pci_placement_translator.py), so "
        "nova's [pci] alias requests find them. PFs with a physical_network keep their "
        "SRIOV_NET_VF provider for neutron ports. Off: whole devices are reported as "
        "{nodename}_pci_{dddd_bb_ss_f} and VFs as SRIOV_NET_VF on their PF.",
    ),
]

FAKE_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "host_file",
        help="Host description (YAML) the fake driver reports; see docs/fake-host.md.",
    ),
    cfg.FloatOpt(
        "discovery_delay",
        default=0.0,
        min=0.0,
        help="Seconds the fake driver waits before reporting a node's hardware, to play "
        "a host whose discovery is slow (tests of the service's shutdown mid-cycle).",
    ),
    cfg.FloatOpt(
        "watch_delay",
        default=0.05,
        min=0.0,
        help="Seconds of quiet after the host file is written before 'compute-agent run' "
        "reads it again and turns what changed into events (an editor's save is several "
        "writes).",
    ),
]

COMPUTE_AGENT_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "nova_compute",
        default="auto",
        choices=[
            (
                "auto",
                "what this host shows when 'compute-agent run' starts: a process named "
                "nova-compute, or an active unit of nova_compute_units in systemd, is "
                "nova-compute beside the agent; no such process while every process of the "
                "host is visible is none; otherwise (the shipped unit's "
                "ProtectProc=invisible, a container's own PID namespace) the agent cannot "
                "tell, and refuses what it would refuse beside nova-compute",
            ),
            (
                "true",
                "nova-compute runs beside the agent (say so where the agent cannot see "
                "its process: another PID namespace, a container)",
            ),
            ("false", "the agent is the only writer of this host's provider tree"),
        ],
        help="Whether nova-compute runs beside the agent on this host now. Beside it, or "
        "when 'auto' cannot tell, 'compute-agent run' refuses the layouts nova-compute's "
        "resource tracker writes back ([numa] model_in_placement, [compute] "
        "resource_class_renames, shared storage) at start-up. Beside it, nova's node "
        "identity file "
        "(compute_id in nova_state_path) must be written when the agent creates the "
        "compute node. A compute_id file alone is not evidence: it stays after a takeover "
        "(docs/deployment.md, 'Beside nova-compute').",
    ),
    cfg.ListOpt(
        "nova_compute_units",
        default=["nova-compute.service", "openstack-nova-compute.service"],
        help="systemd units that run nova-compute on this host, asked by nova_compute = "
        "auto (systemctl show, over systemd's D-Bus API, which the unit's "
        "ProtectProc=invisible does not hide): one in an active state is nova-compute "
        "beside the agent. Debian and Ubuntu name it nova-compute.service, RDO and RHEL "
        "openstack-nova-compute.service; add the unit that starts a nova-compute "
        "container on this host. An inactive or missing unit is not evidence that "
        "nova-compute does not run.",
    ),
    cfg.StrOpt(
        "nova_state_path",
        help="nova-compute's [DEFAULT] state_path, where it keeps its node identity file "
        "compute_id (nova/virt/node.py). Unset: [DEFAULT] state_path (the same directory "
        "when the agent reads nova.conf and sets no state_path of its own). The agent "
        "reads compute_id there and next to each configuration file, as nova does, and "
        "writes it there when it creates a one-node host's compute node and none exists.",
    ),
]


_GROUPS: list[tuple[str, list[cfg.Opt]]] = [
    ("DEFAULT", DEFAULT_OPTS),
    ("compute", COMPUTE_OPTS),
    ("numa", NUMA_OPTS),
    ("devices", DEVICES_OPTS),
    ("pci", PCI_OPTS),
    ("fake", FAKE_OPTS),
    ("compute_agent", COMPUTE_AGENT_OPTS),
]


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """These options by group: DEFAULT, compute, numa, devices, pci, fake and compute_agent."""
    return list(_GROUPS)
