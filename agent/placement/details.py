"""A provider's details (inventories, traits, aggregates): read at one generation, or vouched for.

The mirror (:mod:`agent.placement.mirror`) keeps each provider's details as
of a generation. They are read by :func:`read_provider_details`, three GETs
that must agree on one generation. A moved generation is not always a change
of them: every allocation write on a provider moves it too (nova's claims,
on every boot). A caller that reads the provider's allocations anyway (the
allocation audit's reads, :mod:`agent.placement.allocation_reads`) can *vouch*
for it (:data:`Vouch`): when the allocations explain the whole move, the
details are kept without their three reads (issue 28). :class:`Vouched`
remembers which details rest on a vouch: they are read again before any
write of them (:meth:`agent.placement.mirror.Mirror.verify`), on the next
move nobody explains, and after ``[compute] resource_provider_association_refresh``
seconds (nova's interval for its cache of the same details). The state
directory keeps each vouch with the wall-clock time it began, so a restart
neither reads them again nor makes a vouch younger (issue 33: a restart read
every vouched provider's details again, 33 requests after 10 claims).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from agent.model.exceptions import AgentError
from agent.model.provider_tree import ProviderTree
from agent.model.resources import inventory_body
from agent.placement import endpoints
from agent.placement.client import PlacementClient

LOG = logging.getLogger(__name__)

Vouch = Callable[[Mapping[str, tuple[int, int]], ProviderTree], Mapping[str, "int | None"]]
"""``({provider: (generation its details are known at, generation listed)}, the mirror's
tree before the listing) -> {provider: generation they are vouched at}``.

Asked once per listing about the providers whose listed generation moved
(so the answers may be read in parallel): for each, the generation (the
listed one or later) up to which every move is explained by allocation
writes, so its inventories, traits and aggregates are unchanged; None or
absent when not (then they are read)."""


READ_TRIES = 3
"""How many times one provider's three reads are made before giving up on them agreeing."""


class ProviderKeptChanging(AgentError):
    """A provider's inventories, traits and aggregates never came from one generation."""


def read_provider_details(client: PlacementClient, tree: ProviderTree, uuid: str) -> None:
    """Read one provider's inventory, traits and aggregates into ``tree``, as of one generation.

    Three GETs, each answered with the provider's generation (Placement API
    reference: ``resource_provider_generation`` in every one of them).
    Generations only grow and every inventory, trait, aggregate or
    allocation write moves them, so three answers with the same generation
    show the provider as it was at that generation; answers that differ mean
    another client wrote in between, and the three are read again (issue 26:
    keeping the last generation with an older inventory hid that write from
    every later cycle, and from ``show --check``). Costs 3 requests, 3 more
    per write that lands between them.

    Raises:
        ProviderKeptChanging: the reads disagreed :data:`READ_TRIES` times;
            ``tree`` is unchanged, so the provider is read again next time.
        PlacementError, PlacementUnavailable: as the client raises (NotFound:
            the provider is gone).
    """
    seen: list[tuple[int, int, int]] = []
    for _ in range(READ_TRIES):
        inventories, g_inventories = endpoints.get_inventories(client, uuid)
        traits, g_traits = endpoints.get_traits(client, uuid)
        aggregates, g_aggregates = endpoints.get_aggregates(client, uuid)
        if g_inventories == g_traits == g_aggregates:
            tree.update_inventory(uuid, inventories)
            tree.update_traits(uuid, traits)
            tree.update_aggregates(uuid, aggregates)
            tree.update_generation(uuid, g_aggregates)
            return
        seen.append((g_inventories, g_traits, g_aggregates))
        LOG.debug("provider %s changed while read (generations %s); reading it again", uuid, seen)
    raise ProviderKeptChanging(
        f"resource provider {uuid} changed while it was read, {READ_TRIES} times in a row "
        f"(generations of its inventories, traits and aggregates: {seen}); another client "
        "keeps writing it. Nothing was taken from these reads: the next cycle reads it again"
    )


