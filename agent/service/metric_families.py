"""The families of the service's metrics: cycles, Placement requests, inventories.

Each family defines its series in the service's registry and is fed by one
source (:class:`agent.service.metrics.AgentMetrics` says which); names follow
Prometheus' conventions, and docs/service.md lists them.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

from agent.audit.consumer_state import State
from agent.model import ownership
from agent.model.exceptions import AgentError
from agent.model.provider_tree import ProviderTree
from agent.model.yields import KINDS
from agent.shape.layout import OWNER_TRAIT

if TYPE_CHECKING:
    from agent.placement.client import RequestEvent
    from agent.state.store import StateStore
    from agent.tracker.outcome import CycleOutcome

# No *_created series beside every counter and histogram: a restart is seen in
# the counters resetting, and they would double the series to store.
disable_created_metrics()

CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Seconds; a cycle is well under a second on a steady host, minutes when Placement is slow."""

REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
"""Seconds; Placement answers in milliseconds, keystoneauth's timeouts are tens of seconds."""

NO_NODE = ""
"""``nodename`` of a cycle that failed before any node (the driver could not list them)."""

_INVENTORY_LABELS = ("nodename", "provider", "resource_class")


def owned_providers(
    nodename: str, records: list[dict[str, Any]], owner_trait: str = OWNER_TRAIT
) -> list[dict[str, Any]]:
    """The provider records of ``nodename``'s tree that the agent owns.

    Ownership is :func:`agent.model.ownership.owned`'s (docs/service.md,
    "Ownership"): the compute node, and the children that are the agent's; a
    network agent's bandwidth provider in the same tree is not counted.

    Args:
        nodename: the compute node.
        records: the tree's provider records as the state directory keeps
            them (Placement's field names, traits included).
        owner_trait: ``[compute] owner_trait``.

    Returns:
        The records of the agent's providers, in the order given; none when
        the records do not form ``nodename``'s tree.
    """
    tree = ProviderTree()
    try:
        tree.populate_from_iterable(records)
        ours = ownership.owned(tree, nodename, owner_trait)
    except (AgentError, KeyError, TypeError, ValueError):
        return []
    return [r for r in records if r.get("uuid") in ours]


class CycleMetrics:
    """Resource-tracking cycles and what the allocation audit did in them, per node."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.cycle_seconds = Histogram(
            "compute_agent_cycle_duration_seconds",
            "Duration of resource-tracking cycles.",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.cycles = Counter(
            "compute_agent_cycles",
            "Resource-tracking cycles per compute node by outcome (ok, failed, fatal).",
            ["nodename", "outcome"],
            registry=r,
        )
        self.last_success = Gauge(
            "compute_agent_last_success_timestamp_seconds",
            "When the last fully successful cycle ended (seconds since the epoch).",
            registry=r,
        )
        self.reshapes = Counter(
            "compute_agent_reshapes",
            "POST /reshaper performed for a compute node.",
            ["nodename"],
            registry=r,
        )
        self.allocations_written = Counter(
            "compute_agent_allocations_written",
            "Consumers whose allocations the audit wrote (they were missing or wrong).",
            ["nodename"],
            registry=r,
        )
        self.allocations_deleted = Counter(
            "compute_agent_allocations_deleted",
            "Consumers whose allocations on this host the audit removed.",
            ["nodename"],
            registry=r,
        )
        self.unknown_consumers = Gauge(
            "compute_agent_unknown_consumers",
            "Consumers holding resources on a node that are not its instances.",
            ["nodename"],
            registry=r,
        )
        self.consumers = Gauge(
            "compute_agent_consumers",
            "Consumers of a node by the state the allocation audit found them in "
            "(instance here, moving, claimed building, gone, not an instance).",
            ["nodename", "state"],
            registry=r,
        )
        self.allocation_drift, self.yielded_fields = _disagreements(r)

    def observe(self, outcome: CycleOutcome, fatal: bool = False) -> None:
        """Record one cycle's outcome, node by node."""
        self.cycle_seconds.observe(outcome.duration)
        if outcome.ok and not fatal:
            self.last_success.set(outcome.started + outcome.duration)
        if not outcome.nodes:
            self.cycles.labels(NO_NODE, "fatal" if fatal else "failed").inc()
        for node in outcome.nodes:
            if fatal or not node.ok:
                label = "fatal" if fatal else "failed"
            else:  # a write refused (an allocation, a provider): Placement may lack it
                label = "degraded" if node.problems else "ok"
            self.cycles.labels(node.nodename, label).inc()
            self.allocations_written.labels(node.nodename).inc(len(node.allocations_written))
            self.allocations_deleted.labels(node.nodename).inc(len(node.allocations_removed))
            if node.ok:
                self.unknown_consumers.labels(node.nodename).set(len(node.unknown_consumers))
                self.allocation_drift.labels(node.nodename).set(len(node.drift))
                for state, count in consumer_counts(node.consumers).items():
                    self.consumers.labels(node.nodename, state).set(count)
                for kind in KINDS:
                    count = sum(1 for y in node.sync.yielded if y["kind"] == kind)
                    self.yielded_fields.labels(node.nodename, kind).set(count)
            if node.sync.reshaped:
                self.reshapes.labels(node.nodename).inc()


