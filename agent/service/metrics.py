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
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Info, start_http_server

from agent import __version__
from agent.model.exceptions import ConfigError
from agent.service.metric_families import (
    CycleMetrics,
    EventMetrics,
    InventoryMetrics,
    PlacementMetrics,
)
from agent.shape.layout import OWNER_TRAIT

if TYPE_CHECKING:
    from agent.placement.client import RequestEvent
    from agent.state.store import StateStore
    from agent.tracker.outcome import CycleOutcome

LOG = logging.getLogger(__name__)


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
    """The service's metrics, in a registry of their own (families in
    :mod:`agent.service.metric_families`)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        Info("compute_agent_build", "Version of the running agent.", registry=self.registry).info(
            {"version": __version__, "python_version": platform.python_version()}
        )
        self.cycle = CycleMetrics(self.registry)
        self.placement = PlacementMetrics(self.registry)
        self.inventory = InventoryMetrics(self.registry)
        self.events = EventMetrics(self.registry)
        self._server: Any = None

    # -- sources ------------------------------------------------------------------

    def on_request(self, event: RequestEvent) -> None:
        """A callback of :attr:`~agent.placement.client.PlacementClient.observers`.

        Counts one try, retry or conflict.
        """
        self.placement.on_request(event)

    def observe_cycle(self, outcome: CycleOutcome, fatal: bool = False) -> None:
        """Record one cycle's outcome, node by node."""
        self.cycle.observe(outcome, fatal)

    def observe_state(
        self, nodename: str, state: StateStore, owner_trait: str = OWNER_TRAIT
    ) -> None:
        """Providers and inventories of ``nodename`` as the cycle left them in ``state``
        (:meth:`InventoryMetrics.observe_state`)."""
        self.inventory.observe_state(nodename, state, owner_trait)

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
