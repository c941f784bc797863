"""The resource tracker: one cycle of the agent, node by node.

For every nodename the driver reports (DESIGN.md, "Data flow"):

1. read the tree Placement holds (``ReportClient.get_provider_tree_and_ensure_root``);
2. let the driver edit it (``update_provider_tree``); at start-up a
   ``ReshapeNeeded`` runs the reshape flow of reshape-provider-tree.txt
   (:func:`agent.tracker.reshape.reshape_node`: allocations read, driver called again
   with them, one ``POST /reshaper``); outside start-up it is fatal;
3. keep the providers of hardware that is gone while instances still hold
   allocations on it, with ``reserved = total`` (nothing is deleted from
   under an instance; :mod:`agent.tracker.retained`);
4. write what differs (``update_from_provider_tree``);
5. audit the instances' allocations (read by :mod:`agent.tracker.audit_read`,
   written by :mod:`agent.tracker.audit`).

Nodes are independent: each has its own lock, held only while that node is
worked on, and one node failing does not stop the others. Claims
(:meth:`ResourceTracker.instance_claim`, resource-objects.txt,
:mod:`agent.tracker.claims`) take the same per-node lock, so a claim and a
cycle never interleave on one node. What a cycle did is a
:class:`~agent.tracker.outcome.CycleOutcome`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from oslo_config import cfg

from agent.model import ownership
from agent.model.allocations import ConsumerAllocations
from agent.model.exceptions import AgentError, ReshapeFailed, ReshapeNeeded
from agent.placement.pool import Pool
from agent.placement.report import ReportClient
from agent.shape.planning import cpu_memory_providers, planned_classes
from agent.state.store import StateStore
from agent.tracker import audit_read
from agent.tracker.audit import AllocationAudit
from agent.tracker.audit_result import AuditRules
from agent.tracker.claims import InstanceClaims
from agent.tracker.outcome import CycleOutcome, NodeOutcome
from agent.tracker.retained import retain_gone_hardware
from agent.tracker.sharing import SharingProviders
from agent.tracker.targeted import EventBatch, TargetedOutcome, TargetedUpdates
from drivers.base import ComputeDriver
from drivers.events import DriverEvent, InstanceDestroyed, InstanceSpawning
from drivers.records import Instance

LOG = logging.getLogger(__name__)


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
        rules = AuditRules(
            remove_unknown_after=conf.compute.remove_unknown_allocations_after,
            build_grace=conf.instance_build_timeout,
            rewrite_drift=conf.compute.rewrite_differing_allocations,
        )
        self.audit = AllocationAudit(report, state, rules, clock)
        self.sharing = SharingProviders(driver, report)
        self.claims = InstanceClaims(
            driver, report, self.audit, self.sharing, conf.compute.owner_trait
        )
        # Independent nodes synced as many at once as requests may be in flight.
        self.nodes = Pool(report.pool.size, name="node")
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # nodename -> providers of gone hardware kept by the last layout (targeted
        # updates leave their allocations as held, as the audit does).
        self.retained: dict[str, set[str]] = {}
        self.targeted = TargetedUpdates(
            driver, report, self.audit, self.sharing, conf.compute.owner_trait, self.retained
        )

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
            synced = self.nodes.map(lambda n: self._update_node(n, startup), nodenames)
            outcome.nodes.extend(synced)
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
            with self._lock(nodename):
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
        # One discovery and one tree read, also for a start-up reshape.
        with self.driver.one_discovery(nodename):
            try:
                self.driver.update_provider_tree(tree, nodename)
            except ReshapeNeeded:
                if not startup:
                    raise
                from agent.tracker.reshape import reshape_node  # the flow is only for start-up

                LOG.warning("node %s: the provider tree changes shape: reshaping", nodename)
                outcome = reshape_node(self.report, self.driver, nodename, tree=tree)
                assert outcome.tree is not None  # not a dry run: the tree is there
                tree = outcome.tree
                reshaped = outcome.reshaped
                if reshaped:
                    before = tree.copy()  # what Placement holds now: the tree just written
        owner_trait = self.conf.compute.owner_trait
        keep = retain_gone_hardware(self.report, owner_trait, nodename, before, tree)
        self.retained[nodename] = keep
        node.retained = sorted(tree.data(u).name for u in keep)
        node.sync = self.report.update_from_provider_tree(tree)
        node.sync.reshaped = node.sync.reshaped or reshaped
        node.problems.extend(node.sync.errors)
        node.providers = len(tree)

        owned = ownership.owned(tree, nodename, owner_trait)
        sharing = self.sharing.lookup(tree, nodename)
        cpu_providers = cpu_memory_providers(tree, owned)
        new = node.sync.new
        view = audit_read.refresh(
            self.report,
            self.state,
            nodename,
            owned,
            cpu_providers,
            sharing,
            new,
            tree=tree.get_provider_uuids(),
        )
        view.produces = planned_classes(tree, owned)
        listed = self.driver.list_instances(nodename)
        expected = self.driver.expected_allocations(
            tree, nodename, sharing, held=view.held, instances=listed
        )
        # An instance the driver saw but could not read still runs: not gone.
        unreadable = self.driver.unreadable_instances(nodename)
        present = {i.uuid for i in listed} | unreadable
        owners = {i.uuid: (i.project_id, i.user_id) for i in listed}
        audit = self.audit.reconcile(view, expected, present, keep, owners, unreadable)
        node.allocations_written = audit.written
        node.allocations_removed = audit.removed
        node.unknown_consumers = audit.unknown
        node.moving = audit.moving
        node.drift = audit.drift
        node.consumers = [s.to_json() for s in audit.statuses]
        node.problems.extend(audit.errors)

    # -- claims --------------------------------------------------------------------

    def instance_claim(self, nodename: str, instance: Instance) -> ConsumerAllocations:
        """Check that ``instance`` fits node ``nodename`` and write its allocation.

        Under the node's lock; the rules are :mod:`agent.tracker.claims`'s
        (resource-objects.txt, ``can_provide``).

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
            return self.claims.claim(nodename, instance)

    def abort_instance_claim(self, nodename: str, instance: Instance) -> None:
        """Give back what ``instance`` holds on node ``nodename`` (spec: abort a claim).

        Raises:
            PlacementError: the allocation could not be removed.
        """
        with self._lock(nodename):
            self.claims.give_back(nodename, instance)

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

    # -- events --------------------------------------------------------------------

    def apply_events(self, batch: EventBatch) -> TargetedOutcome:
        """Make the targeted updates a batch of driver events needs (:mod:`agent.tracker.targeted`).

        Devices first (an instance's allocation may name a provider just
        created), then instances; each node under its lock, so an update
        and a cycle or claim never interleave on one node. A node that fails
        does not stop the others.

        Returns:
            A :class:`TargetedOutcome`; failures are in ``errors``, not raised.

        Raises:
            ReshapeNeeded: a device change needs the tree to change shape
                (fatal, as in a cycle: a restart performs the reshape).
        """
        outcome = TargetedOutcome()
        client = self.report.client
        before = client.total_requests()
        client.deadline = time.monotonic() + self.conf.cycle_timeout
        try:
            known = self.driver.get_nodenames()
            devices = set(known) if None in batch.devices else batch.devices & set(known)
            for nodename in sorted(n for n in devices if n is not None):
                self._targeted(nodename, outcome, lambda n: self.targeted.devices(n, outcome))
            for nodename, uuids in sorted(batch.instances.items()):
                if nodename in known:
                    self._targeted(
                        nodename, outcome, lambda n, u=uuids: self.targeted.instances(n, u, outcome)
                    )
        except Exception as exc:  # the driver could not list its nodes
            if isinstance(exc, ReshapeNeeded):
                raise
            outcome.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            client.deadline = None
            outcome.requests = client.total_requests() - before
        return outcome

    def _targeted(
        self, nodename: str, outcome: TargetedOutcome, update: Callable[[str], None]
    ) -> None:
        with self._lock(nodename):
            try:
                update(nodename)
            except ReshapeNeeded:
                raise
            except Exception as exc:  # one node's failure must not stop the others
                line = f"node {nodename}: targeted update failed: {type(exc).__name__}: {exc}"
                LOG.error("%s", line)
                outcome.errors.append(line)
