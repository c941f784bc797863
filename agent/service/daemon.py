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
keeps the old components running. Hot-plug events of drivers that watch
for them (the host driver's udev monitor) run a cycle early.

Health: the systemd watchdog is fed only while cycles make progress (the
last cycle that reached Placement and worked on a node is younger than two
intervals plus the jitter); a service whose cycles all fail is restarted by
systemd, and ``status`` says why.

Fatal: ``ReshapeNeeded`` outside start-up (exit 4: a restart performs the
reshape) and ``ReshapeFailed`` (exit 5: Placement is unchanged, an operator
must look). Any other failure of a cycle is logged and retried next time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from oslo_config import cfg

from agent.cli.commands.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_RESHAPE_FAILED,
    EXIT_RESHAPE_NEEDED,
)
from agent.conf import logs
from agent.model.exceptions import AgentError, ReshapeFailed, ReshapeNeeded
from agent.placement.embedded import EmbeddedPlacement, check_embedded_database
from agent.placement.options import is_embedded
from agent.placement.report import ReportClient
from agent.placement.session import client_from_conf
from agent.service.metrics import AgentMetrics
from agent.service.notify import Notifier
from agent.service.progress import Progress
from agent.state.store import StateStore, boot_id
from agent.tracker.cycle import CycleOutcome, ResourceTracker
from drivers import load_driver
from drivers.base import ComputeDriver

LOG = logging.getLogger(__name__)

