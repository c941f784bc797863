"""Events a driver raises when instances come and go, and the listeners that hear them.

A driver describes hardware and instances; it does not call the layers above
it. When something happens on the hypervisor that those layers care about
(an instance about to start, an instance gone), the driver emits an event
record and whoever subscribed hears it: the resource tracker claims or gives
back the instance's resources (``ResourceTracker.handle_event``), the way
nova-compute claims before it spawns and gives back after it destroys.

The records are generic on purpose: the fake driver emits them from
``spawn``/``destroy`` today; a driver that watches the hypervisor (libvirt's
domain lifecycle events) can emit the same records, and listeners need not
know which driver sent them.

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
from typing import TypeAlias

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


DriverEvent: TypeAlias = InstanceEvent
"""Every event a driver emits (today only instance events)."""

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
