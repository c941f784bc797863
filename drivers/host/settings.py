"""The host driver's configuration, parsed and checked once at start."""

from __future__ import annotations

from dataclasses import dataclass

from oslo_config import cfg

from drivers.errors import ConfigError
from drivers.host.cpu import check_cpu_sets
from drivers.host.cpuset import parse_cpu_spec
from drivers.host.device_spec import DeviceSpec, parse_device_specs
from drivers.host.options import GROUP


@dataclass(frozen=True, slots=True)
class HostSettings:
    """What discovery needs from the configuration.

    Attributes:
        nodename: ``[DEFAULT] host``.
        sysfs_root: ``[host_driver] sysfs_root``.
        hotplug_debounce: ``[host_driver] hotplug_debounce``, seconds.
        dedicated: ``[compute] cpu_dedicated_set`` parsed, or None when unset.
        shared: ``[compute] cpu_shared_set`` parsed, or None when unset.
        instances_path: ``[DEFAULT] instances_path``.
        shared_storage: ``[compute] shared_storage``.
        specs: ``[pci] device_spec`` parsed.
        enabled_mdev_types: ``[devices] enabled_mdev_types``.
        pci_in_placement: ``[pci] report_in_placement``.
    """

    nodename: str
    sysfs_root: str = "/"
    hotplug_debounce: float = 2.0
    dedicated: frozenset[int] | None = None
    shared: frozenset[int] | None = None
    instances_path: str = "/var/lib/compute-agent/instances"
    shared_storage: bool = False
    specs: tuple[DeviceSpec, ...] = ()
    enabled_mdev_types: tuple[str, ...] = ()
    pci_in_placement: bool = False


def _cpu_option(conf: cfg.ConfigOpts, name: str) -> frozenset[int] | None:
    text = conf.compute[name]
    if text is None or not text.strip():
        return None
    try:
        return parse_cpu_spec(text)
    except ValueError as exc:
        raise ConfigError(f"[compute] {name} {text!r}: {exc}") from None


def settings_from_conf(conf: cfg.ConfigOpts) -> HostSettings:
    """Read and check the host driver's options.

    Raises:
        ConfigError: a CPU set or device spec does not parse, the CPU sets
            overlap, or a spec tags ``one_time_use`` without ``[pci]
            report_in_placement`` (nova's ``PciDeviceSpec`` refuses it: only
            Placement's reserved amount keeps such a device from a second
            user); each message names the option and the text.
    """
    dedicated = _cpu_option(conf, "cpu_dedicated_set")
    shared = _cpu_option(conf, "cpu_shared_set")
    check_cpu_sets(dedicated, shared)
    specs = parse_device_specs(conf.pci.device_spec)
    for spec in specs:
        if spec.one_time_use and not conf.pci.report_in_placement:
            raise ConfigError(
                f"[pci] device_spec {spec.text}: one_time_use=true requires [pci] "
                "report_in_placement = true (as nova); turn it on or drop the tag"
            )
    return HostSettings(
        nodename=conf.host,
        sysfs_root=conf[GROUP].sysfs_root,
        hotplug_debounce=conf[GROUP].hotplug_debounce,
        dedicated=dedicated,
        shared=shared,
        instances_path=conf.instances_path,
        shared_storage=conf.compute.shared_storage,
        specs=specs,
        enabled_mdev_types=tuple(conf.devices.enabled_mdev_types),
        pci_in_placement=conf.pci.report_in_placement,
    )