FATAL_ADVICE = {
    EXIT_RESHAPE_NEEDED: (
        "the provider tree must change shape, which is only done at start-up: restart the "
        "service (systemd does, Restart=on-failure) and it reshapes; see docs/reshape.md"
    ),
    EXIT_RESHAPE_FAILED: (
        "POST /reshaper failed and Placement is unchanged; the service stays stopped. Run "
        "'compute-agent reshape --dry-run' to see the moves, fix the cause (see the error "
        "above and docs/reshape.md), then start the service"
    ),
}


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
        self._stack = contextlib.ExitStack()
        self._stop = threading.Event()
        self._started_ok = False
        self._ready_sent = False
        self._reload_requested = False
        self._early_requested = False
        self._running_since: float | None = None
        self._cycle_lock = threading.Lock()
        self._wake = threading.Event()
        self._worker: threading.Thread | None = None
        # Monotonic time of the last cycle that made progress (start counts as one).
        self._last_progress = time.monotonic()
        self._monitor: Any = None

    # -- components ------------------------------------------------------------------

    def _build(self, conf: cfg.ConfigOpts) -> None:
        """Build driver, Placement client and tracker for ``conf``, then put them in place.

        Nothing of the running components is touched until the new ones are
        built, so a failure leaves the service as it was.

        Raises:
            ConfigError: the configuration does not fit the host, or Placement's
                options are incomplete.
        """
        driver = self._driver_factory(conf)
        driver.check_host_config()
        # Everything that can refuse the configuration runs before the old
        # components go: the Placement options (no request is sent) or, for the
        # embedded Placement, that this process can serve the database asked for.
        remote = None if is_embedded(conf) else client_from_conf(conf)
        if remote is None:
            check_embedded_database(conf.state_path)
        self._teardown()
        stack = contextlib.ExitStack()
        if remote is None:
            embedded = stack.enter_context(EmbeddedPlacement(conf.state_path))
            client = embedded.client(conf.placement.request_retries, conf.placement.retry_max_wait)
        else:
            client = remote
        client.observers.append(self.metrics.on_request)
        state = StateStore(conf.state_path)
        self.tracker = ResourceTracker(conf, driver, ReportClient(client, state), state)
        self.conf = conf
        self._stack = stack
        watch = getattr(driver, "watch", None)
        if callable(watch):
            try:
                self._monitor = watch(self.request_cycle)
            except OSError as exc:
                LOG.warning("hot-plug events not watched (%s); cycles run on the schedule", exc)

    def _teardown(self) -> None:
        if self._monitor is not None:
            self._monitor.stop()
            self._monitor = None
        self._stack.close()
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

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            LOG.info("SIGHUP: reloading the configuration")
            self.reload()
        else:
            LOG.info("%s: stopping after the current cycle", signal.Signals(signum).name)
            self.stop()

    # -- the cycle ----------------------------------------------------------------------

    def _apply_reload(self) -> None:
        self._reload_requested = False
        self.notifier.reloading()
        try:
            conf = self._load_conf()
        except AgentError as exc:
            LOG.error("configuration not reloaded, the previous one stays: %s", exc)
            self.notifier.ready()
            return
        try:
            self._build(conf)
        except AgentError as exc:
            LOG.error("configuration not reloaded, the previous one stays: %s", exc)
        self.notifier.ready()

    def run_cycle(self) -> CycleOutcome | None:
        """Run one cycle now (the cycle worker's job; ``--once`` calls it directly).

        Returns:
            The outcome, or None when the cycle was fatal (see :attr:`exit_code`).
        """
        with self._cycle_lock:
            self._running_since = time.monotonic()
            self._early_requested = False
            try:
                # One request id (req-...) on every log line of the cycle.
                with logs.cycle_context():
                    return self._cycle()
            finally:
                self._running_since = None
                if self._early_requested and not self._stop.is_set():
                    self.request_cycle()

    def _cycle(self) -> CycleOutcome | None:
        if self._reload_requested:
            self._apply_reload()
        assert self.tracker is not None
        startup = not self._started_ok
        client = self.tracker.report.client
        try:
            with Progress("resource-tracking cycle", count=client.total_requests):
                outcome = self.tracker.update_available_resource(startup)
        except (ReshapeNeeded, ReshapeFailed) as exc:
            code = EXIT_RESHAPE_NEEDED if isinstance(exc, ReshapeNeeded) else EXIT_RESHAPE_FAILED
            LOG.critical("%s: %s. %s", type(exc).__name__, exc, FATAL_ADVICE[code])
            outcome = CycleOutcome(startup=startup, started=time.time())
            outcome.error = f"{type(exc).__name__}: {exc}"
            self._record(outcome, fatal=True)
            self.exit_code = code
            self._stop.set()
            return None
        except Exception as exc:  # the service never dies of one cycle
            LOG.error("cycle failed: %s: %s", type(exc).__name__, exc)
            LOG.debug("traceback of the failed cycle", exc_info=True)
            outcome = CycleOutcome(startup=startup, started=time.time())
            outcome.error = f"{type(exc).__name__}: {exc}"
        if outcome.ok:
            self._started_ok = True
        if outcome.progressed:
            self._last_progress = time.monotonic()
        self._record(outcome)
        if not self._ready_sent:
            # READY after the start-up cycle (and any reshape) is done: systemd's
            # TimeoutStartSec then covers it, and "active" means Placement is in step.
            self._ready_sent = True
            self.notifier.ready()
        return outcome

    def _record(self, outcome: CycleOutcome, fatal: bool = False) -> None:
        self.cycles += 1
        self.last_outcome = outcome
        self.metrics.observe_cycle(outcome, fatal)
        assert self.conf is not None
        state = self.tracker.state if self.tracker is not None else StateStore(self.conf.state_path)
        for node in outcome.nodes:
            if node.ok:
                try:
                    self.metrics.observe_state(node.nodename, state)
                except (OSError, ValueError, TypeError, AttributeError) as exc:
                    LOG.warning("node %s: inventory metrics not updated: %s", node.nodename, exc)
        self.notifier.status(outcome.summary())
        state.set_last_cycle(
            {
                **outcome.to_json(),
                "fatal": fatal,
                "pid": os.getpid(),
                # status measures age on the monotonic clock when on the same boot
                "finished_monotonic": time.monotonic(),
                "boot_id": boot_id(),
            }
        )

    # -- running ------------------------------------------------------------------------

    def _healthy(self) -> bool:
        """True while the worker lives, no cycle overran, and cycles make progress.

        Measured on the monotonic clock. A cycle that ran for longer than
        ``cycle_timeout`` plus ``stop_timeout`` is stuck; no progress for two
        intervals plus the jitter means nothing works (Placement unreachable,
        every node failing): systemd's watchdog then restarts the service.
        """
        assert self.conf is not None
        if self._worker is None or not self._worker.is_alive():
            return False
        now = time.monotonic()
        since = self._running_since
        if since is not None and now - since > self.conf.cycle_timeout + self.conf.stop_timeout:
            return False
        window = 2 * self.conf.update_interval + self.conf.update_jitter
        return now - self._last_progress < window

    def run(self, once: bool = False) -> int:
        """Start, run cycles until stopped, return the exit code.

        Args:
            once: run one start-up cycle and return its status (0 when every
                node succeeded, 1 otherwise, 4/5 when fatal).

        Raises:
            ConfigError: the configuration is invalid at start.
        """
        self._build(self._load_conf())
        assert self.conf is not None
        # Every option in effect, as every OpenStack service logs it (secret ones as ****).
        self.conf.log_opt_values(LOG, logging.DEBUG)
        try:
            if self.conf.metrics.listen and not once:
                try:
                    self.metrics_address = self.metrics.serve(self.conf.metrics.listen)
                except OSError as exc:
                    LOG.error(
                        "metrics endpoint not started on %s: %s", self.conf.metrics.listen, exc
                    )
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
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(signum, self._on_signal)
        self._last_progress = time.monotonic()
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
                if self._healthy():
                    self.notifier.watchdog()
        finally:
            self.notifier.stopping()
            self._worker.join(self.conf.stop_timeout)
            if self._worker.is_alive() and self.tracker is not None:
                # No new request, retry waits end: a cycle between requests ends now.
                self.tracker.report.client.abort.set()
                self._worker.join(1.0)
            if self._worker.is_alive():
                LOG.warning(
                    "the running cycle did not finish within %d s of the stop request; "
                    "stopping without it (the next start carries on where it was)",
                    self.conf.stop_timeout,
                )
        return self.exit_code

    def _loop(self) -> None:
        """Run cycles: now, then every interval (plus jitter), or early when asked."""
        assert self.conf is not None
        due = time.monotonic()
        while not self._stop.is_set():
            # Event.wait measures monotonic time: wall-clock steps do not move `due`.
            if self._wake.wait(max(0.0, due - time.monotonic())):
                self._wake.clear()
            if self._stop.is_set():
                break
            self.run_cycle()
            conf = self.conf
            due = time.monotonic() + conf.update_interval + random.uniform(0, conf.update_jitter)
