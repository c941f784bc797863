"""The spec's driver calls over a driver that is a pure source of facts.

A driver (``drivers/``) knows nodenames, host resources, instances and
events, and nothing of the provider tree (as NFD's ``source/source.go``: a
FeatureSource discovers, the worker labels). The calls of
reshape-provider-tree.txt and DESIGN.md's contract,
``update_provider_tree(provider_tree, nodename, allocations=None)`` and the
expected allocations of a node's instances, are this thin adapter's: it
discovers through the driver and hands the records to :mod:`agent.shape`
(:func:`agent.shape.update.update_provider_tree`,
:func:`agent.shape.planning.plan_allocations`), so every driver reports the
same hardware the same way.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Protocol

from oslo_config import cfg

from agent.model.allocations import ByProvider, ConsumerAllocations
from agent.model.exceptions import ConfigError
from agent.model.provider_tree import ProviderTree
from agent.shape import update
from agent.shape.layout import ChildTraits, desired_providers
from agent.shape.planning import plan_allocations
from agent.shape.policy import LayoutPolicy, policy_from_conf
from agent.shape.reshape import PlacedBy
from drivers.records import HostResources, Instance

LOG = logging.getLogger(__name__)


class FactSource(Protocol):
    """What the adapter asks of a driver (``drivers.base.ComputeDriver``)."""

    def get_nodenames(self) -> list[str]:
        """The driver's nodenames."""
        ...

    def get_host_resources(self, nodename: str) -> HostResources:
        """What node ``nodename`` offers now (raises ``KeyError`` for another node)."""
        ...

    def list_instances(self, nodename: str) -> list[Instance]:
        """The instances on node ``nodename``."""
        ...

    def unreadable_instances(self, nodename: str) -> set[str]:
        """Instances the last listing saw but could not read."""
        ...

    def read_instances(
        self, nodename: str, uuids: Collection[str]
    ) -> tuple[dict[str, Instance], set[str]]:
        """The instances ``uuids`` as they are now, and those unreadable."""
        ...

    def hypervisor_hostname(self) -> str | None:
        """The hypervisor's own name for this host, or None."""
        ...


