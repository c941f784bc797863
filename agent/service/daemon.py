"""The service: ``compute-agent run``.

One worker thread runs :meth:`ResourceTracker.update_available_resource`
every ``update_interval`` seconds (plus up to ``update_jitter``), never two
at once; an early request that arrives during a cycle runs right after it.
Intervals, the cycle's deadline, staleness and the watchdog are measured on
the monotonic clock, so a wall-clock step in either direction changes
nothing (APScheduler, used before, schedules by the wall clock: after a
step back of an hour no cycle ran for an hour). The first cycle is the
start-up one; start-up lasts until a cycle succeeds for every node, because
a reshape is only performed then (reshape-provider-tree.txt).

Signals: SIGTERM and SIGINT stop the service: the running cycle gets
``[DEFAULT] stop_timeout`` seconds to finish, then no new Placement request
starts and retry waits end at once; the service exits 0 either way (every
write is resumable, so an abandoned cycle is carried on by the next start).
SIGHUP re-reads the configuration and, only once the new components are
built, replaces the old ones and drops every cache; a reload that fails
keeps the old components running (:mod:`agent.service.signals`,
:mod:`agent.service.components`).

Events: what the driver sees happen on the host (libvirt domain and node
device events, udev, the fake host file) is queued and coalesced
(:mod:`agent.service.events`); between cycles the worker makes their
targeted updates within ``[DEFAULT] event_delay`` of the first event, never
alongside a cycle. A targeted update that fails brings the next cycle
forward to at most ``EVENT_RETRY`` seconds away.

Health: the systemd watchdog is fed only while cycles make progress
(:mod:`agent.service.health`); a service whose cycles all fail is restarted
by systemd, and ``status`` says why (:mod:`agent.service.record`).

Fatal: ``ReshapeNeeded`` outside start-up (exit 4: a restart performs the
reshape) and ``ReshapeFailed`` (exit 5: Placement is unchanged, an operator
must look; :mod:`agent.service.exit_codes`). Any other failure of a cycle is
logged and retried next time.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from oslo_config import cfg

from agent.conf import logs
from agent.model.exceptions import AgentError, ReshapeFailed, ReshapeNeeded
from agent.service import components, signals
from agent.service.events import EventQueue, apply_pending
from agent.service.exit_codes import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_RESHAPE_FAILED,
    EXIT_RESHAPE_NEEDED,
    FATAL_ADVICE,
)
from agent.service.health import Health
from agent.service.metrics import AgentMetrics
from agent.service.notify import Notifier
from agent.service.progress import Progress
from agent.service.record import record_cycle
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from agent.tracker.outcome import CycleOutcome
from drivers import load_driver
from drivers.base import ComputeDriver

LOG = logging.getLogger(__name__)

EVENT_RETRY = 10.0
"""Seconds from a failed targeted update to the full cycle that heals it (at most)."""


class Service:
    """The long-running agent.

    Args:
        load_conf: reads the configuration (called at start and on SIGHUP).
        driver_factory: builds the driver from a configuration; defaults to
            the ``[compute] driver`` named there.
        install_signals: install SIGTERM/SIGINT/SIGHUP handlers (only in the
            main thread; tests running the service in a thread call
            :meth:`stop` and :meth:`reload` instead).
    """

    def __init__(
        self,
        load_conf: Callable[[], cfg.ConfigOpts],
        driver_factory: Callable[[cfg.ConfigOpts], ComputeDriver] | None = None,
        install_signals: bool = True,
    ) -> None:
        self._load_conf = load_conf
        self._driver_factory = driver_factory or (lambda c: load_driver(c.compute.driver, c))
        self._install_signals = install_signals
        self.conf: cfg.ConfigOpts | None = None
        self.tracker: ResourceTracker | None = None
        self.metrics = AgentMetrics()
        self.notifier = Notifier()
        self.metrics_address: tuple[str, int] | None = None
        self.exit_code = EXIT_OK
        self.last_outcome: CycleOutcome | None = None
        self.cycles = 0
        self._components: components.Components | None = None
        self._stop = threading.Event()
        self._started_ok = False
        self._ready_sent = False
        self._reload_requested = False
        self._early_requested = False
        self._health = Health()
        self._cycle_lock = threading.Lock()
        self._wake = threading.Event()
        self._worker: threading.Thread | None = None
        self._due = 0.0  # monotonic time of the next periodic cycle
        self.events = EventQueue(self._wake.set, self.request_cycle, self.metrics.events.count)

    # -- components ------------------------------------------------------------------

    def _build(self, conf: cfg.ConfigOpts, once: bool = False) -> None:
        """Build driver, Placement client and tracker for ``conf``, then put them in place.

        Nothing of the running components is touched until the new ones are
        prepared, so a configuration that is refused leaves the service as it was.

        Raises:
            ConfigError: the configuration does not fit the host, or Placement's
                options are incomplete.
        """
        prepared = components.prepare(conf, self._driver_factory)
        self._teardown()
        watch = conf.watch_host_events and not once
        self._components = components.start(
            prepared, self.metrics.on_request, self.events.put, watch
        )
        self.tracker = self._components.tracker
        self.conf = conf

    def _teardown(self) -> None:
        if self._components is not None:
            self._components.close()
            self._components = None
        self.tracker = None

    # -- requests from outside (signals, hot-plug, tests) -------------------------------

    def stop(self) -> None:
        """Stop: the running cycle gets ``stop_timeout`` s to finish, then the service exits 0."""
        self._stop.set()
        self._wake.set()

    def reload(self) -> None:
        """Re-read the configuration and drop caches before an early cycle."""
        self._reload_requested = True
        self.request_cycle()

    def request_cycle(self) -> None:
        """Run a cycle now, or right after the running one."""
        self._early_requested = True
        self._wake.set()

    # -- the cycle ----------------------------------------------------------------------

    def _apply_reload(self) -> None:
        self._reload_requested = False
        self.notifier.reloading()
        try:
            self._build(self._load_conf())
        except AgentError as exc:
            LOG.error("configuration not reloaded, the previous one stays: %s", exc)
        self.notifier.ready()

    def run_cycle(self) -> CycleOutcome | None:
        """Run one cycle now (the cycle worker's job; ``--once`` calls it directly).

        Returns:
            The outcome, or None when the cycle was fatal (see :attr:`exit_code`).
        """
        with self._cycle_lock:
            self._health.cycle_started()
            self._early_requested = False
            # The cycle reads the driver after this: what was queued is covered.
            self.events.discard()
            try:
                # One request id (req-...) on every log line of the cycle.
                with logs.cycle_context():
                    return self._cycle()
            finally:
                self._health.cycle_ended()
                if self._early_requested and not self._stop.is_set():
                    self.request_cycle()

    def _cycle(self) -> CycleOutcome | None:
        if self._reload_requested:
            self._apply_reload()
        assert self.tracker is not None
        startup = not self._started_ok
        report = self.tracker.report
        try:
            with Progress("resource-tracking cycle", count=report.requests):
                outcome = self.tracker.update_available_resource(startup)
        except (ReshapeNeeded, ReshapeFailed) as exc:
            self._fatal(startup, exc)
            return None
        except Exception as exc:  # the service never dies of one cycle
            LOG.error("cycle failed: %s: %s", type(exc).__name__, exc)
            LOG.debug("traceback of the failed cycle", exc_info=True)
            outcome = _failed(startup, exc)
        if outcome.ok:
            self._started_ok = True
        if outcome.progressed:
            self._health.progressed()
        self._record(outcome)
        if not self._ready_sent:
            # READY after the start-up cycle (and any reshape) is done: systemd's
            # TimeoutStartSec then covers it, and "active" means Placement is in step.
            self._ready_sent = True
            self.notifier.ready()
        return outcome

    def _fatal(self, startup: bool, exc: ReshapeNeeded | ReshapeFailed) -> None:
        """Record a fatal failure (exit 4 or 5) and stop the service."""
        code = EXIT_RESHAPE_NEEDED if isinstance(exc, ReshapeNeeded) else EXIT_RESHAPE_FAILED
        LOG.critical("%s: %s. %s", type(exc).__name__, exc, FATAL_ADVICE[code])
        self._record(_failed(startup, exc), fatal=True)
        self.exit_code = code
        self._stop.set()

    def _handle_events(self) -> None:
        """Make the queued events' targeted updates, after the grace for the rest of a burst."""
        self._stop.wait(self.conf.event_delay if self.conf is not None else 0.0)
        with self._cycle_lock:
            if self.tracker is None or self._stop.is_set():
                return
            try:
                with logs.cycle_context():
                    outcome = apply_pending(self.events, self.tracker, self.metrics.events)
            except ReshapeNeeded as exc:
                return self._fatal(False, exc)
        if outcome is not None and outcome.errors:  # heal it soon
            self._due = min(self._due, time.monotonic() + EVENT_RETRY)

    def _record(self, outcome: CycleOutcome, fatal: bool = False) -> None:
        self.cycles += 1
        self.last_outcome = outcome
        assert self.conf is not None
        state = self.tracker.state if self.tracker is not None else StateStore(self.conf.state_path)
        owner_trait = self.conf.compute.owner_trait
        record_cycle(outcome, fatal, self.metrics, self.notifier, state, owner_trait)

    # -- running ------------------------------------------------------------------------

    def run(self, once: bool = False) -> int:
        """Start, run cycles until stopped, return the exit code.

        Args:
            once: run one start-up cycle and return its status (0 when every
                node succeeded, 1 otherwise, 4/5 when fatal).

        Raises:
            ConfigError: the configuration is invalid at start.
        """
        self._build(self._load_conf(), once)
        assert self.conf is not None
        # Every option in effect, as every OpenStack service logs it (secret ones as ****).
        self.conf.log_opt_values(LOG, logging.DEBUG)
        try:
            if self.conf.metrics.listen and not once:
                self.metrics_address = serve_metrics(self.metrics, self.conf.metrics.listen)
            if once:
                outcome = self.run_cycle()
                if outcome is None:
                    return self.exit_code
                return EXIT_OK if outcome.ok else EXIT_FAILURE
            return self._serve()
        finally:
            self.notifier.stopping()
            self.metrics.close()
            self._teardown()

    def _serve(self) -> int:
        assert self.conf is not None
        if self._install_signals:
            signals.install(self.stop, self.reload)
        self._health.progressed()
        # A daemon thread: a cycle stuck in a read cannot keep the process alive
        # past stop_timeout (its writes are resumable, the next start carries on).
        self._worker = threading.Thread(target=self._loop, name="cycle", daemon=True)
        self._worker.start()
        LOG.info(
            "compute-agent running: a cycle every %d s (+ up to %.0f s)",
            self.conf.update_interval,
            self.conf.update_jitter,
        )
        tick = min(self.notifier.watchdog_interval or 1.0, 1.0)
        try:
            while not self._stop.wait(tick):
                # Fed while the worker lives, no cycle overran, and cycles make progress.
                if self._health.healthy(self.conf, self._worker.is_alive()):
                    self.notifier.watchdog()
        finally:
            self.notifier.stopping()
            abort = self.tracker.report.abort_event if self.tracker is not None else None
            join_worker(self._worker, self.conf.stop_timeout, abort)
        return self.exit_code

    def _loop(self) -> None:
        """Cycles now, then every interval (plus jitter) or early when asked; events between."""
        assert self.conf is not None
        self._due = time.monotonic()
        while not self._stop.is_set():
            # Event.wait measures monotonic time: wall-clock steps do not move `due`.
            if self._wake.wait(max(0.0, self._due - time.monotonic())):
                self._wake.clear()
            if self._stop.is_set():
                break
            if time.monotonic() < self._due and not self._early_requested:
                # Events; until the first cycle has run, it covers them.
                if self.cycles and self.events.pending:
                    self._handle_events()
                continue
            self.run_cycle()
            jitter = random.uniform(0, self.conf.update_jitter)
            self._due = time.monotonic() + self.conf.update_interval + jitter


def _failed(startup: bool, exc: BaseException) -> CycleOutcome:
    """The outcome of a cycle that raised ``exc`` instead of returning one."""
    outcome = CycleOutcome(startup=startup, started=time.time())
    outcome.error = f"{type(exc).__name__}: {exc}"
    return outcome


def serve_metrics(metrics: AgentMetrics, listen: str) -> tuple[str, int] | None:
    """Serve ``/metrics`` on ``listen``; the address bound, or None (logged) when it cannot."""
    try:
        return metrics.serve(listen)
    except OSError as exc:
        LOG.error("metrics endpoint not started on %s: %s", listen, exc)
        return None


def join_worker(worker: threading.Thread, stop_timeout: int, abort: threading.Event | None) -> None:
    """Give the running cycle ``stop_timeout`` s, then end it between two requests.

    Args:
        worker: the cycle worker thread.
        stop_timeout: ``[DEFAULT] stop_timeout``, seconds.
        abort: the Placement client's abort event (no new request, retry
            waits end), or None when there is no client.
    """
    worker.join(stop_timeout)
    if worker.is_alive() and abort is not None:
        abort.set()
        worker.join(1.0)
    if worker.is_alive():
        LOG.warning(
            "the running cycle did not finish within %d s of the stop request; "
            "stopping without it (the next start carries on where it was)",
            stop_timeout,
        )
