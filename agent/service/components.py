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

from agent.placement.client import PlacementClient, RequestEvent
from agent.placement.embedded import EmbeddedPlacement, check_embedded_database
from agent.placement.options import is_embedded
from agent.placement.report import ReportClient
from agent.placement.session import client_from_conf
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.base import ComputeDriver
from drivers.events import DevicesChanged, DriverEvent, HostResync, InstanceChanged

LOG = logging.getLogger(__name__)


@dataclass
class Prepared:
    """A configuration checked against the host and Placement's options, nothing started.

    Attributes:
        conf: the configuration.
        driver: its driver, whose host configuration was checked.
        remote: the client of a remote Placement, or None for the embedded one.
    """

    conf: cfg.ConfigOpts
    driver: ComputeDriver
    remote: PlacementClient | None


@dataclass
class Components:
    """What one configuration runs: the tracker and what must be closed with it.

    Attributes:
        conf: the configuration they were built from.
        tracker: the resource tracker (driver, report client, state directory).
        stack: closes the embedded Placement, when there is one.
        monitor: the driver's hot-plug watcher (``stop()``), or None.
    """

    conf: cfg.ConfigOpts
    tracker: ResourceTracker
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    monitor: Any = None

    def close(self) -> None:
        """Stop watching hot-plug events and close the embedded Placement."""
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None
        self.stack.close()


def prepare(
    conf: cfg.ConfigOpts, driver_factory: Callable[[cfg.ConfigOpts], ComputeDriver]
) -> Prepared:
    """Build the driver and check everything that can refuse ``conf``; start nothing.

    Raises:
        ConfigError: the configuration does not fit the host, Placement's
            options are incomplete (no request is sent), or this process
            cannot serve the embedded Placement's database.
    """
    driver = driver_factory(conf)
    driver.check_host_config()
    remote = None if is_embedded(conf) else client_from_conf(conf)
    if remote is None:
        check_embedded_database(conf.state_path)
    return Prepared(conf, driver, remote)


def start(
    prepared: Prepared,
    on_request: Callable[[RequestEvent], None],
    on_hotplug: Callable[[], None],
) -> Components:
    """Start the components of ``prepared``: Placement client, tracker, hot-plug watcher.

    Args:
        prepared: from :func:`prepare`.
        on_request: a :attr:`PlacementClient.observers` callback (the metrics).
        on_hotplug: called when the driver sees hardware come or go (runs a
            cycle early); a driver without a ``watch`` method has none.
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
        state = StateStore(conf.state_path)
        tracker = ResourceTracker(conf, prepared.driver, ReportClient(client, state), state)
        components = Components(conf, tracker, stack.pop_all())
    driver = prepared.driver
    driver.subscribe(_early_cycle_on_host_change(on_hotplug))
    try:
        components.monitor = driver.watch()
    except OSError as exc:
        LOG.warning("host events not watched (%s); cycles run on the schedule", exc)
    return components


def _early_cycle_on_host_change(on_change: Callable[[], None]) -> Callable[[DriverEvent], None]:
    """A listener running a cycle early when the driver sees the host change."""

    def listener(event: DriverEvent) -> None:
        if isinstance(event, DevicesChanged | HostResync | InstanceChanged):
            on_change()

    return listener
