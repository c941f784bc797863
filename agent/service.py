"""The service: ``compute-agent run``.

APScheduler runs :meth:`ResourceTracker.update_available_resource` every
``update_interval`` seconds (plus up to ``update_jitter``), never two at once
(``max_instances=1``; an early request that arrives during a cycle runs
right after it). The first cycle is the start-up one; start-up lasts until
a cycle succeeds for every node, because a reshape is only performed then
(reshape-provider-tree.txt).

Signals: SIGTERM and SIGINT let the running cycle finish, then exit 0; SIGHUP
re-reads the configuration, drops every cache (driver, Placement client and
what it remembers) and runs a cycle early. Hot-plug events of drivers that
watch for them (the host driver's udev monitor) also run a cycle early.

Fatal: ``ReshapeNeeded`` outside start-up (exit 4: a restart performs the
reshape) and ``ReshapeFailed`` (exit 5: Placement is unchanged, an operator
must look). Any other failure of a cycle is logged and retried next time.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from oslo_config import cfg

from agent import logs
from agent.commands.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_RESHAPE_FAILED,
    EXIT_RESHAPE_NEEDED,
)
from agent.exceptions import AgentError, ReshapeFailed, ReshapeNeeded
from agent.metrics import AgentMetrics
from agent.notify import Notifier
from agent.placement.connect import placement_client
from agent.progress import Progress
from agent.report import ReportClient
from agent.state import StateStore
from agent.tracker import CycleOutcome, ResourceTracker
from drivers import load_driver
from drivers.base import ComputeDriver

LOG = logging.getLogger(__name__)

JOB_ID = "resource-tracking-cycle"

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
        self._scheduler: BackgroundScheduler | None = None
        self._monitor: Any = None

    # -- components ------------------------------------------------------------------

    def _build(self, conf: cfg.ConfigOpts) -> None:
        stack = contextlib.ExitStack()
        try:
            driver = self._driver_factory(conf)
            client = stack.enter_context(placement_client(conf))
        except BaseException:
            stack.close()
            raise
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
        """Finish the running cycle, if any, and exit 0."""
        self._stop.set()

    def reload(self) -> None:
        """Re-read the configuration and drop caches before an early cycle."""
        self._reload_requested = True
        self.request_cycle()

    def request_cycle(self) -> None:
        """Run a cycle now, or right after the running one."""
        self._early_requested = True
        if self._scheduler is not None and self._running_since is None:
            with contextlib.suppress(Exception):  # the scheduler may be shutting down
                self._scheduler.modify_job(JOB_ID, next_run_time=_now())

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
        old = self.conf
        self._teardown()
        try:
            self._build(conf)
        except AgentError as exc:
            LOG.error("configuration not reloaded, the previous one stays: %s", exc)
            assert old is not None
            self._build(old)
        assert self.conf is not None
        if self._scheduler is not None:
            self._scheduler.reschedule_job(
                JOB_ID,
                trigger="interval",
                seconds=self.conf.update_interval,
                jitter=self.conf.update_jitter or None,
            )
        self.notifier.ready()

    def run_cycle(self) -> CycleOutcome | None:
        """Run one cycle now (the scheduler's job; ``--once`` calls it directly).

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
            LOG.exception("cycle failed")
            outcome = CycleOutcome(startup=startup, started=time.time())
            outcome.error = f"{type(exc).__name__}: {exc}"
        if outcome.ok:
            self._started_ok = True
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
        state = StateStore(self.conf.state_path)
        for node in outcome.nodes:
            if node.ok:
                try:
                    self.metrics.observe_state(node.nodename, state)
                except (OSError, ValueError, TypeError, AttributeError) as exc:
                    LOG.warning("node %s: inventory metrics not updated: %s", node.nodename, exc)
        self.notifier.status(outcome.summary())
        try:
            state.set_last_cycle({**outcome.to_json(), "fatal": fatal, "pid": os.getpid()})
        except OSError as exc:
            LOG.error("could not record the cycle's outcome in %s: %s", self.conf.state_path, exc)

    # -- running ------------------------------------------------------------------------

    def _healthy(self) -> bool:
        """False when the scheduler died or a cycle has run for longer than the watchdog allows."""
        if self._scheduler is None or not self._scheduler.running:
            return False
        since = self._running_since
        limit = (self.notifier.watchdog_interval or 0) * 2
        return since is None or not limit or time.monotonic() - since < limit

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
        scheduler = BackgroundScheduler(
            job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": None}
        )
        scheduler.add_job(
            self.run_cycle,
            "interval",
            id=JOB_ID,
            seconds=self.conf.update_interval,
            jitter=self.conf.update_jitter or None,
            next_run_time=_now(),
        )
        self._scheduler = scheduler
        scheduler.start()
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
            # wait=True: the running cycle finishes before we return.
            scheduler.shutdown(wait=True)
            self._scheduler = None
        return self.exit_code


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
