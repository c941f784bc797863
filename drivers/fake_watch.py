"""The fake driver's host file, watched: an edit while the agent runs becomes events.

Operators trying the agent, and functional tests, play a hypervisor by
editing the description file (docs/fake-host.md): an instance added to or
removed from it, a device added or removed, a total changed. The file's
directory is watched with inotify (the ``watchdog`` library); once writes
have been quiet for ``delay`` seconds the file is read again and what
differs from what the driver held becomes the same events the libvirt
driver emits (:func:`changes`). Editors that write a temporary file and
rename it over the description are seen too (the rename's destination).

A description that does not parse (a half-saved file) is warned about and
the driver keeps what it had; the next write is read again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from drivers.debounce import Debouncer
from drivers.events import DevicesChanged, DriverEvent, HostResync, InstanceChanged
from drivers.fake_host.nodes import FakeNode
from drivers.records import HostResources

LOG = logging.getLogger(__name__)

_WRITES = (FileClosedEvent, FileCreatedEvent, FileModifiedEvent, FileMovedEvent)


def _devices(host: HostResources) -> dict[str, object]:
    """Every device record of ``host`` by PCI address (whole devices, PFs, GPUs)."""
    found: dict[str, object] = {}
    for device in (*host.pci_devices, *host.sriov_pfs, *host.gpus):
        found[device.address] = device
    return found


def changed_addresses(old: HostResources, new: HostResources) -> tuple[str, ...]:
    """PCI addresses whose device was added, removed or changed between ``old`` and ``new``."""
    before, after = _devices(old), _devices(new)
    return tuple(sorted(a for a in before.keys() | after.keys() if before.get(a) != after.get(a)))


def changes(old: Mapping[str, FakeNode], new: Mapping[str, FakeNode]) -> list[DriverEvent]:
    """The events that turn the nodes ``old`` into ``new``.

    Returns:
        :class:`HostResync` alone when nodes were added or removed (a full
        cycle); otherwise, per node, one :class:`DevicesChanged` when its
        hardware differs (naming the devices that did, none when only totals
        moved) and one :class:`InstanceChanged` per instance added, removed
        or changed. Empty when nothing differs.
    """
    if list(old) != list(new):
        return [HostResync("fake host file: nodes added or removed")]
    events: list[DriverEvent] = []
    for name, node in new.items():
        before = old[name]
        if before.host != node.host:
            events.append(DevicesChanged(name, changed_addresses(before.host, node.host), "file"))
        for uuid in sorted(before.instances.keys() | node.instances.keys()):
            was, now = before.instances.get(uuid), node.instances.get(uuid)
            if was != now:
                what = "added" if was is None else "removed" if now is None else "changed"
                events.append(InstanceChanged(name, uuid, what))
    return events


class _Handler(FileSystemEventHandler):
    def __init__(self, path: Path, trigger: Callable[[], None]) -> None:
        self.path = path
        self.trigger = trigger

    def on_any_event(self, event: FileSystemEvent) -> None:
        if not isinstance(event, _WRITES):
            return
        touched = {str(event.src_path), str(getattr(event, "dest_path", "") or "")}
        if str(self.path) in touched:
            self.trigger()


class HostFileWatch:
    """Watches one description file and calls ``on_change`` once writes are quiet.

    Args:
        path: the description file.
        on_change: called (on a timer thread) after the file was written.
        delay: seconds of quiet before reading it (an editor's save is
            several inotify events).

    Raises:
        OSError: from :meth:`start`, when inotify cannot watch the directory.
    """

    def __init__(self, path: str | Path, on_change: Callable[[], None], delay: float) -> None:
        self.path = Path(path).resolve()
        self._debouncer = Debouncer(lambda _keys: on_change(), delay)
        self._observer: Any = None

    def start(self) -> None:
        """Start watching the file's directory.

        Raises:
            OSError: the directory cannot be watched (no inotify, too many watches).
        """
        observer = Observer()
        handler = _Handler(self.path, self._debouncer.trigger)
        observer.schedule(handler, str(self.path.parent), recursive=False)
        observer.start()
        self._observer = observer

    def stop(self) -> None:
        """Stop watching; a pending read is dropped."""
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(5)
        self._debouncer.cancel()
