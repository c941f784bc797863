"""Health of the running service, as the systemd watchdog sees it.

The watchdog is fed only while cycles make progress (docs/service.md,
"Health"): the last cycle that reached Placement and worked on a node is
younger than two intervals plus the jitter, and no cycle has overrun
``cycle_timeout`` plus ``stop_timeout``. A service whose cycles all fail is
then restarted by systemd, and ``status`` says why. Everything is measured
on the monotonic clock, so a wall-clock step changes nothing.
"""

from __future__ import annotations

import time

from oslo_config import cfg


class Health:
    """When the cycles last made progress, and whether one is running now."""

    def __init__(self) -> None:
        # Monotonic time of the last cycle that made progress (start counts as one).
        self.last_progress = time.monotonic()
        # Monotonic start of the running cycle, or None between cycles.
        self.running_since: float | None = None

    def progressed(self) -> None:
        """Cycles make progress now (one reached Placement and worked on a node, or
        the service starts serving)."""
        self.last_progress = time.monotonic()

    def cycle_started(self) -> None:
        """A cycle begins now."""
        self.running_since = time.monotonic()

    def cycle_ended(self) -> None:
        """The running cycle ended, whatever its outcome."""
        self.running_since = None

    def healthy(self, conf: cfg.ConfigOpts, worker_alive: bool) -> bool:
        """True while the worker lives, no cycle overran, and cycles make progress.

        A cycle that ran for longer than ``cycle_timeout`` plus
        ``stop_timeout`` (seconds) is stuck; no progress for two
        ``update_interval`` plus the ``update_jitter`` means nothing works
        (Placement unreachable, every node failing).

        Args:
            conf: the configuration in effect.
            worker_alive: the cycle worker thread is alive.
        """
        if not worker_alive:
            return False
        now = time.monotonic()
        since = self.running_since
        if since is not None and now - since > conf.cycle_timeout + conf.stop_timeout:
            return False
        window = 2 * conf.update_interval + conf.update_jitter
        return now - self.last_progress < window
