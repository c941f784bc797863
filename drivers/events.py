"""Events a driver raises when instances come and go, and the listeners that hear them.

A driver describes hardware and instances; it does not call the layers above
it. When something happens on the hypervisor that those layers care about
(an instance about to start, an instance gone), the driver emits an event
record and whoever subscribed hears it: the resource tracker claims or gives
back the instance's resources (``ResourceTracker.handle_event``), the way
nova-compute claims before it spawns and gives back after it destroys.

The records are generic on purpose: every driver emits the same ones and
listeners need not know which driver sent them. Two kinds:

* *before/after a change made through the driver* (:class:`InstanceSpawning`,
  :class:`InstanceDestroyed`): what nova-compute's claim and its give-back hear;
* *seen on the host after the fact* (:class:`InstanceChanged`,
  :class:`DevicesChanged`, :class:`HostResync`): a domain started, stopped,
  migrated or undefined, a device hot-plugged, a hypervisor connection lost
  and back. They carry what changed, not what it now is: a listener re-reads
  the driver (``list_instances``, ``get_host_resources``), so an event that
  arrives late or twice cannot apply a stale view. The service queues and
  coalesces them into targeted updates (docs/service.md, "Events").

A driver starts emitting events seen on the host when
:meth:`drivers.base.ComputeDriver.watch` is called, from whatever thread
watches (libvirt's event loop, udev's monitor, inotify): listeners of those
events must return quickly and must not raise.

Delivery rules (the same for every driver):

* listeners are called synchronously, in subscription order, in the thread of
  the call that emitted the event, outside any lock the driver holds (a
  listener may read the driver back);
* an exception raised by a listener stops delivery and propagates to the
  emitter. For an event emitted *before* a change (:class:`InstanceSpawning`)
  that is a veto: the driver does not make the change (a failed claim raises
  ``CapacityExceeded`` and the instance is not added). For an event emitted
  *after* a change (:class:`InstanceDestroyed`) the change stands and the
  error reaches the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from drivers.records import Instance


@dataclass(frozen=True)
class InstanceEvent:
    """Something happened to ``instance`` on compute node ``nodename``.

    Attributes:
        nodename: the node (root resource provider name) the instance is on.
        instance: the instance as the driver describes it (flavor, devices,
            NUMA cells): what a listener needs to claim or give back.
    """

    nodename: str
    instance: Instance


@dataclass(frozen=True)
class InstanceSpawning(InstanceEvent):
    """The instance is about to be started on the node; it does not hold anything yet.

    Emitted before the driver adds the instance: a listener that raises
    vetoes the spawn (nova's claim-before-spawn, resource-providers-allocations.txt).
    """


@dataclass(frozen=True)
class InstanceDestroyed(InstanceEvent):
    """The instance is gone from the node; what it held may be given back."""


@dataclass(frozen=True)
class InstanceChanged:
    """Something happened to one instance on the node, seen after the fact.

    Emitted for a domain defined, started, stopped, resumed, suspended,
    migrated in or out, undefined, or a device attached to or detached from
    it; a listener re-reads the instance from the driver and brings its
    allocation in step (an instance the driver no longer lists is gone).

    Attributes:
        nodename: the node the instance is (or was) on.
        instance_uuid: the instance (the consumer UUID of its allocation).
        what: what happened, in libvirt's words where there are some
            (``"started"``, ``"stopped"``, ``"undefined"``, ``"device-added"``,
            ``"migrated"``...), for logs only: listeners must not branch on it.
    """

    nodename: str
    instance_uuid: str
    what: str = ""


@dataclass(frozen=True)
class DevicesChanged:
    """Hardware of a node came or went (a PCI device, a VF, an mdev, a GPU).

    A listener re-reads the node's hardware and writes the providers that
    differ (only those of the devices named, when the driver can tell).

    Attributes:
        nodename: the node; None means every node of the driver.
        addresses: the PCI addresses (``0000:81:00.1``) or mdev UUIDs
            concerned, when the driver knows them; empty means unknown.
        what: what happened (``"add"``, ``"remove"``, ``"change"``), for logs only.
    """

    nodename: str | None
    addresses: tuple[str, ...] = ()
    what: str = ""


@dataclass(frozen=True)
class HostResync:
    """Anything on the host may have changed unseen: re-read everything (a full cycle).

    Emitted when the driver's view of the hypervisor was interrupted (a
    libvirt connection closed and opened again, a watched file replaced
    wholesale) and events may have been missed.

    Attributes:
        reason: why, for logs (``"libvirt connection re-opened after ..."``).
    """

    reason: str


DriverEvent: TypeAlias = InstanceEvent | InstanceChanged | DevicesChanged | HostResync
"""Every event a driver emits."""


class Watch(Protocol):
    """A running watcher of the host, as :meth:`drivers.base.ComputeDriver.watch` returns it."""

    def stop(self) -> None:
        """Stop watching; no event is emitted once it returns. Safe to call twice."""


Listener: TypeAlias = Callable[[DriverEvent], None]
"""A callable that hears events; it may raise to veto an event emitted before a change."""


class EventEmitter:
    """Mixin giving a driver a list of listeners and :meth:`emit`.

    It needs no ``__init__`` call: the listener list is created on the first
    subscription, so it mixes into any class whatever its constructor does.
    Subscribing replaces the tuple of listeners as a whole, so :meth:`emit`
    running in another thread sees either the old or the new list, never a
    half-changed one.
    """

    _listeners: tuple[Listener, ...] = ()

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(event)`` for every event emitted from now on.

        Subscribing the same listener twice makes it hear each event twice.
        """
        self._listeners = (*self._listeners, listener)

    def unsubscribe(self, listener: Listener) -> None:
        """Stop calling ``listener`` (the first subscription equal to it).

        Raises:
            ValueError: ``listener`` is not subscribed.
        """
        listeners = list(self._listeners)
        listeners.remove(listener)
        self._listeners = tuple(listeners)

    def emit(self, event: DriverEvent) -> None:
        """Deliver ``event`` to every listener, in subscription order.

        Raises:
            Exception: whatever a listener raised; later listeners do not hear
                the event (see the module's delivery rules).
        """
        for listener in self._listeners:
            listener(event)
