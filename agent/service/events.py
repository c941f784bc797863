"""The service's event queue: driver events in, coalesced batches of targeted updates out.

Drivers emit events from their own threads (libvirt's event loop, udev's
monitor, inotify); listeners must return at once (drivers.events). The queue
only records *what* must be read again, so a burst coalesces by itself:
100 events about 10 instances make one batch of 10 instance updates, 64 VF
events one device update of the node. The cycle worker takes the batch
after ``[DEFAULT] event_delay`` seconds of grace (more events of the same
burst join it) and hands it to :meth:`ResourceTracker.apply_events`.

Ordering with the periodic cycle (the audit): a cycle reads the driver after
it starts, so what was queued before it starts is covered by it and dropped
(:meth:`EventQueue.discard`); what arrives during a cycle stays queued and
is applied after it. A targeted update writes only what differs from what
Placement holds, so an event the cycle already saw costs one read and no
write: nothing is lost, nothing is written twice.

:class:`~drivers.events.HostResync` (a libvirt connection re-opened, nodes
added to the fake host) asks for a full cycle instead. The claim events
(``InstanceSpawning``, ``InstanceDestroyed``) are for a subscribed tracker,
not for the queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from agent.service.metric_families import EventMetrics
from agent.tracker.cycle import ResourceTracker
from agent.tracker.targeted import EventBatch, TargetedOutcome
from drivers.events import DevicesChanged, DriverEvent, HostResync, InstanceChanged

LOG = logging.getLogger(__name__)


class EventQueue:
    """Coalesces driver events into one pending :class:`EventBatch` (thread-safe).

    Args:
        wake: called after an event is queued (wakes the cycle worker).
        resync: called on :class:`HostResync` (requests a full cycle).
        count: called with the kind of every event heard (``instance``,
            ``devices``, ``resync``), for the metrics.
    """

    def __init__(
        self,
        wake: Callable[[], None],
        resync: Callable[[], None],
        count: Callable[[str], None] = lambda kind: None,
    ) -> None:
        self._wake = wake
        self._resync = resync
        self._count = count
        self._lock = threading.Lock()
        self._batch = EventBatch()
        self._since: float | None = None

    def put(self, event: DriverEvent) -> None:
        """Queue ``event`` (a driver listener: returns at once, never raises for a known event)."""
        if isinstance(event, HostResync):
            LOG.info("%s: a full cycle is requested", event.reason)
            self._count("resync")
            self._resync()
            return
        if not isinstance(event, InstanceChanged | DevicesChanged):
            return
        with self._lock:
            batch = self._batch
            if isinstance(event, InstanceChanged):
                batch.instances.setdefault(event.nodename, set()).add(event.instance_uuid)
                kind = "instance"
            else:
                batch.devices.add(event.nodename)
                batch.addresses.setdefault(event.nodename, set()).update(event.addresses)
                kind = "devices"
            batch.events += 1
            if self._since is None:
                self._since = time.monotonic()
        LOG.debug("event queued: %s", event)
        self._count(kind)
        self._wake()

    @property
    def pending(self) -> bool:
        """True when a batch waits to be taken."""
        with self._lock:
            return bool(self._batch)

    def take(self) -> tuple[EventBatch, float | None]:
        """The pending batch, emptied from the queue.

        Returns:
            The batch and the monotonic time its first event was queued
            (None when the batch is empty).
        """
        with self._lock:
            batch, self._batch = self._batch, EventBatch()
            since, self._since = self._since, None
        return batch, since

    def discard(self) -> int:
        """Drop what is queued: a full cycle starting now reads all of it again.

        Returns:
            How many events were dropped.
        """
        batch, _since = self.take()
        return batch.events


def apply_pending(
    queue: EventQueue, tracker: ResourceTracker, metrics: EventMetrics
) -> TargetedOutcome | None:
    """Take the queued batch and make its targeted updates (the cycle worker's job).

    Args:
        queue: the service's queue.
        tracker: the resource tracker (:meth:`ResourceTracker.apply_events`).
        metrics: where the batch's outcome and latency are counted.

    Returns:
        What was done, or None when nothing was queued.

    Raises:
        ReshapeNeeded: a device change needs a reshape (fatal: exit 4).
    """
    batch, since = queue.take()
    if not batch or since is None:
        return None
    outcome = tracker.apply_events(batch)
    elapsed = time.monotonic() - since
    metrics.observe(not outcome.errors, elapsed)
    (LOG.info if not outcome.errors else LOG.warning)(
        "%d event(s): %d instance(s) read again, %d node(s) rediscovered; %d allocation(s) "
        "written, %d removed, %d provider write(s); %d placement request(s); %.3f s after "
        "the first%s",
        batch.events,
        sum(len(u) for u in batch.instances.values()),
        len(batch.devices),
        len(outcome.written),
        len(outcome.removed),
        outcome.providers,
        outcome.requests,
        elapsed,
        f"; {len(outcome.errors)} failed (the next cycle heals them)" if outcome.errors else "",
    )
    return outcome