class DriverAdapter:
    """A driver's facts laid out by the agent's rules, under the spec's names.

    Args:
        driver: the compute driver (any :class:`FactSource`).
        policy: the layout policy (``agent.shape.policy.policy_from_conf``).
    """

    def __init__(self, driver: FactSource, policy: LayoutPolicy) -> None:
        self.driver = driver
        self.policy = policy
        # What update_provider_tree last laid out, per node: expected_allocations
        # must see the same hardware, and discovery (sysfs, libvirt) is not free.
        self._laid_out: dict[str, HostResources] = {}
        # Nodes inside one_discovery(): their records once read (None: not yet).
        self._held: dict[str, HostResources | None] = {}
        # The traits laid out on each node's child providers (ChildTraits): the
        # tracker loads and saves them in the state directory (NodeViews).
        self.child_traits: dict[str, ChildTraits] = {}

    # -- the driver's facts, as asked ------------------------------------------------

    def get_nodenames(self) -> list[str]:
        """The driver's nodenames."""
        return self.driver.get_nodenames()

    def list_instances(self, nodename: str) -> list[Instance]:
        """The driver's instances of ``nodename``."""
        return self.driver.list_instances(nodename)

    def unreadable_instances(self, nodename: str) -> set[str]:
        """Instances of ``nodename`` the last listing could not read."""
        return self.driver.unreadable_instances(nodename)

    def read_instances(
        self, nodename: str, uuids: Collection[str]
    ) -> tuple[dict[str, Instance], set[str]]:
        """The driver's targeted read of instances ``uuids``."""
        return self.driver.read_instances(nodename, uuids)

    def hypervisor_hostname(self) -> str | None:
        """The hypervisor's own name for this host (nova's compute node name), or None."""
        return self.driver.hypervisor_hostname()

    # -- the spec's calls ----------------------------------------------------------------

    def update_provider_tree(
        self,
        provider_tree: ProviderTree,
        nodename: str,
        allocations: dict[str, dict[str, Any]] | None = None,
        sharing_provider_uuid: str | None = None,
    ) -> PlacedBy:
        """Edit ``provider_tree`` in place to show what ``nodename`` has now.

        Discovers the node (once per :meth:`one_discovery` block) and hands
        the records to :func:`agent.shape.update.update_provider_tree`: the
        layout, the detection of a reshape from the tree passed in (what
        Placement holds) and, with allocations, the move of each consumer's
        amounts (instances as :meth:`expected_allocations` says, other
        consumers by the documented rule, docs/reshape.md).

        Args:
            provider_tree: the tree, holding at least the compute node
                ``nodename`` (as last read from Placement).
            nodename: the node to update.
            allocations: None on an ordinary cycle. When a reshape is being
                performed: ``{consumer_uuid: GET /allocations/{uuid} body}``
                of every consumer of the tree, edited in place (spec:
                reshape-provider-tree.txt, "Allocations Parameter").
            sharing_provider_uuid: for a reshape, the shared-storage provider
                the node's instances' DISK_GB goes to (their plan is
                :meth:`expected_allocations`'s with it), None when none is.

        Returns:
            ``{consumer_uuid: "driver" | "rule"}``: how the reshape placed
            each consumer whose allocations moved; empty when nothing moved.

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
            lambda tree: self.expected_allocations(tree, nodename, sharing_provider_uuid),
            self.child_traits.setdefault(nodename, {}),
        )

    @contextlib.contextmanager
    def one_discovery(self, nodename: str) -> Iterator[None]:
        """Within the block, ``nodename``'s hardware is discovered at most once.

        The start-up reshape calls :meth:`update_provider_tree` twice (the
        spec's ``ReshapeNeeded`` and the call with allocations): the second
        must lay out the very records the first found the moves on.
        Re-entering for the same node keeps the outer block's records.
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
        """The driver's ``get_host_resources``, once per :meth:`one_discovery` block."""
        if nodename not in self._held:
            return self.driver.get_host_resources(nodename)
        host = self._held[nodename]
        if host is None:
            host = self._held[nodename] = self.driver.get_host_resources(nodename)
        return host

    def laid_out_resources(self, nodename: str) -> HostResources:
        """The hardware the last :meth:`update_provider_tree` of ``nodename`` laid out.

        Discovers it now when no layout has been done yet in this process.

        Raises:
            KeyError: ``nodename`` is not managed by the driver.
        """
        host = self._laid_out.get(nodename)
        return host if host is not None else self.driver.get_host_resources(nodename)

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
        :meth:`update_provider_tree`, whose hardware is used again. See
        :func:`agent.shape.planning.plan_allocations`.

        Args:
            held: what Placement holds on the node's CPU and memory providers,
                ``{consumer: {provider: {rc: amount}}}`` (sticky NUMA placement).
            instances: the node's instances when the caller already listed
                them this cycle; None lists them.
        """
        host = self.laid_out_resources(nodename)  # before the listing, as a driver reads them
        return plan_allocations(
            self.driver.list_instances(nodename) if instances is None else instances,
            host,
            provider_tree,
            self.policy,
            sharing_provider_uuid,
            held,
        )

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
        for nodename in self.driver.get_nodenames():
            try:
                host = self.driver.get_host_resources(nodename)
            except ConfigError:
                raise
            except Exception as exc:  # a host read failing now is the cycles' business
                LOG.warning("node %s: configuration not checked against it: %s", nodename, exc)
                continue
            desired_providers(host, self.policy)


def adapt(driver: FactSource, conf: cfg.ConfigOpts | None = None) -> DriverAdapter:
    """``driver`` under the spec's calls, laid out by the policy of ``conf``.

    Args:
        conf: the configuration; None takes the driver's own (``driver.conf``,
            as every driver of ``drivers/`` keeps it).

    Raises:
        ConfigError: an option of the layout policy cannot be used.
    """
    return DriverAdapter(driver, policy_from_conf(conf or driver.conf))  # type: ignore[attr-defined]
