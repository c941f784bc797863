"""A provider's details (inventories, traits, aggregates): read at one generation, or vouched for.

The mirror (:mod:`agent.placement.mirror`) keeps each provider's details as
of a generation. They are read by :func:`read_provider_details`, three GETs
that must agree on one generation. A moved generation is not always a change
of them: every allocation write on a provider moves it too (nova's claims,
on every boot). A caller that reads the provider's allocations anyway (the
allocation audit, :mod:`agent.tracker.vouch`) can *vouch* for it
(:data:`Vouch`): when the allocations explain the whole move, the details
are kept without their three reads (issue 28). :class:`Vouched` remembers
which details rest on a vouch: they are read again before any write of them
(:meth:`agent.placement.mirror.Mirror.verify`), on the next move nobody
explains, after ``[compute] resource_provider_association_refresh`` seconds
(nova's interval for its cache of the same details), and after a restart
(the state directory keeps the generation they were read at).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from agent.model.exceptions import AgentError
from agent.model.provider_tree import ProviderTree
from agent.placement import endpoints
from agent.placement.client import PlacementClient

LOG = logging.getLogger(__name__)

Vouch = Callable[[Mapping[str, int]], Mapping[str, "int | None"]]
"""``{provider: generation its details are known at} -> {provider: generation they are
vouched at}``.

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
