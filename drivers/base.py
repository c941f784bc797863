"""The compute driver interface: a source of facts.

A driver reports the nodes it manages, the hardware of each as plain records
(``drivers/records.py``), the instances on each, and the events it sees
(``drivers/events.py``); it knows nothing of the provider tree nor of
Placement, and imports nothing from ``agent/`` (an import-linter contract).
The spec's ``update_provider_tree`` is the agent's thin adapter over it
(:class:`agent.shape.adapter.DriverAdapter`), which hands the records to the
one layout every driver shares: switching drivers over the same hardware
changes nothing in Placement.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Collection
from typing import Any

from oslo_config import cfg

from drivers.device_views import DeviceView, offered_device_views
from drivers.events import EventEmitter, Watch
from drivers.records import HostResources, Instance

LOG = logging.getLogger(__name__)


class ComputeDriver(EventEmitter, abc.ABC):
    """Base class of every compute driver.

    Args:
        conf: the loaded configuration (the layout policy is read from it).
    """

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf

    @abc.abstractmethod
    def get_nodenames(self) -> list[str]:
        """Names of the compute nodes this driver manages (usually one: the host).

        Returns:
            Nodenames; each becomes the name of a root resource provider.
        """

    @abc.abstractmethod
    def get_host_resources(self, nodename: str) -> HostResources:
        """What node ``nodename`` offers right now.

        Raises:
            KeyError: ``nodename`` is not managed by this driver.
        """

    @abc.abstractmethod
    def list_instances(self, nodename: str) -> list[Instance]:
        """The instances on node ``nodename`` (every one that holds resources).

        Raises:
            KeyError: ``nodename`` is not managed by this driver.
        """

    def hypervisor_hostname(self) -> str | None:
        """The name the hypervisor gives this host, or None when the driver has none.

        nova names a compute node after it (libvirt's ``getHostname()``,
        ``nova/virt/libvirt/host.py`` ``get_hostname``), which need not be
        ``[DEFAULT] host``: a takeover looks nova's compute node up by it.
        """
        return None

    def unreadable_instances(self, nodename: str) -> set[str]:
        """UUIDs of instances the last :meth:`list_instances` saw but could not read.

        Such an instance exists (a transient driver error, a definition that
        does not parse) but its needs are unknown: the allocation audit
        neither writes nor clears its allocation until it can be read again.
        Drivers that always read what they list return an empty set.
        """
        return set()

    def read_instances(
        self, nodename: str, uuids: Collection[str]
    ) -> tuple[dict[str, Instance], set[str]]:
        """The instances ``uuids`` of node ``nodename`` as they are now (an event's targeted read).

        The default lists every instance; a driver that can look one up
        (libvirt, by domain UUID) overrides it.

        Returns:
            ``({uuid: Instance}, unreadable UUIDs)``: a UUID in neither is no
            longer on the node (see :meth:`unreadable_instances` for what
            unreadable means).

        Raises:
            KeyError: ``nodename`` is not managed by this driver.
        """
        wanted = set(uuids)
        found = {i.uuid: i for i in self.list_instances(nodename) if i.uuid in wanted}
        return found, self.unreadable_instances(nodename) & wanted

    def watch(self) -> Watch | None:
        """Start emitting the events seen on the host (drivers.events) to subscribers.

        Subscribe listeners first: events are emitted from the watcher's own
        thread from the moment this returns. The default watches nothing:
        such a driver is brought in step by the periodic cycle only.

        Returns:
            The running watcher (``stop()`` it), or None when nothing is watched.

        Raises:
            OSError: what the driver watches cannot be opened (udev's netlink
                socket, inotify); the caller logs it and relies on the cycle.
        """
        return None

    def device_views(self, nodename: str) -> tuple[DeviceView, ...]:
        """The devices of node ``nodename`` and why each is offered (``discover --devices``).

        This default knows only the devices the driver's records offer (its
        host description), all offered; a driver that reads the hardware
        (the host driver) overrides it to show every device and why the
        others are not offered.

        Raises:
            KeyError: ``nodename`` is not managed by this driver.
        """
        return offered_device_views(self.get_host_resources(nodename), type(self).__name__)


class SingleNodeDriver(ComputeDriver):
    """A driver of exactly one node, this host: ``[DEFAULT] host`` (host, libvirt).

    Subclasses set :attr:`settings` (``drivers.host.settings.HostSettings``)
    in their constructor.
    """

    settings: Any

    def get_nodenames(self) -> list[str]:
        """``[DEFAULT] host``: the one node."""
        return [self.settings.nodename]

    def _check(self, nodename: str) -> None:
        """Raise ``KeyError`` unless ``nodename`` is this driver's node."""
        if nodename != self.settings.nodename:
            raise KeyError(
                f"node {nodename!r} is not managed here (only {self.settings.nodename!r})"
            )
