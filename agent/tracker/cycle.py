"""The resource tracker: one cycle of the agent, node by node.

For every nodename the driver reports (DESIGN.md, "Data flow"):

1. read the tree Placement holds (``ReportClient.get_provider_tree_and_ensure_root``);
2. let the driver edit it (``update_provider_tree``); at start-up a
   ``ReshapeNeeded`` runs the reshape flow of reshape-provider-tree.txt
   (:func:`agent.tracker.reshape.reshape_node`: allocations read, driver called again
   with them, one ``POST /reshaper``); outside start-up it is fatal;
3. keep the providers of hardware that is gone while instances still hold
   allocations on it, with ``reserved = total`` (nothing is deleted from
   under an instance);
4. write what differs (``update_from_provider_tree``);
5. audit the instances' allocations (:mod:`agent.tracker.audit`).

Nodes are independent: each has its own lock, held only while that node is
worked on, and one node failing does not stop the others. Claims
(:meth:`ResourceTracker.instance_claim`, resource-objects.txt) take the same
per-node lock, so a claim and a cycle never interleave on one node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from oslo_config import cfg

from agent.model import ownership
from agent.model.allocations import ConsumerAllocations
from agent.model.exceptions import AgentError, CapacityExceeded, ReshapeFailed, ReshapeNeeded
from agent.model.provider_tree import ProviderTree
from agent.placement.report import ReportClient, SyncResult
from agent.shape.planning import cpu_memory_providers, plan_allocations
from agent.state.store import StateStore
from agent.tracker.audit import AllocationAudit
from drivers.base import ComputeDriver
from drivers.events import DriverEvent, InstanceDestroyed, InstanceSpawning
from drivers.records import Instance

LOG = logging.getLogger(__name__)


@dataclass
class NodeOutcome:
    """What one cycle did for one node.

    Attributes:
        nodename: the compute node.
        ok: the node's providers and allocations were brought in step.
        error: why not, when ``ok`` is False.
        providers: providers in the node's tree after the cycle.
        sync: what was written of the tree (providers, inventories, traits,
            aggregates; ``reshaped`` when a ``POST /reshaper`` was made).
        retained: providers of gone hardware kept because they are in use.
        allocations_written: consumers whose allocations were written.
        allocations_removed: consumers whose allocations here were removed.
        unknown_consumers: consumers left alone (not instances of this host).
        problems: writes that failed without failing the node (logged).
    """

    nodename: str
    ok: bool = True
    error: str = ""
    providers: int = 0
    sync: SyncResult = field(default_factory=SyncResult)
    retained: list[str] = field(default_factory=list)
    allocations_written: list[str] = field(default_factory=list)
    allocations_removed: list[str] = field(default_factory=list)
    unknown_consumers: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class CycleOutcome:
    """What one cycle did.

    Attributes:
        startup: this was the start-up cycle.
        started: start, seconds since the epoch.
        duration: seconds.
        nodes: one :class:`NodeOutcome` per node.
        error: a failure before any node was worked on (the driver could
            not list its nodes), else empty.
        requests: Placement requests the cycle made.
    """

    startup: bool
    started: float
    duration: float = 0.0
    nodes: list[NodeOutcome] = field(default_factory=list)
    error: str = ""
    requests: int = 0
    state_error: str = ""

    @property
    def status(self) -> str:
        """``ok``; ``degraded`` when a write was refused or state could not be saved
        (Placement may lack an allocation or a provider); ``failed`` when a node failed."""
        if self.error or not all(n.ok for n in self.nodes):
            return "failed"
        if self.state_error or any(n.problems for n in self.nodes):
            return "degraded"
        return "ok"

    @property
    def ok(self) -> bool:
        """True when every node succeeded and nothing was left unwritten."""
        return self.status == "ok"

    @property
    def progressed(self) -> bool:
        """True when Placement was reached and at least one node was worked on (watchdog)."""
        return not self.error and any(n.ok for n in self.nodes)

    def summary(self) -> str:
        """One line for logs and ``STATUS=`` of systemd."""
        if self.error:
            return f"cycle failed: {self.error}"
        failed = [n.nodename for n in self.nodes if not n.ok]
        degraded = [n.nodename for n in self.nodes if n.ok and n.problems]
        if failed:
            head = f"cycle failed for {', '.join(failed)}"
        elif degraded:
            problems = sum(len(n.problems) for n in self.nodes)
            head = f"cycle degraded ({problems} write(s) refused) for {', '.join(degraded)}"
        elif self.state_error:
            head = f"cycle degraded ({self.state_error})"
        else:
            head = "cycle ok"
        written = sum(len(n.allocations_written) for n in self.nodes)
        removed = sum(len(n.allocations_removed) for n in self.nodes)
        return (
            f"{head}: {len(self.nodes)} node(s), {sum(n.providers for n in self.nodes)} "
            f"providers, allocations written {written}, removed {removed}, "
            f"{self.requests} placement requests, {self.duration:.2f} s"
        )

    def to_json(self) -> dict[str, Any]:
        """The outcome as stored in ``last_cycle.json``."""
        return {
            "ok": self.ok,
            "status": self.status,
            "state_error": self.state_error,
            "startup": self.startup,
            "started": self.started,
            "finished": self.started + self.duration,
            "duration": self.duration,
            "error": self.error,
            "requests": self.requests,
            "summary": self.summary(),
            "nodes": [asdict(n) for n in self.nodes],
        }


class ResourceTracker:
    """Keeps Placement in step with a driver's nodes and instances.

    Args:
        conf: the loaded configuration.
        driver: the compute driver.
        report: the Placement façade.
        state: the state directory.
        clock: seconds since the epoch (tests pass their own).
    """

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        driver: ComputeDriver,
        report: ReportClient,
        state: StateStore,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.conf = conf
        self.driver = driver
        self.report = report
        self.state = state
        self.clock = clock
        self.audit = AllocationAudit(
            report, state, conf.compute.remove_unknown_allocations_after, clock
        )
        self._locks: dict[str, threading.Lock] = {}
        # nodename -> (compute node aggregates, sharing provider UUID or None)
        self._sharing: dict[str, tuple[frozenset[str], str | None]] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, nodename: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(nodename, threading.Lock())

    # -- the cycle ---------------------------------------------------------------

    def update_available_resource(self, startup: bool) -> CycleOutcome:
        """Bring Placement in step with every node of the driver.

        Args:
            startup: this is the service's first cycle; a needed reshape is
                performed (reshape-provider-tree.txt, "start-up").

        Returns:
            A :class:`CycleOutcome`; node failures are in it, not raised.

        Raises:
            ReshapeNeeded: a node needs a reshape and ``startup`` is False
                (fatal: a restart performs it).
            ReshapeFailed: ``POST /reshaper`` failed (fatal; Placement unchanged).
        """
        outcome = CycleOutcome(startup=startup, started=self.clock())
        client = self.report.client
        before = client.total_requests()
        start = time.monotonic()
        client.deadline = start + self.conf.cycle_timeout
        try:
            try:
                nodenames = self.driver.get_nodenames()
            except Exception as exc:  # any driver failure fails this cycle only
                outcome.error = f"driver {type(self.driver).__name__} could not list nodes: {exc}"
                LOG.error("%s", outcome.error)
                nodenames = []
            for nodename in nodenames:
                with self._lock(nodename):
                    outcome.nodes.append(self._update_node(nodename, startup))
        finally:
            client.deadline = None
        outcome.state_error = self.state.save_error or ""
        outcome.duration = time.monotonic() - start
        outcome.requests = self.report.client.total_requests() - before
        (LOG.info if outcome.ok else LOG.warning)("%s", outcome.summary())
        return outcome

    def _update_node(self, nodename: str, startup: bool) -> NodeOutcome:
        node = NodeOutcome(nodename)
        try:
            self._sync_node(nodename, startup, node)
        except (ReshapeNeeded, ReshapeFailed):
            raise
        except Exception as exc:  # one node's failure must not stop the others
            node.ok = False
            node.error = f"{type(exc).__name__}: {exc}"
            # One line at ERROR, naming what failed; the traceback only for debugging.
            LOG.error("node %s: cycle failed: %s", nodename, node.error)
            if not isinstance(exc, AgentError):
                LOG.debug("node %s: traceback of the failure", nodename, exc_info=True)
        return node

    def _sync_node(self, nodename: str, startup: bool, node: NodeOutcome) -> None:
        tree = self.report.get_provider_tree_and_ensure_root(nodename)
        before = tree.copy()
        reshaped = False
        try:
            self.driver.update_provider_tree(tree, nodename)
        except ReshapeNeeded:
            if not startup:
                raise
            from agent.tracker.reshape import reshape_node  # the reshape flow is only for start-up

            LOG.warning("node %s: the provider tree changes shape: reshaping", nodename)
            reshape_node(self.report, self.driver, nodename)
            reshaped = True
            tree = self.report.get_provider_tree_and_ensure_root(nodename)
            before = tree.copy()
            self.driver.update_provider_tree(tree, nodename)
        keep = self._retain_gone_hardware(nodename, before, tree)
        node.retained = sorted(tree.data(u).name for u in keep)
        node.sync = self.report.update_from_provider_tree(tree)
        node.sync.reshaped = node.sync.reshaped or reshaped
        node.problems.extend(node.sync.errors)
        node.providers = len(tree)

        owned = self._owned(tree, nodename)
        sharing = self._sharing_provider(tree, nodename)
        view = self.audit.refresh(nodename, owned, cpu_memory_providers(tree, owned), sharing)
        listed = self.driver.list_instances(nodename)
        expected = self.driver.expected_allocations(
            tree, nodename, sharing, held=view.held, instances=listed
        )
        # An instance the driver saw but could not read still runs: not gone.
        present = {i.uuid for i in listed} | self.driver.unreadable_instances(nodename)
        audit = self.audit.reconcile(view, expected, present, keep)
        node.allocations_written = audit.written
        node.allocations_removed = audit.removed
        node.unknown_consumers = audit.unknown
        node.problems.extend(audit.errors)

    def _owned(self, tree: ProviderTree, nodename: str) -> set[str]:
        return ownership.owned(tree, nodename, self.conf.compute.owner_trait)

    def _sharing_provider(self, tree: ProviderTree, nodename: str) -> str | None:
        """The shared-storage provider for DISK_GB when the node's disks are shared."""
        if not self.driver.laid_out_resources(nodename).shared_storage:
            return None
        aggregates = tree.data(nodename).aggregates
        cached = self._sharing.get(nodename)
        # Asked again only when the compute node's aggregates change (or on
        # SIGHUP, which builds a new tracker): a steady cycle stays one request.
        if cached is not None and cached[0] == aggregates:
            return cached[1]
        found = self.report.sharing_providers(set(aggregates), "DISK_GB")
        self._sharing[nodename] = (aggregates, found[0] if found else None)
        if len(found) > 1:
            LOG.warning(
                "node %s: several sharing providers offer DISK_GB (%s); using %s",
                nodename,
                ", ".join(found),
                found[0],
            )
        return found[0] if found else None

    def _retain_gone_hardware(
        self, nodename: str, before: ProviderTree, tree: ProviderTree
    ) -> set[str]:
        """Put back providers the layout removed that still have allocations.

        Their inventory comes back with ``reserved = total``: nothing new
        lands there, and what instances hold stays until they are gone; the
        provider is removed on the first cycle after its usage is zero.

        Returns:
            UUIDs of the providers kept this way.
        """
        kept: set[str] = set()
        root = before.data(nodename).uuid
        for uuid in before.get_provider_uuids(root)[1:]:
            old = before.data(uuid)
            ours = ownership.is_ours(old, nodename, self.conf.compute.owner_trait)
            if tree.exists(uuid) or not ours or not old.inventory:
                continue
            usages = self.report.provider_usages(uuid)
            if not any(usages.values()):
                continue
            parent = old.parent_uuid if old.parent_uuid and tree.exists(old.parent_uuid) else root
            if tree.exists(old.name):
                LOG.error(
                    "node %s: provider %s (%s) is gone from the host but holds allocations "
                    "%s, and a new provider took its name; its allocations stay in Placement",
                    nodename,
                    old.name,
                    uuid,
                    usages,
                )
                continue
            tree.new_child(old.name, parent, uuid=uuid)
            tree.update_inventory(
                uuid, {rc: replace(inv, reserved=inv.total) for rc, inv in old.inventory.items()}
            )
            tree.update_traits(uuid, old.traits)
            kept.add(uuid)
            LOG.warning(
                "node %s: %s is gone from the host but instances still hold %s on it; it "
                "stays in Placement with reserved = total until they are gone",
                nodename,
                old.name,
                {rc: n for rc, n in usages.items() if n},
            )
        return kept

    # -- claims --------------------------------------------------------------------

    def instance_claim(self, nodename: str, instance: Instance) -> ConsumerAllocations:
        """Check that ``instance`` fits node ``nodename`` and write its allocation.

        Every requested amount is checked with ``Inventory.check`` against
        the provider's current usage in Placement (resource-objects.txt,
        ``can_provide``), before anything is written; Placement checks again
        when it writes, so a concurrent claim elsewhere cannot oversubscribe.
        The write merges: what the consumer already holds on providers that
        are not this agent's (the source host of a migration, a network
        agent's bandwidth provider) is kept (:meth:`AllocationAudit.write`).

        Args:
            nodename: the node the instance is to run on.
            instance: the instance (flavor, devices, NUMA cells).

        Returns:
            The allocation written on this host's providers; empty when the
            instance uses nothing.

        Raises:
            CapacityExceeded: a class does not fit, naming it and the numbers
                (requested, used, capacity).
            PlacementError: Placement refused the allocation.
        """
        with self._lock(nodename):
            tree = self.report.get_provider_tree_and_ensure_root(nodename)
            self.driver.update_provider_tree(tree, nodename)
            host = self.driver.laid_out_resources(nodename)
            owned = self._owned(tree, nodename)
            sharing = self._sharing_provider(tree, nodename)
            # Planned with the node's other instances where Placement holds them,
            # so the new one lands where the audit would put it and moves no one.
            plan = plan_allocations(
                [*self.driver.list_instances(nodename), instance],
                host,
                tree,
                self.driver.policy,
                sharing,
                self.audit.record(nodename).by_consumer(owned),
            ).get(instance.uuid)
            if plan is None:
                self.audit.add_instance(nodename, instance.uuid)
                return ConsumerAllocations(project_id=instance.project_id, user_id=instance.user_id)
            self._check_capacity(tree, plan)
            shared = plan.without(owned)
            self.audit.add_instance(nodename, instance.uuid, shared)
            self.audit.write(instance.uuid, plan, owned | set(shared))
            LOG.info("instance %s: claimed %s on %s", instance.uuid, plan.allocations, nodename)
            return plan

    def _check_capacity(self, tree: ProviderTree, plan: ConsumerAllocations) -> None:
        """Raise ``CapacityExceeded`` unless every amount of ``plan`` fits now."""
        for rp, amounts in plan.allocations.items():
            usages = self.report.provider_usages(rp)
            if tree.exists(rp):
                inventory = tree.data(rp).inventory
            else:  # the sharing provider, outside the node's tree
                inventory = self.report.provider_inventory(rp)
            for rc, amount in amounts.items():
                if rc not in inventory:
                    raise CapacityExceeded(
                        rc, amount, usages.get(rc, 0), 0, f"provider {rp} has no {rc}"
                    )
                inventory[rc].check(amount, usages.get(rc, 0))

    def abort_instance_claim(self, nodename: str, instance: Instance) -> None:
        """Give back what ``instance`` holds on node ``nodename`` (spec: abort a claim).

        Raises:
            PlacementError: the allocation could not be removed.
        """
        with self._lock(nodename):
            tree = self.report.get_provider_tree_and_ensure_root(nodename)
            shared = self.audit.forget_instance(nodename, instance.uuid)
            self.report.remove_allocations_from(instance.uuid, self._owned(tree, nodename) | shared)
            LOG.info("instance %s: claim on %s given back", instance.uuid, nodename)

    def handle_event(self, event: DriverEvent) -> None:
        """Claim on :class:`InstanceSpawning`, give back on :class:`InstanceDestroyed`.

        Subscribe it with ``driver.subscribe(tracker.handle_event)``; a claim
        that fails raises here and so vetoes the spawn (drivers.events).

        Raises:
            CapacityExceeded, PlacementError: as :meth:`instance_claim` and
                :meth:`abort_instance_claim`.
        """
        if isinstance(event, InstanceSpawning):
            self.instance_claim(event.nodename, event.instance)
        elif isinstance(event, InstanceDestroyed):
            self.abort_instance_claim(event.nodename, event.instance)
