"""Prometheus metrics of the service (``[metrics] listen``).

Exported (prometheus_client names; counters get ``_total``):

- ``compute_agent_cycle_duration_seconds`` (histogram) and
  ``compute_agent_cycles_total{outcome="ok|failed|fatal"}``;
- ``compute_agent_last_success_timestamp_seconds``: end of the last cycle
  in which every node succeeded;
- ``compute_agent_placement_requests_total{method, status}``: every HTTP
  request to Placement, ``status`` being the HTTP code or ``transport``;
- ``compute_agent_providers{nodename}``: providers in each node's tree;
- ``compute_agent_allocations_written_total`` and
  ``compute_agent_allocations_deleted_total``: consumers whose allocations
  the audit wrote or removed.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter as CountMap
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from agent.exceptions import ConfigError

if TYPE_CHECKING:
    from agent.placement.client import PlacementClient
    from agent.tracker import CycleOutcome

LOG = logging.getLogger(__name__)

CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Seconds; a cycle is well under a second on a steady host, minutes when Placement is slow."""


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


class AgentMetrics:
    """The service's metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.cycle_seconds = Histogram(
            "compute_agent_cycle_duration_seconds",
            "Duration of resource-tracking cycles.",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.cycles = Counter(
            "compute_agent_cycles", "Resource-tracking cycles by outcome.", ["outcome"], registry=r
        )
        self.last_success = Gauge(
            "compute_agent_last_success_timestamp_seconds",
            "When the last fully successful cycle ended (seconds since the epoch).",
            registry=r,
        )
        self.placement_requests = Counter(
            "compute_agent_placement_requests",
            "HTTP requests to Placement by method and status.",
            ["method", "status"],
            registry=r,
        )
        self.providers = Gauge(
            "compute_agent_providers",
            "Resource providers in each compute node's tree.",
            ["nodename"],
            registry=r,
        )
        self.allocations_written = Counter(
            "compute_agent_allocations_written",
            "Consumers whose allocations the audit wrote.",
            registry=r,
        )
        self.allocations_deleted = Counter(
            "compute_agent_allocations_deleted",
            "Consumers whose allocations on this host the audit removed.",
            registry=r,
        )
        self._client_seen: CountMap[tuple[str, str]] = CountMap()
        self._client_id: int | None = None
        self._lock = threading.Lock()
        self._server: Any = None

    def observe_cycle(self, outcome: CycleOutcome, fatal: bool = False) -> None:
        """Record one cycle's outcome."""
        self.cycle_seconds.observe(outcome.duration)
        label = "fatal" if fatal else ("ok" if outcome.ok else "failed")
        self.cycles.labels(label).inc()
        if outcome.ok and not fatal:
            self.last_success.set(outcome.started + outcome.duration)
        for node in outcome.nodes:
            if node.ok:
                self.providers.labels(node.nodename).set(node.providers)
            self.allocations_written.inc(len(node.allocations_written))
            self.allocations_deleted.inc(len(node.allocations_removed))

    def observe_client(self, client: PlacementClient) -> None:
        """Add the requests ``client`` made since the last call (a new client starts at 0)."""
        with self._lock:
            if self._client_id != id(client):
                self._client_id = id(client)
                self._client_seen = CountMap()
            now = CountMap(client.statuses)
            for (method, status), count in now.items():
                delta = count - self._client_seen.get((method, status), 0)
                if delta > 0:
                    self.placement_requests.labels(method, status).inc(delta)
            self._client_seen = now

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
