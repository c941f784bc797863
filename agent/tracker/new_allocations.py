"""One cycle's new consumers, written across nodes: 100 per ``POST /allocations``, not one per node.

A consumer that holds nothing here is written with a null consumer
generation, many per ``POST /allocations``
(:meth:`~agent.placement.consumers.Consumers.write_new`). Node by node, a
thousand nodes with one new instance each cost a thousand requests; gathered
across the nodes of one cycle they cost ten (issue 28). "Plan, then
execute", as neutron's placement report (``placement_report.py``,
``deferred_sync``) does: each node's audit decides
(:meth:`~agent.audit.audit.AllocationAudit.begin`), the cycle writes every node's new consumers
together, then each node's audit applies what became of its own
(:meth:`~agent.audit.audit.AllocationAudit.finish`).

What each node keeps, as when it wrote alone:

- *write-ahead*: its record is saved with its listed instances by
  ``begin``, before any request that carries one of its consumers; after
  the results are applied it is saved again (``finish``), so a crash at any
  instant leaks nothing (docs/service.md, "Allocation audit").
- *a refused batch* (any 4xx: one consumer exists after all, does not fit,
  names a provider that is gone) is written one by one, each consumer in
  its own node's audit (``settle_one``, which merges and fails only the
  consumer at fault). A consumer gathered twice in one cycle (listed on two
  nodes) is not put in a batch again: once the request carrying it for the
  first node is answered, its second node reads and writes it alone, as the
  409 of its own batch made it do when each node wrote alone.
- *a failed batch* (Placement unreachable, a 5xx) fails the nodes with
  consumers in it that were not written (the node's outcome carries the
  error, as when the audit raised); nodes whose batches were written are not
  failed, and a node with consumers in both records those written.
- *own writes* (:mod:`agent.placement.own_writes`): a batch names each node's
  providers in that node's consumers only, so each node counts its own part
  of each request once, and the next listing proves them as before.
- *its lock* (:meth:`~agent.tracker.cycle.ResourceTracker._lock`: claims and targeted updates
  take it and save the same record) is held from the audit's start until
  its results are applied.

Locks are held no longer than needed: a batch is sent as soon as 100 new
consumers are gathered (streaming), by the node thread that gathered the
hundredth, and the last, partial one when every node has been looked at. So
a node waits at most for the next 99 new consumers of the nodes after it, or
for the end of the look at the nodes (the last partial batch). Writing only
after every node was looked at would hold every lock for the whole cycle;
writing per node is the thousand requests. A node whose writes are answered
is finished (``finish``) by the next node thread that is free
(:meth:`NewAllocations.drain`), so the refused batches' one-by-one writes
and the removals of many nodes still run in parallel; requests in flight
stay within the node pool's size (the batch is sent by one of its threads,
the last one by the cycle's thread after they are done). One cycle runs at
a time (the service's one worker thread): a second cycle at once could wait
on locks the first holds while holding the threads the first needs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agent.audit.audit_result import BulkWrites
from agent.model.allocations import ConsumerAllocations
from agent.placement.consumers import BULK_BATCH
from agent.placement.report import ReportClient

LOG = logging.getLogger(__name__)


@dataclass(eq=False)
class Pending:
    """One node's audit waiting for its new consumers' writes (its lock held).

    Attributes:
        nodename: the compute node.
        new: ``{consumer: allocations to write}``
            (:attr:`~agent.audit.audit_decision.AuditDecision.bulk`).
        complete: called once with ``bulk`` when every consumer of ``new``
            is answered (applies it, finishes the audit, releases the
            node's lock); must not raise.
        bulk: what became of ``new`` so far.
        waiting: consumers not answered yet.
    """

    nodename: str
    new: Mapping[str, ConsumerAllocations]
    complete: Callable[[BulkWrites], None]
    bulk: BulkWrites = field(default_factory=BulkWrites)
    waiting: int = 0


class NewAllocations:
    """Gathers the new consumers of one cycle's nodes and writes them ``batch`` per request.

    Thread-safe: node threads call :meth:`add` and :meth:`drain`, the
    cycle's thread :meth:`close` once they are done.

    Args:
        report: the Placement façade.
        batch: consumers per ``POST /allocations``.
    """

    def __init__(self, report: ReportClient, batch: int = BULK_BATCH) -> None:
        self.report = report
        self.batch = max(1, batch)
        self._guard = threading.Lock()
        self._queue: list[tuple[Pending, str]] = []
        self._seen: set[str] = set()
        self._open: set[str] = set()  # gathered, not answered yet
        self._twins: dict[str, list[Pending]] = {}  # nodes waiting for that answer
        self._ready: list[Pending] = []

    def add(self, pending: Pending) -> None:
        """Gather ``pending``'s consumers; send every full batch now, in this thread.

        A node with nothing to write is ready at once (:meth:`drain`).
        """
        with self._guard:
            fresh = sorted(c for c in pending.new if c not in self._seen)
            self._seen.update(fresh)
            self._open.update(fresh)
            self._queue.extend((pending, c) for c in fresh)
            pending.waiting = len(fresh)
            for consumer in sorted(set(pending.new) - set(fresh)):  # module docstring
                if consumer in self._open:
                    self._twins.setdefault(consumer, []).append(pending)
                    pending.waiting += 1
                else:
                    pending.bulk.refused.append(consumer)
            if not pending.waiting:
                self._ready.append(pending)
            batches = self._cut(partial=False)
        for batch in batches:
            self._post(batch)

    def drain(self) -> None:
        """Complete, in this thread, every node whose writes are all answered."""
        while True:
            with self._guard:
                if not self._ready:
                    return
                pending = self._ready.pop(0)
            pending.complete(pending.bulk)

    def close(self) -> list[Pending]:
        """Send what is left (the last, partial batch).

        Returns:
            The nodes left to complete (``pending.complete(pending.bulk)``),
            for the caller to run as it likes (in parallel).
        """
        with self._guard:
            batches = self._cut(partial=True)
        for batch in batches:
            self._post(batch)
        with self._guard:
            ready, self._ready = self._ready, []
        return ready

    def _cut(self, partial: bool) -> list[list[tuple[Pending, str]]]:
        """Take the full batches off the queue (and the last partial one with ``partial``)."""
        batches = []
        while len(self._queue) >= self.batch or (partial and self._queue):
            batches.append(self._queue[: self.batch])
            del self._queue[: self.batch]
        return batches

    def _post(self, batch: list[tuple[Pending, str]]) -> None:
        """One ``POST /allocations``; each node of it gets its part of the answer."""
        parts: dict[Pending, list[str]] = {}
        for pending, consumer in batch:
            parts.setdefault(pending, []).append(consumer)
        error: Exception | None = None
        written = False
        try:
            written = self.report.post_new_allocations({c: p.new[c] for p, c in batch})
        except Exception as exc:  # Placement unreachable, a 5xx: only these nodes fail
            error = exc
            LOG.error("%d new consumers of %d node(s) not written: %s", len(batch), len(parts), exc)
        with self._guard:
            for pending, consumers in parts.items():
                if error is not None:
                    pending.bulk.error = pending.bulk.error or error
                elif written:
                    pending.bulk.written.append(consumers)
                else:
                    pending.bulk.refused.extend(consumers)
                self._answered(pending, consumers)
            for _pending, consumer in batch:
                self._open.discard(consumer)
                for twin in self._twins.pop(consumer, []):
                    twin.bulk.refused.append(consumer)
                    self._answered(twin, [consumer])

    def _answered(self, pending: Pending, consumers: list[str]) -> None:
        """``consumers`` of ``pending`` are answered; it is ready when none is left (guarded)."""
        pending.waiting -= len(consumers)
        if pending.waiting == 0:
            self._ready.append(pending)
