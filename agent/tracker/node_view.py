"""One node as the tracker works on it: discovered once, read once, laid out, planned.

The periodic cycle, claims, targeted updates and the start-up reshape all
start from a :class:`NodeView` (docs/architecture.md, "The node view"):

1. the tree Placement holds (``ReportClient.get_provider_tree_and_ensure_root``,
   one listing);
2. the driver's facts laid out on it (:class:`agent.shape.adapter.DriverAdapter`,
   one discovery; at start-up a ``ReshapeNeeded`` runs the spec's reshape flow,
   :func:`agent.tracker.reshape.reshape_node`, elsewhere it is raised);
3. gone hardware still in use kept (:mod:`agent.tracker.retained`);
4. what is the agent's (:func:`agent.model.ownership.owned`), the sharing
   provider DISK_GB goes to (:class:`agent.tracker.sharing.SharingProviders`),
   the providers read every cycle, the classes the planner produces;
5. the plan of any instances (:func:`agent.shape.planning.plan_allocations`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from agent.audit.audit_view import NodeShape
from agent.model import ownership
from agent.model.allocations import ByProvider, ConsumerAllocations
from agent.model.exceptions import ReshapeNeeded
from agent.model.provider_tree import ProviderTree
from agent.placement.details import Vouch
from agent.placement.report import ReportClient
from agent.shape.adapter import DriverAdapter
from agent.shape.planning import cpu_memory_providers, plan_allocations, planned_classes
from agent.tracker.doubled import check_not_doubled
from agent.tracker.retained import retain_gone_hardware
from agent.tracker.sharing import SharingProviders
from drivers.records import HostResources, Instance

LOG = logging.getLogger(__name__)


@dataclass
class NodeView:
    """One node's tree, hardware and ownership, as one cycle (or claim, or event) sees them.

    Attributes:
        nodename: the compute node.
        tree: the tree laid out from the driver's facts (what Placement should hold).
        before: the tree as Placement held it when read (after a start-up
            reshape: as the reshape wrote it).
        host: the hardware records laid out.
        owned: UUIDs of the providers of the node the agent owns.
        find_sharing: asks for the shared-storage provider (a request on shared
            storage): :attr:`sharing` calls it on first use only, so an event
            that plans nothing asks nothing.
        keep: owned providers of gone hardware kept while in use (their
            allocations stay as held).
        reshaped: a start-up reshape was written (``POST /reshaper``).
    """

    nodename: str
    tree: ProviderTree
    before: ProviderTree
    host: HostResources
    owned: set[str]
    find_sharing: Callable[[], str | None]
    adapter: DriverAdapter
    keep: set[str] = field(default_factory=set)
    reshaped: bool = False

    @cached_property
    def sharing(self) -> str | None:
        """The shared-storage provider DISK_GB goes to, or None (asked once)."""
        return self.find_sharing()

    @property
    def cpu_providers(self) -> set[str]:
        """The owned providers with VCPU, PCPU or MEMORY_MB (read every cycle)."""
        return cpu_memory_providers(self.tree, self.owned)

    @property
    def produces(self) -> frozenset[str]:
        """The classes the planner gives instances on the owned providers."""
        return planned_classes(self.tree, self.owned)

    def shape(self, created: Iterable[str] = ()) -> NodeShape:
        """What the allocation audit needs of this node, as plain data (``created``: the
        providers this cycle's writes created)."""
        return NodeShape(
            nodename=self.nodename,
            owned=frozenset(self.owned),
            cpu_providers=frozenset(self.cpu_providers),
            tree=frozenset(self.tree.get_provider_uuids()),
            sharing=self.sharing,
            produces=self.produces,
            created=frozenset(created),
        )

    def plan(
        self, instances: Iterable[Instance], held: Mapping[str, ByProvider] | None = None
    ) -> dict[str, ConsumerAllocations]:
        """What each of ``instances`` should hold (sticky to what Placement ``held``)."""
        return plan_allocations(
            instances, self.host, self.tree, self.adapter.policy, self.sharing, held
        )


class NodeViews:
    """Builds :class:`NodeView` s for the tracker, and remembers what each kept.

    Args:
        adapter: the driver, under the spec's calls.
        report: the Placement façade.
        sharing: finds a node's shared-storage provider.
        owner_trait: ``[compute] owner_trait``.
    """

    def __init__(
        self,
        adapter: DriverAdapter,
        report: ReportClient,
        sharing: SharingProviders,
        owner_trait: str,
    ) -> None:
        self.adapter = adapter
        self.report = report
        self.sharing = sharing
        self.owner_trait = owner_trait
        # nodename -> providers of gone hardware kept by the last layout (targeted
        # instance updates leave their allocations as held, as the audit does).
        self.retained: dict[str, set[str]] = {}
        self._asked: set[str] = set()
        # nodename -> the child traits as last stored (loaded on the node's first look).
        self._stored_traits: dict[str, dict[str, frozenset[str]]] = {}

    def look(
        self,
        nodename: str,
        *,
        startup: bool = False,
        retain: bool = True,
        vouch: Vouch | None = None,
    ) -> NodeView:
        """Read the node's tree once, discover it once, lay it out (module docstring).

        Args:
            startup: a needed reshape is performed (the service's first cycle).
            retain: keep gone hardware still in use (False for a claim,
                which writes no tree).
            vouch: asked about providers whose generation moved before their
                details are read (:mod:`agent.placement.allocation_reads`).

        Raises:
            ReshapeNeeded: the tree must change shape outside start-up.
            ReshapeFailed: a start-up ``POST /reshaper`` failed.
            ConfigError: the configuration does not fit the host.
            NovaTrackerBeside: Placement's compute node holds CPU or memory classes again
                while its NUMA cells hold them (:mod:`agent.tracker.doubled`).
            PlacementError, PlacementUnavailable: a read failed.
        """
        self._hypervisor_name(nodename)
        self._load_child_traits(nodename)
        tree = self.report.get_provider_tree_and_ensure_root(nodename, vouch=vouch)
        # Before the layout and any write: nova-compute's tracker undoing the NUMA layout.
        check_not_doubled(nodename, tree, self.adapter.policy.model_numa)
        before = tree.copy()
        reshaped = False
        with self.adapter.one_discovery(nodename):
            try:
                self.adapter.update_provider_tree(tree, nodename)
            except ReshapeNeeded:
                if not startup:
                    raise
                from agent.tracker.reshape import reshape_node  # the flow is only for start-up

                LOG.warning("node %s: the provider tree changes shape: reshaping", nodename)
                outcome = reshape_node(self.report, self.adapter, nodename, tree=tree)
                assert outcome.tree is not None  # not a dry run: the tree is there
                tree = outcome.tree
                reshaped = outcome.reshaped
                if reshaped:
                    before = tree.copy()  # what Placement holds now: the tree just written
        self._save_child_traits(nodename, tree)
        keep: set[str] = set()
        if retain:
            keep = retain_gone_hardware(self.report, self.owner_trait, nodename, before, tree)
            self.retained[nodename] = keep
        return self._view(nodename, tree, before, keep, reshaped)

    def _load_child_traits(self, nodename: str) -> None:
        """Give the adapter the child traits the state directory recorded, once per node."""
        if nodename in self._stored_traits:
            return
        stored = {u: frozenset(t) for u, t in self.report.child_traits(nodename).items()}
        self._stored_traits[nodename] = stored
        memory = self.adapter.child_traits.setdefault(nodename, {})
        for uuid, traits in stored.items():
            memory.setdefault(uuid, traits)

    def _save_child_traits(self, nodename: str, tree: ProviderTree) -> None:
        """Record the child traits the layout just laid out, when they changed (before the
        flush writes them: a trait recorded but not written is only removed sooner);
        providers no longer in the tree are forgotten."""
        memory = self.adapter.child_traits.setdefault(nodename, {})
        for uuid in set(memory) - set(tree.get_provider_uuids()):
            del memory[uuid]
        if memory != self._stored_traits.get(nodename):
            doc = {uuid: sorted(traits) for uuid, traits in sorted(memory.items())}
            self.report.set_child_traits(nodename, doc)
            self._stored_traits[nodename] = dict(memory)

    def _hypervisor_name(self, nodename: str) -> None:
        """Tell the mirror the hypervisor's name for a single-node host, once (a takeover
        of nova's compute node named after it, docs/deployment.md)."""
        if self.report.hypervisor_named(nodename) or nodename in self._asked:
            return
        self._asked.add(nodename)
        if len(self.adapter.get_nodenames()) != 1:
            return  # nova names a node after the hypervisor only on a one-node host
        self.report.single_node(nodename, self.adapter.hypervisor_hostname())

    def cached(self, nodename: str) -> NodeView:
        """The node as last read and laid out in this process, without a request if
        it was read (an event's targeted instance update)."""
        tree = self.report.cached_tree(nodename)
        if tree is None:  # no cycle read it yet in this process
            tree = self.report.get_provider_tree_and_ensure_root(nodename)
        keep = set(self.retained.get(nodename, ()))
        return self._view(nodename, tree, tree, keep, False)

    def _view(
        self,
        nodename: str,
        tree: ProviderTree,
        before: ProviderTree,
        keep: set[str],
        reshaped: bool,
    ) -> NodeView:
        host = self.adapter.laid_out_resources(nodename)
        return NodeView(
            nodename=nodename,
            tree=tree,
            before=before,
            host=host,
            owned=ownership.owned(tree, nodename, self.owner_trait),
            find_sharing=lambda: self.sharing.lookup(tree, nodename, host),
            adapter=self.adapter,
            keep=keep,
            reshaped=reshaped,
        )
