"""The configuration that shapes a compute node's provider tree, read once from the options."""

from __future__ import annotations

from dataclasses import dataclass, field

from oslo_config import cfg

from agent.conf import config as agent_config
from agent.conf.provider_config import ProviderConfig, load_provider_configs
from agent.model import ownership


@dataclass(frozen=True, slots=True)
class LayoutPolicy:
    """The configuration that shapes the tree (from :func:`policy_from_conf`).

    Attributes:
        cpu_allocation_ratio: VCPU ratio, or None to keep Placement's / use initial.
        ram_allocation_ratio: MEMORY_MB ratio, or None.
        disk_allocation_ratio: DISK_GB ratio, or None.
        initial_cpu_allocation_ratio: VCPU ratio of a new inventory.
        initial_ram_allocation_ratio: MEMORY_MB ratio of a new inventory.
        initial_disk_allocation_ratio: DISK_GB ratio of a new inventory.
        reserved_host_cpus: VCPUs kept back (count).
        reserved_host_memory_mb: MiB kept back.
        reserved_host_disk_mb: MiB kept back (reported in whole GiB, rounded up).
        model_numa: NUMA cells become child providers.
        enabled_mdev_types: mdev types offered as VGPU, in preference order.
        resource_class_renames: ``(OLD, NEW)`` pairs: NEW is reported wherever
            OLD would be (``[compute] resource_class_renames``; docs/reshape.md).
        mdev_addresses: ``(type, (GPU address, ...))`` from ``[mdev_$(TYPE)]
            device_addresses``: those GPUs offer that type only (nova).
        mdev_classes: ``(type, class)`` from ``[mdev_$(TYPE)] mdev_class``.
        mdev_max_instances: ``(type, limit)`` from ``[mdev_$(TYPE)] max_instances``.
        owner_trait: ``[compute] owner_trait``, on every provider laid out.
        pci_in_placement: ``[pci] report_in_placement``: whole devices and
            VFs without a physnet get nova's PCI-in-placement providers.
        provider_configs: the entries of ``[compute] provider_config_location``'s
            files (:mod:`agent.conf.provider_config`), applied by
            :mod:`agent.shape.provider_configs`.
    """

    cpu_allocation_ratio: float | None = None
    ram_allocation_ratio: float | None = None
    disk_allocation_ratio: float | None = None
    initial_cpu_allocation_ratio: float = 4.0
    initial_ram_allocation_ratio: float = 1.0
    initial_disk_allocation_ratio: float = 1.0
    reserved_host_cpus: int = 0
    reserved_host_memory_mb: int = 512
    reserved_host_disk_mb: int = 0
    model_numa: bool = False
    enabled_mdev_types: tuple[str, ...] = field(default_factory=tuple)
    resource_class_renames: tuple[tuple[str, str], ...] = ()
    mdev_addresses: tuple[tuple[str, tuple[str, ...]], ...] = ()
    mdev_classes: tuple[tuple[str, str], ...] = ()
    mdev_max_instances: tuple[tuple[str, int], ...] = ()
    owner_trait: str = ownership.DEFAULT_OWNER_TRAIT
    pci_in_placement: bool = False
    provider_configs: tuple[ProviderConfig, ...] = ()


def policy_from_conf(conf: cfg.ConfigOpts) -> LayoutPolicy:
    """Read the :class:`LayoutPolicy` from a loaded configuration."""
    return LayoutPolicy(
        cpu_allocation_ratio=agent_config.allocation_ratio(conf, "cpu"),
        ram_allocation_ratio=agent_config.allocation_ratio(conf, "ram"),
        disk_allocation_ratio=agent_config.allocation_ratio(conf, "disk"),
        initial_cpu_allocation_ratio=agent_config.initial_allocation_ratio(conf, "cpu"),
        initial_ram_allocation_ratio=agent_config.initial_allocation_ratio(conf, "ram"),
        initial_disk_allocation_ratio=agent_config.initial_allocation_ratio(conf, "disk"),
        reserved_host_cpus=conf.reserved_host_cpus,
        reserved_host_memory_mb=conf.reserved_host_memory_mb,
        reserved_host_disk_mb=conf.reserved_host_disk_mb,
        model_numa=conf.numa.model_in_placement,
        enabled_mdev_types=tuple(conf.devices.enabled_mdev_types),
        resource_class_renames=tuple(agent_config.resource_class_renames(conf).items()),
        mdev_addresses=agent_config.mdev_addresses(conf),
        mdev_classes=agent_config.mdev_classes(conf),
        mdev_max_instances=tuple(
            (t, conf[f"mdev_{t}"].max_instances)
            for t in conf.devices.enabled_mdev_types
            if conf[f"mdev_{t}"].max_instances
        ),
        owner_trait=agent_config.owner_trait(conf),
        pci_in_placement=conf.pci.report_in_placement,
        provider_configs=load_provider_configs(conf.compute.provider_config_location),
    )
