"""Prometheus metrics of the service (``[metrics] listen``).

Names follow Prometheus' conventions (base units, ``_seconds``, counters
ending ``_total``); docs/service.md lists them with sample alerts. Three
sources feed them, none costing a Placement request:

- :meth:`AgentMetrics.observe_cycle`: each cycle's outcome (per node);
- :meth:`AgentMetrics.on_request`: a :class:`~agent.placement.client.PlacementClient`
  observer, told of every answer, retry and generation conflict;
- :meth:`AgentMetrics.observe_state`: what the cycle left in the state
  directory: the providers as Placement holds them after the cycle's writes
  (inventories, traits) and the allocation audit's per-provider view of
  the allocations (the "used" amounts).

Inventory amounts are in each resource class's own unit (MEMORY_MB in MiB,
DISK_GB in GiB, others in counts), as Placement counts them: the
``resource_class`` label names the unit, and the numbers match what
``openstack resource provider inventory list`` shows.
"""

from __future__ import annotations

import logging
import platform
import threading
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    start_http_server,
)

from agent import __version__
from agent.model.exceptions import ConfigError
from agent.shape.layout import OWNER_TRAIT

if TYPE_CHECKING:
    from agent.placement.client import RequestEvent
    from agent.state.store import StateStore
    from agent.tracker.cycle import CycleOutcome

LOG = logging.getLogger(__name__)

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


def parse_listen(value: str) -> tuple[str, int]:
    """``ADDRESS:PORT`` (``[v6]:PORT`` for IPv6) as ``(address, port)``.

    Raises:
        ConfigError: naming ``[metrics] listen`` and the expected form.
    """
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(
            f"[metrics] listen = {value!r} is not ADDRESS:PORT (e.g. 127.0.0.1:9180); "
            "correct it, or set it empty to turn the metrics endpoint off"
        )
    return host, int(port)


def owned_providers(nodename: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The provider records of ``nodename``'s tree that the agent owns.

    The compute node itself, and every other provider carrying the owner
    trait (docs/service.md, "Ownership"); a network agent's bandwidth
    provider in the same tree is not counted.
    """
    return [
        r
        for r in records
        if (r.get("name") == nodename and not r.get("parent_provider_uuid"))
        or OWNER_TRAIT in (r.get("traits") or ())
    ]


class AgentMetrics:
    """The service's metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        Info("compute_agent_build", "Version of the running agent.", registry=r).info(
            {"version": __version__, "python_version": platform.python_version()}
        )
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
        self.conflicts = Counter(
            "compute_agent_generation_conflicts",
            "409 placement.concurrent_update answers: another writer moved a generation.",
            ["method", "path"],
            registry=r,
        )
        self.reshapes = Counter(
            "compute_agent_reshapes",
            "POST /reshaper performed for a compute node.",
            ["nodename"],
            registry=r,
        )
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
        self._lock = threading.Lock()
        self._inventory_series: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
        self._server: Any = None

    # -- sources ------------------------------------------------------------------

    def on_request(self, event: RequestEvent) -> None:
        """A :attr:`PlacementClient.observers` callback: count one try, retry or conflict."""
        if event.kind == "answer":
            self.placement_requests.labels(event.method, event.status).inc()
            self.request_seconds.labels(event.method, event.template, event.status).observe(
                event.seconds
            )
        elif event.kind == "retry":
            self.retries.labels(event.method, event.template).inc()
        elif event.kind == "conflict":
            self.conflicts.labels(event.method, event.template).inc()

    def observe_cycle(self, outcome: CycleOutcome, fatal: bool = False) -> None:
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
            if node.sync.reshaped:
                self.reshapes.labels(node.nodename).inc()

    def observe_state(self, nodename: str, state: StateStore) -> None:
        """Providers and inventories of ``nodename`` as the cycle left them in ``state``.

        Reads the provider records Placement held after the cycle's writes and
        the allocation audit's per-provider allocations: two local files, no
        request. Series of providers that are gone are removed.
        """
        records = owned_providers(nodename, state.seen_providers(nodename) or [])
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
            gone = self._inventory_series[nodename] - series
            self._inventory_series[nodename] = series
        for labels in gone:
            for gauge in (
                self.inventory_total,
                self.inventory_reserved,
                self.inventory_used,
                self.allocation_ratio,
            ):
                gauge.remove(*labels)
        self.providers.labels(nodename).set(len(records))

    # -- the endpoint ---------------------------------------------------------------

    def serve(self, listen: str) -> tuple[str, int]:
        """Serve ``/metrics`` on ``listen`` (``ADDRESS:PORT``; port 0 picks one).

        Returns:
            The address and port actually bound.

        Raises:
            ConfigError: ``listen`` is malformed.
            OSError: the address cannot be bound (in use, not local).
        """
        host, port = parse_listen(listen)
        server, _thread = start_http_server(port, host, self.registry)
        self._server = server
        bound = server.server_address
        LOG.info("metrics on http://%s:%d/metrics", host, bound[1])
        return host, bound[1]

    def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
