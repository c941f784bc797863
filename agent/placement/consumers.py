"""Consumers' allocations: read, and the writes that honour consumer generations.

Every write of a consumer's allocations carries the consumer generation read
just before it (Placement 1.28); after a generation conflict the consumer is
read again and the edit decided again, so a concurrent change (nova's
scheduler, another agent) is never overwritten with stale data. Consumers
believed new are written many at a time (``POST /allocations``) with a null
generation, which Placement refuses for any consumer it knows
(:meth:`Consumers.write_new`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from agent.model.allocations import MIGRATION, ConsumerAllocations, ProviderAllocations
from agent.placement import endpoints
from agent.placement.client import PlacementClient
from agent.placement.conflicts import retry_on_conflict
from agent.placement.errors import GenerationConflict, NotFound, PlacementError
from agent.placement.pool import Pool

LOG = logging.getLogger(__name__)

Edit = Callable[[ConsumerAllocations], ConsumerAllocations | None]
"""What Placement holds for a consumer -> what to write, or None for "nothing to do"."""

_EMPTY_CONSUMER = re.compile(r"expected (\d+) but got None")
"""Placement's 409 for a consumer it keeps with no allocations (placement's
``handlers/util.py`` ``ensure_consumer``): ``GET /allocations/{c}`` then shows no
generation, yet a write must carry the one it names."""


def _hidden_generation(exc: GenerationConflict) -> int | None:
    """The generation of an empty consumer Placement keeps, named in its 409; else None."""
    match = _EMPTY_CONSUMER.search(exc.detail)
    return int(match.group(1)) if match else None


def provider_allocations(client: PlacementClient, uuid: str) -> ProviderAllocations:
    """``GET /resource_providers/{uuid}/allocations``: every consumer on one provider."""
    return ProviderAllocations.from_placement(endpoints.get_provider_allocations(client, uuid))


def get_allocations(client: PlacementClient, consumer: str) -> ConsumerAllocations:
    """``GET /allocations/{consumer}``: what the consumer holds, with its generation.

    A consumer Placement does not know comes back empty with generation None.
    """
    return ConsumerAllocations.from_placement(endpoints.get_consumer_allocations(client, consumer))


def allocations_on(
    client: PlacementClient, providers: Iterable[str], pool: Pool | None = None
) -> dict[str, dict[str, Any]]:
    """Every allocation of every consumer that uses one of ``providers``.

    The algorithm of reshape-provider-tree.txt: ``GET
    /resource_providers/{uuid}/allocations`` for each provider, then ``GET
    /allocations/{consumer}`` for each consumer found (so its allocations on
    sharing providers come along, and its generation, owner and type: what
    the reshaper needs). A consumer emptied between the two reads is left
    out. Each stage's reads run ``pool.size`` at a time.

    Returns:
        ``{consumer_uuid: GET /allocations/{consumer_uuid} body}``.
    """
    pool = pool or Pool()
    consumers: dict[str, None] = {}
    for read in pool.map(lambda uuid: provider_allocations(client, uuid), list(providers)):
        consumers.update(dict.fromkeys(read.consumers))
    records = pool.map(lambda c: endpoints.get_consumer_allocations(client, c), list(consumers))
    # Emptied between the two reads: nothing to move, and no owner to name.
    return {c: r for c, r in zip(consumers, records, strict=True) if r.get("allocations")}


BULK_BATCH = 100
"""Consumers per ``POST /allocations``: one transaction each, a body of some 30 KiB. A
batch refused is written again consumer by consumer, so a smaller batch loses less."""


class Consumers:
    """Edits of consumers' allocations, retried after generation conflicts.

    Args:
        client: the HTTP client.
        conflict_retries: retries of one consumer's edit after a generation conflict.
        sleep: how to wait between conflict retries (tests pass a no-op).
    """

    def __init__(
        self,
        client: PlacementClient,
        conflict_retries: int = 3,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.conflict_retries = conflict_retries
        self.sleep = sleep

    def edit(self, consumer: str, edit: Edit, retries: int | None = None) -> int | None:
        """Read ``consumer``'s allocations, let ``edit`` decide the new ones, write them.

        The write carries the consumer generation of the read, whatever
        ``edit`` returns; owner and user default to what Placement holds.

        Args:
            consumer: the consumer UUID.
            edit: called once per attempt with what Placement holds now.
            retries: read-edit-writes after a generation conflict (default
                ``conflict_retries``); 0 for a caller that decides again itself on a
                new read (the allocation audit, issue 39).

        Returns:
            The consumer generation the write produced (Placement moves it by one on
            every write of the consumer's allocations, a new consumer's first write
            making it 1: placement's ``objects/consumer.py``); None when ``edit``
            returned None, nothing was held nor wanted, or the consumer vanished
            meanwhile.

        Raises:
            GenerationConflict: still conflicting after the retries.
            Conflict: the allocations do not fit ("Unable to allocate inventory").
            ValueError: ``edit`` gave allocations without an owner for a
                consumer Placement does not know.
        """

        def attempt() -> int | None:
            current = get_allocations(self.client, consumer)
            wanted = edit(current)
            if wanted is None:
                return None
            if not wanted and current.generation is None:
                return None  # nothing held, nothing wanted: no write
            body = replace(
                wanted,
                generation=current.generation,
                project_id=wanted.project_id or current.project_id,
                user_id=wanted.user_id or current.user_id,
            ).to_placement()
            try:
                return self._put(consumer, body)
            except NotFound:
                return None

        return retry_on_conflict(
            attempt,
            retries=self.conflict_retries if retries is None else retries,
            sleep=self.sleep,
            what=f"consumer {consumer}",
        )

    def _put(self, consumer: str, body: dict[str, Any]) -> int:
        """``PUT /allocations/{consumer}``; an empty consumer's hidden generation is used.

        Returns the consumer generation the write produced (the one sent plus one; 1 for a
        consumer Placement did not know).

        Placement may keep a consumer with no allocations (a write that
        failed after the consumer was created): its ``GET`` shows no
        generation, and a write with none is refused 409 "expected N but got
        None". The write is sent once more with N, the generation Placement
        named: the consumer held nothing, so nothing is overwritten.
        """
        sent = body.get("consumer_generation")
        try:
            endpoints.put_consumer_allocations(self.client, consumer, body)
        except GenerationConflict as exc:
            hidden = _hidden_generation(exc) if sent is None else None
            if hidden is None:
                raise
            LOG.info("consumer %s: empty in Placement at generation %d", consumer, hidden)
            endpoints.put_consumer_allocations(
                self.client, consumer, {**body, "consumer_generation": hidden}
            )
            return hidden + 1
        return 1 if sent is None else int(sent) + 1

    def remove_from(
        self,
        consumer: str,
        providers: set[str] | Callable[[ConsumerAllocations], set[str]],
        keep_if: Callable[[ConsumerAllocations], bool] | None = None,
        retries: int | None = None,
    ) -> bool:
        """Remove ``consumer``'s allocations on ``providers``, keeping the rest.

        A migration record (consumer type ``MIGRATION``) is never touched:
        nova holds the source host's part of a migration on it and gives it
        back itself. A consumer Placement does not know is fine.

        Args:
            providers: the providers, or a function of what Placement holds
                that names them (called on every read, so a part that went
                with another writer's write in between is decided again: the
                audit's *this host's share*).
            keep_if: called with what Placement holds (owner, type) just
                before the write; True leaves the consumer alone (the audit's
                guard for nova's untyped migration records).
            retries: as :meth:`edit`'s.

        Returns:
            True when something was removed.

        Raises:
            GenerationConflict: the consumer kept changing under us.
        """

        def edit(held: ConsumerAllocations) -> ConsumerAllocations | None:
            ours = providers(held) if callable(providers) else providers
            if held.consumer_type == MIGRATION or not held.providers & ours:
                return None
            if keep_if is not None and keep_if(held):
                return None
            return held.with_allocations(held.without(ours))

        return self.edit(consumer, edit, retries) is not None

    def delete(self, consumer: str) -> bool:
        """Remove every allocation of ``consumer`` by ``PUT`` with its generation.

        Returns:
            True when allocations were removed, False when there were none.
        """
        return (
            self.edit(consumer, lambda held: held.with_allocations({}) if held else None)
            is not None
        )

    def write_new(
        self, wanted: Mapping[str, ConsumerAllocations]
    ) -> tuple[list[list[str]], list[str]]:
        """Write consumers Placement is believed not to know, :data:`BULK_BATCH` per request.

        Each consumer's ``consumer_generation`` is null: Placement refuses
        the whole batch (409, nothing written) when any of them exists
        already, so nothing it holds elsewhere (a migration's source host, a
        network agent's bandwidth) is ever replaced, and also when one does
        not fit, or (400, 404) when a provider of one is gone. The consumers
        of a batch refused with any 4xx are returned for the caller's
        one-by-one read-edit-write (:meth:`edit`), which merges and fails
        only the consumer at fault.

        Args:
            wanted: ``{consumer: its allocations}`` (owner and type set).

        Returns:
            ``(written, refused)``: the consumers of each batch written (one
            request each), and those of the batches refused.

        Raises:
            PlacementUnavailable: Placement cannot be reached.
            PlacementError: a refusal other than a 4xx.
        """
        written: list[list[str]] = []
        refused: list[str] = []
        items = sorted(wanted.items())
        for start in range(0, len(items), BULK_BATCH):
            batch = dict(items[start : start + BULK_BATCH])
            if self.post_new(batch):
                written.append(list(batch))
            else:
                refused.extend(batch)
        return written, refused

    def post_new(self, batch: Mapping[str, ConsumerAllocations]) -> bool:
        """One ``POST /allocations`` of consumers believed new (null consumer generations).

        The one request of :meth:`write_new`, for callers that gather a batch
        themselves (the cycle's consumers of many nodes,
        :mod:`agent.tracker.new_allocations`).

        Args:
            batch: ``{consumer: its allocations}`` (owner and type set);
                at most :data:`BULK_BATCH` by convention, not enforced.

        Returns:
            True when written, False when Placement refused it with a 4xx
            (nothing written: one consumer exists, does not fit, names a
            provider that is gone; the caller writes them one by one).

        Raises:
            PlacementUnavailable: Placement cannot be reached.
            PlacementError: a refusal other than a 4xx.
        """
        body = {c: replace(a, generation=None).to_placement() for c, a in batch.items()}
        try:
            endpoints.post_allocations(self.client, body)
        except PlacementError as exc:
            if not 400 <= exc.status < 500:
                raise
            LOG.info("%d consumers not written together (%s); one by one", len(batch), exc)
            return False
        return True
