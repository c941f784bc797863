"""The host driver: this machine's real hardware, no instances.

``compute-agent discover --driver host`` shows it on any Linux box; the
libvirt driver reuses the same collectors for its hardware half.
"""

from __future__ import annotations

from oslo_config import cfg

from drivers.base import SingleNodeDriver
from drivers.device_views import DeviceView
from drivers.events import DevicesChanged
from drivers.host.devices import device_views
from drivers.host.discovery import Discovery, discover_host
from drivers.host.hotplug import HotplugMonitor
from drivers.host.settings import HostSettings, settings_from_conf
from drivers.records import HostResources, Instance


class HostDriver(SingleNodeDriver):
    """Reports the hardware found under ``[host_driver] sysfs_root`` as one node.

    Args:
        conf: loaded configuration.

    Raises:
        ConfigError: at start, for a ``[pci] device_spec`` or CPU set that
            does not parse, naming its text and the reason.
    """

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self.settings: HostSettings = settings_from_conf(conf)
        self.last: Discovery | None = None

    def discover(self) -> Discovery:
        """Run a full discovery now (also kept as :attr:`last`).

        Raises:
            ConfigError, SysfsError, OSError: see :func:`discover_host`.
        """
        self.last = discover_host(self.settings)
        return self.last

    def get_host_resources(self, nodename: str) -> HostResources:
        """What the host has right now (a fresh discovery on every call)."""
        self._check(nodename)
        return self.discover().resources

    def device_views(self, nodename: str) -> tuple[DeviceView, ...]:
        """Every PCI function of the host and why it is or is not offered (a fresh discovery).

        Raises:
            KeyError: ``nodename`` is not this host.
            ConfigError, SysfsError, OSError: see :func:`discover_host`.
        """
        self._check(nodename)
        return device_views(self.discover(), self.settings)

    def watch(self) -> HotplugMonitor | None:
        """Emit :class:`~drivers.events.DevicesChanged` (debounced, naming the PCI addresses)
        when udev sees devices change.

        PCI, network and mdev devices (:mod:`drivers.host.hotplug`). Nothing is
        watched when ``[host_driver] sysfs_root`` is not ``/`` (a captured
        tree does not change).

        Returns:
            The started monitor (call ``stop()`` on it), or None.

        Raises:
            OSError: udev's netlink socket cannot be opened.
        """
        if self.settings.sysfs_root != "/":
            return None
        nodename = self.settings.nodename
        monitor = HotplugMonitor(
            lambda addresses: self.emit(DevicesChanged(nodename, addresses, "udev")),
            self.settings.hotplug_debounce,
        )
        monitor.start()
        return monitor

    def list_instances(self, nodename: str) -> list[Instance]:
        """Always empty: this driver manages hardware, not instances."""
        self._check(nodename)
        return []
