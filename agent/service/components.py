"""The service's components for one configuration: driver, Placement client, tracker.

Built in two steps so that a reload (SIGHUP) with a bad configuration leaves
the running components alone: :func:`prepare` does everything that can refuse
the configuration and touches nothing that runs; only then does the service
close the old components and :func:`start` the new ones (the embedded
Placement's database can be opened by one of them at a time).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oslo_config import cfg

from agent.model.exceptions import AgentError
from agent.placement.client import PlacementClient, RequestEvent
from agent.placement.embedded import EmbeddedPlacement, check_embedded_database
from agent.placement.options import is_embedded
from agent.placement.report import ReportClient
from agent.placement.session import client_from_conf
from agent.service import beside_nova
from agent.shape.adapter import adapt
from agent.state.node_identity import nova_identity
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.base import ComputeDriver
from drivers.events import DriverEvent

LOG = logging.getLogger(__name__)


@dataclass
class Prepared:
    """A configuration checked against the host and Placement's options, nothing started.

    Attributes:
        conf: the configuration.
        driver: its driver, whose host configuration was checked.
        remote: the client of a remote Placement, or None for the embedded one.
        beside_nova: nova-compute runs beside the agent now (:mod:`.beside_nova`).
    """

    conf: cfg.ConfigOpts
    driver: ComputeDriver
    remote: PlacementClient | None
    beside_nova: bool = False


@dataclass
class Components:
    """What one configuration runs: the tracker and what must be closed with it.

    Attributes:
        conf: the configuration they were built from.
        tracker: the resource tracker (driver, report client, state directory).
        stack: closes the embedded Placement, when there is one.
        monitor: the driver's watcher (``stop()``), or None.
        listener: the event listener subscribed to the driver, or None.
    """

    conf: cfg.ConfigOpts
    tracker: ResourceTracker
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    monitor: Any = None
    listener: Callable[[DriverEvent], None] | None = None

    def close(self) -> None:
        """Stop watching the host, unsubscribe, and close the embedded Placement."""
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None
        if self.listener is not None:
            self.tracker.driver.unsubscribe(self.listener)
            self.listener = None
        self.stack.close()


def prepare(
    conf: cfg.ConfigOpts, driver_factory: Callable[[cfg.ConfigOpts], ComputeDriver]
) -> Prepared:
    """Build the driver and check everything that can refuse ``conf``; start nothing.

    Raises:
        ConfigError: the configuration does not fit the host, Placement's
            options are incomplete (no request is sent), this process
            cannot serve the embedded Placement's database, or it asks for a
            layout nova-compute beside the agent would write back (beside
            it, or when the agent cannot tell whether it runs here), or a
            nodename other than nova's (:mod:`.beside_nova`).
    """
    evidence = beside_nova.nova_compute_beside(conf)
    if evidence.refuses:  # nova-compute runs here, or the agent cannot tell
        beside_nova.refuse_layouts(conf, evidence)
    driver = driver_factory(conf)
    adapter = adapt(driver, conf)
    adapter.check_host_config()
    if evidence.refuses:
        beside_nova.check_disk(adapter, evidence)
        beside_nova.note_unknown(evidence)
    if evidence.present:
        beside_nova.check_name(adapter, evidence)
        LOG.info("beside nova-compute (%s)", evidence.words)
    remote = None if is_embedded(conf) else client_from_conf(conf)
    if remote is None:
        check_embedded_database(conf.state_path)
    return Prepared(conf, driver, remote, evidence.present)


def start(
    prepared: Prepared,
    on_request: Callable[[RequestEvent], None],
    on_event: Callable[[DriverEvent], None],
    watch: bool = True,
) -> Components:
    """Start the components of ``prepared``: Placement client, tracker, the driver's watcher.

    Args:
        prepared: from :func:`prepare`.
        on_request: a :attr:`PlacementClient.observers` callback (the metrics).
        on_event: hears every event the driver emits (the service's
            :class:`~agent.service.events.EventQueue`), from the watcher's thread.
        watch: start the driver's watcher (``[DEFAULT] watch_host_events``;
            not for ``run --once``). A watcher that cannot start is warned
            about: the cycles alone keep Placement in step then.
    """
    conf = prepared.conf
    stack = contextlib.ExitStack()
    with stack:  # closed here only when starting fails
        if prepared.remote is None:
            embedded = stack.enter_context(EmbeddedPlacement(conf.state_path))
            client = embedded.client(conf.placement.request_retries, conf.placement.retry_max_wait)
        else:
            client = prepared.remote
        client.observers.append(on_request)
        state = StateStore(conf.state_path, **nova_identity(conf))
        # The embedded Placement is SQLite in this process: one request at a time.
        in_flight = 1 if prepared.remote is None else conf.placement.max_concurrent_requests
        report = ReportClient(client, state, max_concurrent_requests=in_flight)
        report.nova_compute_beside(prepared.beside_nova)
        tracker = ResourceTracker(conf, prepared.driver, report, state)
        components = Components(conf, tracker, stack.pop_all())
    driver = prepared.driver
    driver.subscribe(on_event)
    components.listener = on_event
    if watch:
        try:
            components.monitor = driver.watch()
        except (OSError, AgentError) as exc:
            LOG.warning("host events not watched (%s); cycles run on the schedule", exc)
    return components
