"""Hot-plug: a udev monitor (pci, net, mdev) that asks for an early cycle, debounced.

Creating 64 VFs emits well over a hundred udev events within a second; the
callback runs once, ``delay`` seconds after the last event, so the service
(which owns the cycle) runs one early cycle, not a hundred.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

LOG = logging.getLogger("drivers.host.hotplug")

SUBSYSTEMS: tuple[str, ...] = ("pci", "net", "mdev")
"""udev subsystems whose events can change what the host offers."""


class Debouncer:
    """Calls ``callback`` once, ``delay`` seconds after the last :meth:`trigger`.

    Args:
        callback: called with no arguments, on a timer thread.
        delay: seconds of quiet required (0 calls at once, on the timer thread).
    """

    def __init__(self, callback: Callable[[], None], delay: float) -> None:
        self._callback = callback
        self._delay = delay
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def trigger(self) -> None:
        """Restart the quiet period."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self._delay, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            self._timer = None
        try:
            self._callback()
        except Exception:  # a failing callback must not kill the monitor thread
            LOG.exception("hot-plug callback failed")

    def cancel(self) -> None:
        """Drop a pending call."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


class HotplugMonitor:
    """Watches udev for devices coming and going.

    Args:
        callback: called (debounced) after events; takes no arguments.
        delay: debounce delay in seconds (``[host_driver] hotplug_debounce``).
        subsystems: udev subsystems to watch.
        context: a ``pyudev.Context`` (default: a new one).

    Attributes:
        events: ``(action, subsystem, sys_name)`` of every event seen, newest
            last (at most 100), for logs and tests.
    """

    def __init__(
        self,
        callback: Callable[[], None],
        delay: float = 2.0,
        subsystems: Sequence[str] = SUBSYSTEMS,
        context: Any = None,
    ) -> None:
        self.subsystems = tuple(subsystems)
        self.events: list[tuple[str, str, str]] = []
        self._debouncer = Debouncer(callback, delay)
        self._context = context
        self._observer: Any = None

    def handle(self, device: Any) -> None:
        """Record one udev event (a pyudev Device with ``action``) and debounce."""
        subsystem = getattr(device, "subsystem", "") or ""
        if subsystem not in self.subsystems:
            return
        event = (device.action or "", subsystem, device.sys_name)
        self.events = [*self.events[-99:], event]
        LOG.info("udev %s %s %s: early cycle requested", *event)
        self._debouncer.trigger()

    def start(self) -> None:
        """Open the netlink monitor and start its thread.

        Raises:
            OSError: udev's netlink socket cannot be opened (no permission).
        """
        import pyudev  # only the service needs libudev at run time

        context = self._context or pyudev.Context()
        monitor = pyudev.Monitor.from_netlink(context)
        for subsystem in self.subsystems:
            monitor.filter_by(subsystem)
        self._observer = pyudev.MonitorObserver(monitor, callback=self.handle, name="hotplug")
        self._observer.start()

    def stop(self) -> None:
        """Stop the thread and drop a pending callback."""
        if self._observer is not None:
            self._observer.stop()
            self._observer = None
        self._debouncer.cancel()
