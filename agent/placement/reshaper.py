"""A reshape: new providers, then inventories and allocations in one ``POST /reshaper``.

reshape-provider-tree.txt ("Placement POST /reshaper"): when inventory moves
between providers, the allocations on it must move in the same transaction,
else Placement refuses the inventory change (allocations in use) or the
allocations (no inventory). The providers the new tree adds are created
first (the reshaper cannot create them), and deleted again when the reshaper
fails, so Placement is left as it was.
"""

from __future__ import annotations

import logging
from typing import Any

from agent.model.allocations import ConsumerAllocations
from agent.model.exceptions import ReshapeFailed
from agent.model.provider_tree import ProviderTree
from agent.model.resources import inventory_body
from agent.placement import endpoints
from agent.placement.client import PlacementClient
from agent.placement.errors import NotFound, PlacementError
from agent.placement.writer import Flush, SyncResult, create_provider

LOG = logging.getLogger(__name__)

RESHAPER_VERSION = (1, 37)
"""The microversion of ``POST /reshaper`` (at most; the negotiated one when lower).

From 1.38 every consumer in the body must name a type and Placement sets it:
an untyped consumer (nova writes its instances and migration records at
1.28-1.36) cannot be written back untyped (``unknown`` is refused), so a
reshape at 1.38 would type them all. nova's own reshape uses 1.30
(``RESHAPER_VERSION``, nova/scheduler/client/report.py); 1.37 is the
highest that keeps each consumer's type (:func:`reshaper_allocation`).
"""


def reshape(
    client: PlacementClient,
    flushes: list[Flush],
    new_tree: ProviderTree,
    allocations: dict[str, dict[str, Any]],
    result: SyncResult,
) -> None:
    """Create the new providers, then one ``POST /reshaper``; on failure undo the creations.

    The body names every provider of every root's tree (so an allocation
    another service makes anywhere in them meanwhile is a generation
    conflict, not a lost update) and the providers about to be deleted,
    emptied of the classes the new tree holds elsewhere, so their capacity
    goes in the same transaction as their allocations.

    Args:
        flushes: one per root
            (:meth:`~agent.placement.writer.Writer.plan_root` with ``reshape=True``).
        new_tree: the driver's tree.
        allocations: ``{consumer UUID: GET /allocations body}``, the complete
            final allocations of each consumer listed.
        result: counts ``created`` and sets ``reshaped``.

    Raises:
        ReshapeFailed: creating a provider or the reshaper call failed; the
            providers created here are deleted again, so Placement holds
            what it held before (custom resource classes and traits created
            for the new tree stay: they are global and harmless).
            ``__cause__`` is the :class:`PlacementError`; a
            :class:`~agent.placement.errors.GenerationConflict` there means "re-read and retry".
    """
    created: list[tuple[ProviderTree, str]] = []
    try:
        for flush in flushes:
            for uuid in flush.diff.created:
                create_provider(client, flush.mirror, new_tree, uuid, result)
                created.append((flush.mirror, uuid))
        body = reshaper_body(flushes, new_tree, allocations)
        endpoints.post_reshaper(client, body, RESHAPER_VERSION)
    except PlacementError as exc:
        _undo_created(client, created, result)
        names = ", ".join(f.nodename for f in flushes)
        raise ReshapeFailed(
            f"POST /reshaper for {names} failed: {exc}. Placement is "
            "unchanged; the agent stops so the failure is seen (see docs/reshape.md)"
        ) from exc
    result.reshaped = True
    _read_generations(client, flushes, new_tree, body["inventories"])


