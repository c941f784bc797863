"""The resource tracker: one cycle of the agent, node by node.

For every nodename the driver reports (DESIGN.md, "Data flow"):

1. the node view (:class:`agent.tracker.node_view.NodeViews`): the tree
   Placement holds read once, the driver's facts discovered once and laid
   out by the spec's ``update_provider_tree`` (at start-up a
   ``ReshapeNeeded`` runs the reshape flow of reshape-provider-tree.txt,
   :func:`agent.tracker.reshape.reshape_node`; outside start-up it is
   fatal), gone hardware still in use kept with ``reserved = total``
   (:mod:`agent.tracker.retained`), what is owned and shared;
2. write what differs (``update_from_provider_tree``);
3. audit the instances' allocations (read by :mod:`agent.audit.audit_read`,
   each consumer's state and rule by :mod:`agent.audit.audit`); the
   consumers that hold nothing here yet are written with those of the other
   nodes, 100 per ``POST /allocations`` (:mod:`agent.tracker.new_allocations`),
   and each node's audit ends with what became of its own.

Nodes are independent: each has its own lock, held while that node is
worked on and until its new consumers' writes are applied, and one node
failing does not stop the others. Claims
(:meth:`ResourceTracker.instance_claim`, resource-objects.txt,
:mod:`agent.tracker.claims`) take the same per-node lock, so a claim and a
cycle never interleave on one node. What a cycle did is a
:class:`~agent.tracker.outcome.CycleOutcome`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Generator, Mapping

from oslo_config import cfg

from agent.audit.audit import AllocationAudit
from agent.audit.audit_decision import Listing
from agent.audit.audit_result import AuditDraft, AuditRules, BulkWrites
from agent.model.allocations import ConsumerAllocations
from agent.model.exceptions import AgentError, ReshapeFailed, ReshapeNeeded
from agent.placement.pool import Pool
from agent.placement.report import ReportClient
from agent.shape.adapter import DriverAdapter
from agent.shape.policy import policy_from_conf
from agent.state.store import StateStore
from agent.tracker.claims import InstanceClaims
from agent.tracker.new_allocations import NewAllocations, Pending
from agent.tracker.node_view import NodeViews
from agent.tracker.outcome import CycleOutcome, NodeOutcome
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
        report.refresh_details_after(conf.compute.resource_provider_association_refresh)
        rules = AuditRules(
            remove_unknown_after=conf.compute.remove_unknown_allocations_after,
            build_grace=conf.instance_build_timeout,
            rewrite_drift=conf.compute.rewrite_differing_allocations,
            absent_grace=conf.compute.absent_instance_timeout,
        )
        self.audit = AllocationAudit(report, state, rules, clock)
        # The driver's facts under the spec's calls, and one view of a node for all.
        self.adapter = DriverAdapter(driver, policy_from_conf(conf))
        self.views = NodeViews(
            self.adapter, report, SharingProviders(report), conf.compute.owner_trait
        )
        self.claims = InstanceClaims(self.views, report, self.audit)
        # Independent nodes synced as many at once as requests may be in flight.
        self.nodes = Pool(report.in_flight, name="node")
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.targeted = TargetedUpdates(self.views, report, self.audit)

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
        report = self.report
        before = report.requests()
        refused_before = report.keystone_refusals()
        start = time.monotonic()
        report.set_deadline(start + self.conf.cycle_timeout)
        try:
            try:
                nodenames = self.adapter.get_nodenames()
            except Exception as exc:  # any driver failure fails this cycle only
                outcome.error = f"driver {type(self.driver).__name__} could not list nodes: {exc}"
                LOG.error("%s", outcome.error)
                nodenames = []
            gather = NewAllocations(self.report)
            try:
                synced = self.nodes.map(lambda n: self._update_node(n, startup, gather), nodenames)
            except Exception:  # a fatal reshape error: the other nodes end as they would
                self._close(gather)
                raise
            self._close(gather)
            outcome.nodes.extend(synced)
        finally:
            report.set_deadline(None)
        outcome.state_error = self.state.save_error or ""
        outcome.duration = time.monotonic() - start
        outcome.requests = report.requests() - before
        outcome.keystone_refused = report.keystone_refusals() - refused_before
        (LOG.info if outcome.ok else LOG.warning)("%s", outcome.summary())
        return outcome

    def _close(self, gather: NewAllocations) -> None:
        """Write the last new consumers gathered, then finish their nodes (in parallel)."""
        self.nodes.map(lambda p: p.complete(p.bulk), gather.close())

    def _update_node(self, nodename: str, startup: bool, gather: NewAllocations) -> NodeOutcome:
        """Run :meth:`_node_sync` up to its writes in bulk, which ``gather`` sends with
        other nodes' (:mod:`agent.tracker.new_allocations`) and then resumes it with.

        Raises:
            ReshapeNeeded, ReshapeFailed: as :meth:`update_available_resource`.
        """
        node = NodeOutcome(nodename)
        steps = self._node_sync(nodename, startup, node)
        new = next(steps, None)
        if new is not None:
            gather.add(Pending(nodename, new, lambda bulk: _resume(steps, bulk)))
        gather.drain()
        return node

    def _node_sync(
        self, nodename: str, startup: bool, node: NodeOutcome
    ) -> Generator[Mapping[str, ConsumerAllocations], BulkWrites, None]:
        """One node's sync, top to bottom, under the node's lock.

        The tree read, laid out and written, the audit begun
        (:meth:`_sync_node`); its new consumers yielded, to be written with
        other nodes' (100 per ``POST /allocations``); resumed with what became
        of them, the audit finished (:meth:`AllocationAudit.finish`). The lock
        is released at the end, maybe by the thread of another node that
        resumed it once the batch carrying its consumers was answered.

        Yields:
            ``{consumer: allocations}`` to write in bulk (once, possibly empty).

        Raises:
            ReshapeNeeded, ReshapeFailed: as :meth:`update_available_resource`.
        """
        with self._lock(nodename):
            try:
                draft = self._sync_node(nodename, startup, node)
                bulk = yield draft.decision.bulk
                audit = self.audit.finish(draft, bulk)
            except (ReshapeNeeded, ReshapeFailed):
                raise
            except Exception as exc:  # one node's failure must not stop the others
                _failed(node, exc)
                return
        node.allocations_written = audit.written
        node.allocations_removed = audit.removed
        node.unknown_consumers = audit.unknown
        node.moving = audit.moving
        node.drift = audit.drift
        node.consumers = [s.to_json() for s in audit.statuses]
        node.problems.extend(audit.errors)

    def _sync_node(self, nodename: str, startup: bool, node: NodeOutcome) -> AuditDraft:
        """The node's tree written and its audit begun (:meth:`AllocationAudit.begin`)."""
        # One tree read and one discovery, also for a start-up reshape.
        # A moved generation that the node's allocations explain keeps the details; the
        # audit then takes what the vouch read (each fact read once per cycle).
        # The stored record is read once per cycle: by the vouch (if asked) and the audit.
        stored = self.audit.reader.stored(nodename)
        reads = self.audit.reader.reads(stored)
        look = self.views.look(nodename, startup=startup, vouch=reads)
        tree = look.tree
        node.retained = sorted(tree.data(u).name for u in look.keep)
        node.sync = self.report.update_from_provider_tree(tree)
        node.sync.reshaped = node.sync.reshaped or look.reshaped
        node.problems.extend(node.sync.errors)
        node.providers = len(tree)

        view = self.audit.reader.read(look.shape(node.sync.new), stored, reads)
        listed = self.adapter.list_instances(nodename)
        expected = look.plan(listed, held=view.held)
        # An instance the driver saw but could not read still runs: not gone.
        unreadable = self.adapter.unreadable_instances(nodename)
        present = {i.uuid for i in listed} | unreadable
        owners = {i.uuid: (i.project_id, i.user_id) for i in listed}
        listing = Listing(
            expected, frozenset(present), frozenset(look.keep), owners, frozenset(unreadable)
        )
        return self.audit.begin(view, listing)

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
        report = self.report
        before = report.requests()
        report.set_deadline(time.monotonic() + self.conf.cycle_timeout)
        try:
            known = self.adapter.get_nodenames()
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
            report.set_deadline(None)
            outcome.requests = report.requests() - before
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


def _resume(steps: Generator[object, BulkWrites, None], bulk: BulkWrites) -> None:
    """Give a node's :meth:`ResourceTracker._node_sync` what became of its new consumers
    and run it to its end (it catches its own failures)."""
    with contextlib.suppress(StopIteration):
        steps.send(bulk)


def _failed(node: NodeOutcome, exc: Exception) -> None:
    """The node failed: one line at ERROR naming what failed; the traceback only for debugging."""
    node.ok = False
    node.error = f"{type(exc).__name__}: {exc}"
    LOG.error("node %s: cycle failed: %s", node.nodename, node.error)
    if not isinstance(exc, AgentError):
        LOG.debug("node %s: traceback of the failure", node.nodename, exc_info=exc)
