"""systemd notifications (``Type=notify``): READY, STATUS, WATCHDOG, STOPPING.

Outside systemd (no ``NOTIFY_SOCKET``) every call does nothing, so the same
code runs in a terminal, in tests and under systemd.
"""

from __future__ import annotations

import logging
import os

import sdnotify

LOG = logging.getLogger(__name__)


class Notifier:
    """Talks to systemd's notification socket when there is one."""

    def __init__(self) -> None:
        self.enabled = bool(os.environ.get("NOTIFY_SOCKET"))
        self._notifier = sdnotify.SystemdNotifier() if self.enabled else None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between two WATCHDOG=1 pings: half of ``WatchdogSec``, or None when off.

        systemd passes ``WatchdogSec`` as ``WATCHDOG_USEC`` (microseconds), and
        sd_watchdog_enabled(3) advises pinging at half that period.
        """
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        if not usec.isdigit() or (pid and pid != str(os.getpid())):
            return None
        return int(usec) / 2_000_000

    def _send(self, state: str) -> None:
        if self._notifier is not None:
            self._notifier.notify(state)

    def ready(self) -> None:
        """Tell systemd start-up is over."""
        self._send("READY=1")

    def status(self, text: str) -> None:
        """One line shown by ``systemctl status``."""
        self._send("STATUS=" + text.replace("\n", " "))

    def watchdog(self) -> None:
        """The loop is healthy."""
        self._send("WATCHDOG=1")

    def reloading(self) -> None:
        """A SIGHUP reload has begun (ended by :meth:`ready`)."""
        self._send("RELOADING=1")

    def stopping(self) -> None:
        """Shutdown has begun."""
        self._send("STOPPING=1")
