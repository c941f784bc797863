"""The compute driver interface.

Contract (DESIGN.md, reshape-provider-tree.txt): a driver reports the nodes
it manages, the hardware of each as plain records, and the instances on
each. ``update_provider_tree`` edits a :class:`ProviderTree` in place; the
shape itself is decided by :mod:`agent.shape.layout`, shared by every driver, so
switching drivers over the same hardware changes nothing in Placement.
"""

from __future__ import annotations

import abc
import contextlib
import logging
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from oslo_config import cfg

from agent.model.allocations import ByProvider, ConsumerAllocations
from agent.model.provider_tree import ProviderTree
from agent.shape import update
from agent.shape.layout import desired_providers
from agent.shape.planning import plan_allocations
from agent.shape.policy import LayoutPolicy, policy_from_conf
from agent.shape.reshape import PlacedBy
from drivers.device_views import offered_device_views
from drivers.errors import ConfigError
from drivers.events import EventEmitter, Watch
from drivers.records import (
    DeviceView,
    HostResources,
    Instance,
)

LOG = logging.getLogger(__name__)


class ComputeDriver(EventEmitter, abc.ABC):
    """Base class of every compute driver.

    Args:
        conf: the loaded configuration (the layout policy is read from it).
    """

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf
        self.policy: LayoutPolicy = policy_from_conf(conf)
        # What update_provider_tree last laid out, per node: expected_allocations
        # must see the same hardware, and discovery (sysfs, libvirt) is not free.
        self._laid_out: dict[str, HostResources] = {}
        # Nodes inside one_discovery(): their records once read (None: not yet).
        self._held: dict[str, HostResources | None] = {}

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

    def update_provider_tree(
        self,
        provider_tree: ProviderTree,
        nodename: str,
        allocations: dict[str, dict[str, Any]] | None = None,
    ) -> PlacedBy:
        """Edit ``provider_tree`` in place to show what ``nodename`` has now.

        Discovers the node (:meth:`get_host_resources`) and hands the records
        to :func:`agent.shape.update.update_provider_tree`: the layout, the
        detection of a reshape from the tree passed in (what Placement holds)
        and, with allocations, the move of each consumer's amounts (instances
        this driver knows as :meth:`expected_allocations` says, other
        consumers by the documented rule, docs/reshape.md). Every driver
        inherits this.

        Args:
            provider_tree: the tree, holding at least the compute node
                ``nodename`` (as last read from Placement).
            nodename: the node to update.
            allocations: None on an ordinary cycle. When a reshape is being
                performed: ``{consumer_uuid: GET /allocations/{uuid} body}``
                of every consumer of the tree, edited in place (spec:
                reshape-provider-tree.txt, "Allocations Parameter").

        Returns:
            ``{consumer_uuid: "driver" | "rule"}``: how the reshape placed
            each consumer whose allocations moved (the reshape report's
            ``placed_by``); empty when nothing moved. A subclass overriding
            this method returns what it got from ``super()``.

        Raises:
            ReshapeNeeded: the tree must change shape and ``allocations`` is None.
            ConfigError: the configuration does not fit the host.
        """
        host = self._discover(nodename)
        self._laid_out[nodename] = host
        return update.update_provider_tree(
            provider_tree,
            nodename,
            host,
            self.policy,
            allocations,
            lambda tree: self.expected_allocations(tree, nodename),
        )

    @contextlib.contextmanager
    def one_discovery(self, nodename: str) -> Iterator[None]:
        """Within the block, ``nodename``'s hardware is discovered at most once.

        The start-up reshape calls :meth:`update_provider_tree` twice (the
        spec's ``ReshapeNeeded`` and the call with allocations): the second
        must lay out the very records the first found the moves on, and
        discovery (sysfs, libvirt) is not free. Re-entering for the same node
        keeps the outer block's records.
        """
        if nodename in self._held:
            yield
            return
        self._held[nodename] = None
        try:
            yield
        finally:
            del self._held[nodename]

    def _discover(self, nodename: str) -> HostResources:
        """:meth:`get_host_resources`, once per :meth:`one_discovery` block."""
        if nodename not in self._held:
            return self.get_host_resources(nodename)
        host = self._held[nodename]
        if host is None:
            host = self._held[nodename] = self.get_host_resources(nodename)
        return host

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

    def check_host_config(self) -> None:
        """Refuse a configuration that does not fit the host (start and reload).

        Every node is discovered once and laid out: a ``reserved_host_*``
        option above the host's total, or a CPU set naming a CPU the host
        lacks, raises here so ``compute-agent run`` exits 2 with one line
        instead of failing every cycle. A node that cannot be discovered now
        is only warned about: the cycles report it and retry.

        Raises:
            ConfigError: naming the option and the host's figure.
        """
        for nodename in self.get_nodenames():
            try:
                host = self.get_host_resources(nodename)
            except ConfigError:
                raise
            except Exception as exc:  # a host read failing now is the cycles' business
                LOG.warning("node %s: configuration not checked against it: %s", nodename, exc)
                continue
            desired_providers(host, self.policy)

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

    def laid_out_resources(self, nodename: str) -> HostResources:
        """The hardware the last :meth:`update_provider_tree` of ``nodename`` laid out.

        Discovers it now when no layout has been done yet in this process.

        Raises:
            KeyError: ``nodename`` is not managed by this driver.
        """
        host = self._laid_out.get(nodename)
        return host if host is not None else self.get_host_resources(nodename)

    def expected_allocations(
        self,
        provider_tree: ProviderTree,
        nodename: str,
        sharing_provider_uuid: str | None = None,
        held: Mapping[str, ByProvider] | None = None,
        instances: list[Instance] | None = None,
    ) -> dict[str, ConsumerAllocations]:
        """The allocation each instance of ``nodename`` should hold, by consumer UUID.

        ``provider_tree`` must already have been through
        :meth:`update_provider_tree`; the hardware that call laid out is used
        again rather than discovered a second time. See
        :func:`agent.shape.planning.plan_allocations`.

        Args:
            held: what Placement holds on the node's CPU and memory providers,
                ``{consumer: {provider: {rc: amount}}}`` (sticky NUMA placement).
            instances: the node's instances when the caller already listed
                them this cycle; None lists them.
        """
        host = self.laid_out_resources(nodename)
        return plan_allocations(
            self.list_instances(nodename) if instances is None else instances,
            host,
            provider_tree,
            self.policy,
            sharing_provider_uuid,
            held,
        )


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
