"""Hot-plug: a udev monitor (pci, net, mdev) naming the devices that came or went, debounced.

Creating 64 VFs emits well over a hundred udev events within a second, and
sysfs settles only once the VF driver has bound; the callback runs once,
``delay`` seconds after the last event, with the PCI addresses (and mdev
UUIDs) of every device seen meanwhile, so the service makes one targeted
update of those providers, not a hundred (docs/service.md, "Events").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from drivers.debounce import Debouncer

LOG = logging.getLogger("drivers.host.hotplug")

SUBSYSTEMS: tuple[str, ...] = ("pci", "net", "mdev")
"""udev subsystems whose events can change what the host offers."""


def device_key(device: Any) -> str:
    """The PCI address (or mdev UUID) a udev event is about.

    A ``pci`` device is named by its address (``0000:81:00.1``), an ``mdev`` by
    its UUID; a ``net`` device stands for the PCI function under it (empty
    when it has none: a bridge, a tap).
    """
    if getattr(device, "subsystem", "") == "net":
        find_parent = getattr(device, "find_parent", None)
        parent = find_parent("pci") if find_parent is not None else None
        return parent.sys_name if parent is not None else ""
    return str(device.sys_name)


class HotplugMonitor:
    """Watches udev for devices coming and going.

    Args:
        callback: called (debounced) after events with the PCI addresses and
            mdev UUIDs they were about (:func:`device_key`; empty when none).
        delay: debounce delay in seconds (``[host_driver] hotplug_debounce``).
        subsystems: udev subsystems to watch.
        context: a ``pyudev.Context`` (default: a new one).

    Attributes:
        events: ``(action, subsystem, sys_name)`` of every event seen, newest
            last (at most 100), for logs and tests.
    """

    def __init__(
        self,
        callback: Callable[[tuple[str, ...]], None],
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
        LOG.info("udev %s %s %s: the devices will be read again", *event)
        self._debouncer.trigger(device_key(device))

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