def _disagreements(r: CollectorRegistry) -> tuple[Gauge, Gauge]:
    """What the agent reports and does not write: allocation drift, fields yielded."""
    drift = Gauge(
        "compute_agent_allocation_drift",
        "Instances whose allocation on a node differs from the agent's plan "
        "(reported, rewritten only with rewrite_differing_allocations).",
        ["nodename"],
        registry=r,
    )
    yielded = Gauge(
        "compute_agent_yielded_fields",
        "Fields of a node's providers the agent yields to another writer that changed "
        "them back (by kind: inventory, trait, aggregate); written again only when the "
        "agent's own value changes.",
        ["nodename", "kind"],
        registry=r,
    )
    return drift, yielded


def consumer_counts(consumers: list[dict[str, str]]) -> dict[str, int]:
    """``{state: consumers}`` of one node's audit, every state present (0 when none)."""
    counts = {str(s): 0 for s in State}
    for consumer in consumers:
        counts[consumer["state"]] = counts.get(consumer["state"], 0) + 1
    return counts


class EventMetrics:
    """Driver events heard and the targeted updates they led to (docs/service.md, "Events")."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.events = Counter(
            "compute_agent_events",
            "Driver events heard, by kind (instance, devices, resync).",
            ["kind"],
            registry=r,
        )
        self.updates = Counter(
            "compute_agent_event_updates",
            "Batches of targeted updates made for events, by outcome (ok, failed).",
            ["outcome"],
            registry=r,
        )
        self.latency = Histogram(
            "compute_agent_event_latency_seconds",
            "From the first event of a batch being heard to its targeted updates written.",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )

    def count(self, kind: str) -> None:
        """One event of ``kind`` heard (an :class:`agent.service.events.EventQueue` callback)."""
        self.events.labels(kind=kind).inc()

    def observe(self, ok: bool, seconds: float) -> None:
        """One batch of targeted updates done, ``seconds`` after its first event."""
        self.updates.labels(outcome="ok" if ok else "failed").inc()
        self.latency.observe(seconds)


class PlacementMetrics:
    """HTTP requests to Placement: answers, latency, retries, generation conflicts."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.placement_requests = Counter(
            "compute_agent_placement_requests",
            "HTTP requests to Placement by method and status (transport: no answer).",
            ["method", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "compute_agent_placement_request_duration_seconds",
            "Latency of HTTP requests to Placement by method, path template and status.",
            ["method", "path", "status"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.retries = Counter(
            "compute_agent_placement_retries",
            "Placement requests tried again after no answer or a 502/503/504.",
            ["method", "path"],
            registry=r,
        )
        self.keystone_failures = Counter(
            "compute_agent_keystone_failures",
            "Placement requests Keystone failed before they were sent, by cause (unreachable, "
            "credentials, tls, catalog, error); not counted in compute_agent_placement_requests.",
            ["method", "cause"],
            registry=r,
        )
        self.conflicts = Counter(
            "compute_agent_generation_conflicts",
            "409 placement.concurrent_update answers: another writer moved a generation.",
            ["method", "path"],
            registry=r,
        )

    def on_request(self, event: RequestEvent) -> None:
        """A callback of :attr:`~agent.placement.client.PlacementClient.observers`.

        Counts one try, retry or conflict.
        """
        if event.kind == "answer":
            self.placement_requests.labels(event.method, event.status).inc()
            self.request_seconds.labels(event.method, event.template, event.status).observe(
                event.seconds
            )
        elif event.kind == "retry":
            self.retries.labels(event.method, event.template).inc()
        elif event.kind == "conflict":
            self.conflicts.labels(event.method, event.template).inc()
        elif event.kind == "keystone":
            self.keystone_failures.labels(event.method, event.status).inc()


class InventoryMetrics:
    """The providers the agent owns and their inventories, per node, as the cycle left them."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.providers = Gauge(
            "compute_agent_providers",
            "Resource providers the agent owns in each compute node's tree.",
            ["nodename"],
            registry=r,
        )
        self.inventory_total = Gauge(
            "compute_agent_inventory_total_units",
            "Inventory total per provider and resource class, in the class's unit.",
            _INVENTORY_LABELS,
            registry=r,
        )
        self.inventory_reserved = Gauge(
            "compute_agent_inventory_reserved_units",
            "Inventory reserved per provider and resource class, in the class's unit.",
            _INVENTORY_LABELS,
            registry=r,
        )
        self.inventory_used = Gauge(
            "compute_agent_inventory_used_units",
            "Amount allocated per provider and resource class (as the allocation audit "
            "last read it), in the class's unit.",
            _INVENTORY_LABELS,
            registry=r,
        )
        self.allocation_ratio = Gauge(
            "compute_agent_inventory_allocation_ratio",
            "Allocation ratio per provider and resource class.",
            _INVENTORY_LABELS,
            registry=r,
        )
        self._lock = threading.Lock()
        self._series: dict[str, set[tuple[str, str, str]]] = defaultdict(set)

    def observe_state(
        self, nodename: str, state: StateStore, owner_trait: str = OWNER_TRAIT
    ) -> None:
        """Providers and inventories of ``nodename`` as the cycle left them in ``state``.

        Reads the provider records Placement held after the cycle's writes and
        the allocation audit's per-provider allocations: two local files, no
        request. Series of providers that are gone are removed.
        """
        records = owned_providers(nodename, state.seen_providers(nodename) or [], owner_trait)
        audit = state.consumers(nodename) or {}
        held: dict[str, dict[str, dict[str, int]]] = audit.get("held") or {}
        series: set[tuple[str, str, str]] = set()
        for record in records:
            name = str(record.get("name"))
            used: dict[str, int] = defaultdict(int)
            for amounts in (held.get(str(record.get("uuid"))) or {}).values():
                for rc, n in amounts.items():
                    used[rc] += int(n)
            for rc, inv in (record.get("inventories") or {}).items():
                labels = (nodename, name, rc)
                series.add(labels)
                self.inventory_total.labels(*labels).set(inv.get("total", 0))
                self.inventory_reserved.labels(*labels).set(inv.get("reserved", 0))
                self.allocation_ratio.labels(*labels).set(inv.get("allocation_ratio", 1.0))
                self.inventory_used.labels(*labels).set(used.get(rc, 0))
        with self._lock:
            gone = self._series[nodename] - series
            self._series[nodename] = series
        for labels in gone:
            for gauge in (
                self.inventory_total,
                self.inventory_reserved,
                self.inventory_used,
                self.allocation_ratio,
            ):
                gauge.remove(*labels)
        self.providers.labels(nodename).set(len(records))