def _read_generations(
    client: PlacementClient,
    flushes: list[Flush],
    new_tree: ProviderTree,
    written: dict[str, Any],
) -> None:
    """Record in the mirrors what the reshaper wrote (``written``: its ``inventories``).

    The reshaper answers 204 without generations: they are listed once per root.
    """
    for flush in flushes:
        mirror = flush.mirror
        for rec in endpoints.list_tree(client, mirror.data(flush.nodename).uuid):
            uuid = rec["uuid"]
            if not mirror.exists(uuid):
                continue
            if uuid in written:
                held = new_tree.data(uuid).inventory if new_tree.exists(uuid) else None
                if held is None:
                    held = written[uuid]["inventories"]
                mirror.update_inventory(uuid, held)
            mirror.update_generation(uuid, rec["generation"])


def reshaper_body(
    flushes: list[Flush],
    new_tree: ProviderTree,
    allocations: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """The ``POST /reshaper`` body: every provider's final inventory, every consumer's allocations.

    A provider being deleted keeps only the classes that have nowhere else to
    go in the new tree: the others' allocations were moved, and their
    capacity must not outlive them until the DELETE.
    """
    inventories: dict[str, Any] = {}
    wanted = set().union(*(f.wanted for f in flushes))
    elsewhere = {rc for u in wanted for rc in new_tree.data(u).inventory}
    for flush in flushes:
        mirror = flush.mirror
        for uuid in new_tree.get_provider_uuids(mirror.data(flush.nodename).uuid):
            if mirror.exists(uuid):
                inventories[uuid] = {
                    "inventories": inventory_body(new_tree.data(uuid).inventory),
                    "resource_provider_generation": _snapshot_generation(flush, uuid),
                }
        for uuid in flush.diff.removed:
            if mirror.exists(uuid):
                held = mirror.data(uuid)
                inventories[uuid] = {
                    "inventories": inventory_body(
                        {rc: i for rc, i in held.inventory.items() if rc not in elsewhere}
                    ),
                    "resource_provider_generation": _snapshot_generation(flush, uuid),
                }
    return {
        "inventories": inventories,
        "allocations": {
            consumer: reshaper_allocation(rec) for consumer, rec in allocations.items()
        },
    }


def _snapshot_generation(flush: Flush, uuid: str) -> int | None:
    """The generation ``uuid`` had in the snapshot the reshape was computed from.

    The allocations moved were read after that snapshot: a write landing
    since (nova's claim on the compute node) moved the generation, and the
    reshaper must answer it with ``409 placement.concurrent_update`` (read
    again, retry) rather than take a generation read later, just before the
    POST (the vouched details' check, :meth:`~agent.placement.mirror.Mirror.verify`), and fail on
    the inventory the new claim uses (``placement.inventory.inuse``, final).
    """
    if flush.base.exists(uuid):
        return flush.base.data(uuid).generation
    return flush.mirror.data(uuid).generation


def _undo_created(
    client: PlacementClient, created: list[tuple[ProviderTree, str]], result: SyncResult
) -> None:
    # Children first. They hold nothing (the reshaper did not happen), so
    # Placement lets them go; a failure here is logged, not raised, so the
    # reshaper's own error is the one the operator sees.
    for mirror, uuid in reversed(created):
        try:
            endpoints.delete_provider(client, uuid)
        except NotFound:
            pass
        except PlacementError as exc:
            LOG.error("provider %s created for a failed reshape not deleted: %s", uuid, exc)
            continue
        if mirror.exists(uuid):
            mirror.remove(uuid)
        result.created -= 1


def reshaper_allocation(record: dict[str, Any]) -> dict[str, Any]:
    """One consumer's ``GET /allocations`` body (spec shape) as ``POST /reshaper`` wants it
    at :data:`RESHAPER_VERSION`.

    Drops the per-provider ``generation`` the GET carries and the consumer's
    type: a reshape moves existing consumers, and below 1.38 Placement keeps
    each one's type as it has it (``handlers/util.py`` ``update_consumers``
    leaves the type alone when the request names none), so nova's untyped
    consumers, migration records included, stay untyped.
    """
    body = ConsumerAllocations.from_placement(record).to_placement()
    body.pop("consumer_type", None)
    return body