class Vouched:
    """The providers whose details rest on a vouch, and since when.

    Args:
        refresh_after: seconds a vouch holds before the details are read again
            (``[compute] resource_provider_association_refresh``; 0: no limit).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self, refresh_after: float = 300.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.refresh_after = refresh_after
        self.clock = clock
        # provider -> (generation its details were read or written at, first vouched)
        self._since: dict[str, tuple[int, float]] = {}

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._since

    def add(self, uuid: str, read_at: int) -> None:
        """``uuid``'s details, read at generation ``read_at``, are now vouched for.

        A provider already vouched for keeps its first generation and time: a
        chain of vouches is as old as its first link.
        """
        self._since.setdefault(uuid, (read_at, self.clock()))

    def read_at(self, uuid: str) -> int | None:
        """The generation ``uuid``'s details were read at, when they rest on a vouch."""
        held = self._since.get(uuid)
        return None if held is None else held[0]

    def to_json(self, uuid: str) -> dict[str, Any] | None:
        """``uuid``'s vouch for the state directory: ``{"read_at": generation, "since":
        wall-clock seconds it began}``; None when its details rest on a read."""
        held = self._since.get(uuid)
        if held is None:
            return None
        return {"read_at": held[0], "since": time.time() - (self.clock() - held[1])}

    def restore(self, uuid: str, doc: Any) -> bool:
        """Take back a vouch :meth:`to_json` stored (a restart); its age goes on.

        One that began in the future (the wall clock went back) is taken as
        expired: the details are read on the next listing (unless
        ``refresh_after`` is 0, which lets no vouch expire).

        Returns:
            False for a malformed ``doc`` (the caller must not trust the details).
        """
        try:
            read_at, age = int(doc["read_at"]), time.time() - float(doc["since"])
        except (KeyError, TypeError, ValueError):
            return False
        self._since[uuid] = (read_at, self.clock() - (age if age >= 0 else float("inf")))
        return True

    def discard(self, uuid: str) -> None:
        """``uuid``'s details were read (or it is gone): no longer vouched for."""
        self._since.pop(uuid, None)

    def clear(self) -> None:
        """Forget every vouch (the mirror is dropped)."""
        self._since.clear()

    def expired(self, tree: ProviderTree) -> set[str]:
        """The providers of ``tree`` whose vouch is ``refresh_after`` seconds old or more.

        Looks at the vouched providers only (none on a host where nothing moved), so an
        unchanged cycle pays nothing per provider of the tree.
        """
        if not self.refresh_after or not self._since:
            return set()
        now = self.clock()
        return {
            u
            for u, (_, since) in list(self._since.items())
            if now - since >= self.refresh_after and tree.exists(u)
        }


VOUCHED = "vouched"
"""The state directory's field of a provider whose details rest on a vouch."""


def provider_record(
    tree: ProviderTree, uuid: str, vouched: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One provider of ``tree`` as the state directory stores it (Placement's field names).

    Args:
        vouched: the provider's vouch (:meth:`Vouched.to_json`), when its details
            rest on one: stored beside them, so a restart keeps it with its age.
    """
    p = tree.data(uuid)
    out = {
        "uuid": p.uuid,
        "name": p.name,
        "generation": p.generation,
        "parent_provider_uuid": p.parent_uuid,
        "inventories": inventory_body(p.inventory),
        "traits": sorted(p.traits),
        "aggregates": sorted(p.aggregates),
    }
    if vouched is not None:
        out[VOUCHED] = vouched
    return out


def restored(records: list[dict[str, Any]] | None, vouched: Vouched) -> list[dict[str, Any]]:
    """The state directory's records of one node (:func:`provider_record`), their vouches
    taken back into ``vouched``; a provider whose vouch cannot be read has no generation,
    so its details are read."""
    out = [dict(r) for r in records or [] if isinstance(r, dict)]
    for rec in out:
        doc = rec.pop(VOUCHED, None)
        if doc is not None and not vouched.restore(str(rec.get("uuid")), doc):
            rec["generation"] = None
    return out
