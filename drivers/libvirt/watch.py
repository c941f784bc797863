"""libvirt's events as driver events: domains and node devices seen changing, a lost connection.

What is registered on each connection the driver opens (libvirt's event
API; the same events nova-compute's libvirt driver listens to):

* domain lifecycle (``VIR_DOMAIN_EVENT_ID_LIFECYCLE``): defined, undefined,
  started and stopped (including the ``MIGRATED`` details of a migration in
  or out) become :class:`~drivers.events.InstanceChanged`; suspended,
  resumed, shut down (followed by stopped), crashed and pmsuspended change
  no allocation and are only logged at DEBUG;
* domain devices added and removed (``VIR_DOMAIN_EVENT_ID_DEVICE_ADDED`` /
  ``_REMOVED``: a host device hot-plugged into an instance) become
  :class:`~drivers.events.InstanceChanged`;
* node device lifecycle (``VIR_NODE_DEVICE_EVENT_ID_LIFECYCLE``: a VF, an
  mdev, a PCI device created or deleted) becomes
  :class:`~drivers.events.DevicesChanged` naming its PCI address or mdev UUID;
* the close callback (``virConnectRegisterCloseCallback``: libvirtd
  stopped, the socket broke, keepalive timed out) starts a reconnection
  with backoff in a thread of its own; once a connection is open again,
  :class:`~drivers.events.HostResync` asks for a full cycle, since events
  were missed meanwhile. A connection the cycle itself found dead and
  re-opened does the same (:attr:`LibvirtConnection.on_open`).

Callbacks run on libvirt's event loop thread (:class:`EventLoop`, one per
process, as nova runs it): they only build the event and hand it to the
driver's listeners, which queue it (docs/service.md, "Events").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import libvirt

from drivers.events import DevicesChanged, DriverEvent, HostResync, InstanceChanged
from drivers.libvirt.connection import LibvirtConnection, LibvirtConnectionError

LOG = logging.getLogger(__name__)

# VIR_DOMAIN_EVENT_* (libvirt-domain.h): the lifecycle events that can change
# what an instance holds; the others are logged only.
_LIFECYCLE: dict[int, str] = {
    libvirt.VIR_DOMAIN_EVENT_DEFINED: "defined",
    libvirt.VIR_DOMAIN_EVENT_UNDEFINED: "undefined",
    libvirt.VIR_DOMAIN_EVENT_STARTED: "started",
    libvirt.VIR_DOMAIN_EVENT_STOPPED: "stopped",
}
_MIGRATED: dict[tuple[int, int], str] = {
    (libvirt.VIR_DOMAIN_EVENT_STARTED, libvirt.VIR_DOMAIN_EVENT_STARTED_MIGRATED): "migrated-in",
    (libvirt.VIR_DOMAIN_EVENT_STOPPED, libvirt.VIR_DOMAIN_EVENT_STOPPED_MIGRATED): "migrated-out",
}
_NODEDEV: dict[int, str] = {
    libvirt.VIR_NODE_DEVICE_EVENT_CREATED: "add",
    libvirt.VIR_NODE_DEVICE_EVENT_DELETED: "remove",
}


class EventLoop:
    """libvirt's default event loop, run by one daemon thread for the whole process.

    libvirt has one event implementation per process; nova-compute too runs
    ``virEventRunDefaultImpl`` in a native thread for as long as it lives.
    The thread is started by the first watcher and never stopped: a watcher
    that stops deregisters its callbacks instead.
    """

    _lock = threading.Lock()
    _thread: threading.Thread | None = None

    @classmethod
    def ensure_running(cls) -> None:
        """Start the loop thread unless it runs already."""
        with cls._lock:
            if cls._thread is not None and cls._thread.is_alive():
                return
            cls._thread = threading.Thread(target=cls._run, name="libvirt-events", daemon=True)
            cls._thread.start()

    @staticmethod
    def _run() -> None:
        while True:
            if libvirt.virEventRunDefaultImpl() < 0:
                LOG.error("libvirt event loop iteration failed; events may be delayed")


def address_of_node_device(name: str) -> str:
    """The PCI address or mdev UUID a libvirt node device name stands for.

    ``pci_0000_81_00_1`` -> ``0000:81:00.1``; ``mdev_4b20d080_1b54_4048_85b3_a6a62d165c01``
    -> the UUID with dashes (libvirt's names before 7.3; later ones look the
    same with the parent's address appended, which is dropped); any other
    name (``net_...``) is returned as it is.
    """
    if name.startswith("pci_"):
        parts = name[4:].split("_")
        if len(parts) == 4:
            return f"{parts[0]}:{parts[1]}:{parts[2]}.{parts[3]}"
    if name.startswith("mdev_"):
        hexes = name[5:].split("_")
        if len(hexes) >= 5:
            return "-".join(hexes[:5])
    return name


class LibvirtWatch:
    """Registers for libvirt's events on every connection the driver opens.

    Args:
        connection: the driver's connection (callbacks follow it when it is re-opened).
        nodename: the node events are about (``[DEFAULT] host``).
        emit: the driver's :meth:`~drivers.events.EventEmitter.emit`.
        retry_delay: seconds between reconnection rounds after the connection
            closed (each round is :meth:`LibvirtConnection.get` with its own
            backoff; ``[libvirt] reconnect_max_delay``).
    """

    def __init__(
        self,
        connection: LibvirtConnection,
        nodename: str,
        emit: Callable[[DriverEvent], None],
        retry_delay: float = 8.0,
    ) -> None:
        self.connection = connection
        self.nodename = nodename
        self._emit = emit
        self.retry_delay = retry_delay
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._conn: libvirt.virConnect | None = None
        self._ids: list[tuple[str, int]] = []
        self._reconnecting: threading.Thread | None = None
        self.reconnections = 0
        """Connections re-opened while watching (each one emitted HostResync)."""

    def start(self) -> None:
        """Start the event loop and register on the driver's connection.

        When libvirt cannot be reached now, a warning says so and the watch
        registers on the connection the next cycle opens (with a full cycle,
        as after any re-open); until then the cycles alone keep Placement in step.
        """
        EventLoop.ensure_running()
        self.connection.on_open.append(self._opened)
        try:
            conn = self.connection.get()
        except LibvirtConnectionError as exc:
            LOG.warning("%s; events are watched once a cycle opens the connection", exc)
            return
        self._register(conn)

    def stop(self) -> None:
        """Deregister every callback; no event is emitted once this returns."""
        self._stopped.set()
        if self._opened in self.connection.on_open:
            self.connection.on_open.remove(self._opened)
        with self._lock:
            self._deregister()

    # -- registration -------------------------------------------------------------------

    def _opened(self, conn: libvirt.virConnect, opened: int) -> None:
        """A connection was opened by anyone: register on it; a re-open means a resync."""
        if self._stopped.is_set():
            return
        self._register(conn)
        if opened > 1:
            self.reconnections += 1
            self._send(HostResync(f"libvirt {self.connection.safe_uri} connection re-opened"))

    def _register(self, conn: libvirt.virConnect) -> None:
        with self._lock:
            if conn is self._conn or self._stopped.is_set():
                return
            self._deregister()
            self._conn = conn
            ids = [
                ("domain", conn.domainEventRegisterAny(None, kind, callback, None))
                for kind, callback in (
                    (libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle),
                    (libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED, self._on_device_added),
                    (libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, self._on_device_removed),
                )
            ]
            node = libvirt.VIR_NODE_DEVICE_EVENT_ID_LIFECYCLE
            nodedev = conn.nodeDeviceEventRegisterAny(None, node, self._on_nodedev, None)
            ids.append(("nodedev", nodedev))
            self._ids = ids
            try:
                conn.registerCloseCallback(self._on_close, None)
                self._ids.append(("close", 0))
            except libvirt.libvirtError as exc:  # drivers without one: the cycle's isAlive
                LOG.info("libvirt %s: no close callback (%s)", self.connection.safe_uri, exc)
        LOG.info("libvirt %s: watching domain and node device events", self.connection.safe_uri)

    def _deregister(self) -> None:
        conn, self._conn = self._conn, None
        ids, self._ids = self._ids, []
        if conn is None:
            return
        for kind, callback_id in ids:
            try:
                if kind == "domain":
                    conn.domainEventDeregisterAny(callback_id)
                elif kind == "nodedev":
                    conn.nodeDeviceEventDeregisterAny(callback_id)
                else:
                    conn.unregisterCloseCallback()
            except libvirt.libvirtError:
                pass  # the connection is gone, and its callbacks with it

    # -- callbacks (libvirt's event loop thread) ----------------------------------------

    def _send(self, event: DriverEvent) -> None:
        if self._stopped.is_set():
            return
        try:
            self._emit(event)
        except Exception:  # never into libvirt's C loop: the event is lost, the audit heals
            LOG.exception("libvirt event %s not delivered", event)

    def _on_lifecycle(self, _c: Any, dom: Any, event: int, detail: int, _o: Any) -> None:
        what = _MIGRATED.get((event, detail)) or _LIFECYCLE.get(event)
        if what is None:
            LOG.debug("libvirt: domain %s lifecycle event %d/%d ignored", dom.name(), event, detail)
            return
        self._send(InstanceChanged(self.nodename, dom.UUIDString(), what))

    def _on_device_added(self, _c: Any, dom: Any, _alias: str, _o: Any) -> None:
        self._send(InstanceChanged(self.nodename, dom.UUIDString(), "device-added"))

    def _on_device_removed(self, _c: Any, dom: Any, _alias: str, _o: Any) -> None:
        self._send(InstanceChanged(self.nodename, dom.UUIDString(), "device-removed"))

    def _on_nodedev(self, _c: Any, dev: Any, event: int, _detail: int, _o: Any) -> None:
        what = _NODEDEV.get(event)
        if what is None:
            return  # updated: a driver rebind shows as remove/add of its children
        address = address_of_node_device(dev.name())
        self._send(DevicesChanged(self.nodename, (address,), what))

    def _on_close(self, _conn: Any, reason: int, _o: Any) -> None:
        if self._stopped.is_set() or reason == libvirt.VIR_CONNECT_CLOSE_REASON_CLIENT:
            return  # closed by us (the driver dropped it): whoever re-opens it registers
        LOG.warning(
            "libvirt %s: connection closed (reason %d); reconnecting",
            self.connection.safe_uri,
            reason,
        )
        with self._lock:
            if self._reconnecting is not None and self._reconnecting.is_alive():
                return
            # Not on the event loop thread: opening blocks, and backs off.
            self._reconnecting = threading.Thread(
                target=self._reconnect, name="libvirt-reconnect", daemon=True
            )
            self._reconnecting.start()

    def _reconnect(self) -> None:
        """Open the connection again, round after round, until it opens or the watch stops."""
        while not self._stopped.is_set():
            try:
                self.connection.get()  # finds it dead, re-opens: _opened resyncs
                return
            except LibvirtConnectionError as exc:
                LOG.warning("%s; trying again in %.1f s", exc, self.retry_delay)
            self._stopped.wait(self.retry_delay)
