"""The libvirt driver: the host as libvirt sees it, and every domain as an instance.

A thin :class:`~drivers.base.ComputeDriver` over two readers that share one
connection: :class:`~drivers.libvirt.host_view.HostView` (the host's
resources, by the host driver's rules, so the same hardware gives the same
tree with either driver, DESIGN.md) and
:class:`~drivers.libvirt.instances.InstanceView` (each domain, running or not,
as an :class:`~drivers.records.Instance`). The driver keeps the warnings of
the last read and logs each one once.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from oslo_config import cfg

from drivers.base import SingleNodeDriver
from drivers.device_use import has_one_time_use, mark_in_use
from drivers.errors import AgentError
from drivers.host.settings import HostSettings, settings_from_conf
from drivers.libvirt.connection import LibvirtConnection
from drivers.libvirt.host_view import HostView, LibvirtHost
from drivers.libvirt.instances import InstanceView
from drivers.libvirt.options import GROUP
from drivers.libvirt.watch import LibvirtWatch
from drivers.records import HostResources, Instance

LOG = logging.getLogger(__name__)


class LibvirtDriver(SingleNodeDriver):
    """Reports a libvirt hypervisor (``[libvirt] connection_uri``) as one node.

    Args:
        conf: loaded configuration.
        connection: the connection to use; default: one to
            ``[libvirt] connection_uri`` with the reconnect options.

    Attributes:
        warnings: the warnings of the last read (host or instances), one line each.
        host: reads the host's resources (:attr:`HostView.last` is the last read).
        instances: reads the domains.

    Raises:
        ConfigError: at start, for a ``[pci] device_spec`` or CPU set that
            does not parse, or ``capabilities_file`` with a non-test URI.
    """

    def __init__(self, conf: cfg.ConfigOpts, connection: LibvirtConnection | None = None) -> None:
        super().__init__(conf)
        opts = conf[GROUP]
        self.settings: HostSettings = settings_from_conf(conf)
        self.connection = connection or LibvirtConnection(
            opts.connection_uri,
            attempts=opts.reconnect_attempts,
            min_delay=opts.reconnect_min_delay,
            max_delay=max(opts.reconnect_max_delay, opts.reconnect_min_delay),
        )
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        self.host = HostView(conf, self.connection, self.settings, self._warn)
        self.instances = InstanceView(
            self.connection,
            opts.unowned_project_id,
            opts.unowned_user_id,
            self.host.devices,
            self._warn,
            self.settings.shared,
        )

    def _warn(self, message: str) -> None:
        """Record a warning; log it the first time only (cycles repeat every minute)."""
        self.warnings.append(message)
        if message not in self._warned:
            self._warned.add(message)
            LOG.warning("%s", message)

    # -- ComputeDriver ------------------------------------------------------------

    def get_host_resources(self, nodename: str) -> HostResources:
        """What the hypervisor offers now (a fresh read on every call).

        Raises:
            LibvirtConnectionError: libvirt cannot be reached (after backoff).
            LibvirtCallError: a host-wide call failed (capabilities, node info,
                device listing).
            ConfigError: the CPU sets name CPUs the host does not have online.

        With a ``one_time_use`` device, the domains are read too, to tell
        which such devices a domain holds (:mod:`drivers.device_use`).
        """
        self._check(nodename)
        resources = self.discover().resources
        if has_one_time_use(resources):
            # A one-time-use device stays reserved while a domain holds it (nova).
            domains = self.instances.read(self.instances.list_domains())
            resources = mark_in_use(resources, domains)
        return resources

    def hypervisor_hostname(self) -> str | None:
        """libvirt's ``virConnectGetHostname`` (nova's compute node name), or None
        when libvirt cannot be asked now (warned about: the takeover then goes by
        ``[DEFAULT] host`` and nova's ``compute_id`` only)."""
        try:
            conn = self.connection.get()
            return self.connection.call("virConnectGetHostname", conn.getHostname) or None
        except AgentError as exc:
            self._warn(f"libvirt's hostname could not be read: {exc}")
            return None

    def discover(self) -> LibvirtHost:
        """Read the host now, its warnings replacing the last read's.

        Raises:
            See :meth:`get_host_resources`.
        """
        self.warnings = []
        return self.host.discover()

    def list_instances(self, nodename: str) -> list[Instance]:
        """Every domain, running or not, as an instance.

        A domain that vanished between listing and reading, or whose XML or
        metadata cannot be used, is warned about (naming it); the rest are
        returned. See :meth:`InstanceView.read`.

        Raises:
            LibvirtConnectionError, LibvirtCallError: the listing itself failed.
        """
        self._check(nodename)
        self.warnings = []
        return self.instances.read(self.instances.list_domains())

    def unreadable_instances(self, nodename: str) -> set[str]:
        """Domains the last :meth:`list_instances` listed but could not read.

        Their XML could not be fetched (other than because the domain went
        away) or parsed: such a domain still runs, so it is neither an
        instance to write nor a gone one to clear (its allocation stays).
        """
        self._check(nodename)
        return set(self.instances.unreadable)

    def read_instances(
        self, nodename: str, uuids: Collection[str]
    ) -> tuple[dict[str, Instance], set[str]]:
        """The domains ``uuids`` as instances, each looked up by UUID (an event's targeted read).

        Returns:
            ``({uuid: Instance}, unreadable UUIDs)``; a UUID in neither has no
            domain any more (undefined, or a transient domain stopped).

        Raises:
            LibvirtConnectionError, LibvirtCallError: a lookup failed other
                than by the domain being gone.
        """
        self._check(nodename)
        domains = [d for d in map(self.instances.lookup, sorted(set(uuids))) if d is not None]
        found = {i.uuid: i for i in self.instances.read(domains)}
        return found, set(self.instances.unreadable)

    def watch(self) -> LibvirtWatch:
        """Emit events for domains and node devices changing, and for a re-opened connection.

        See :mod:`drivers.libvirt.watch`.

        Returns:
            The started watch (``stop()`` it); when libvirt cannot be reached
            now it registers on the connection the next cycle opens.
        """
        nodename = self.settings.nodename
        opts = self.conf[GROUP]
        watch = LibvirtWatch(self.connection, nodename, self.emit, opts.reconnect_max_delay)
        watch.start()
        return watch
