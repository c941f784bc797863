"""The shared-storage provider a compute node's DISK_GB goes to, as Placement says now.

Rule (resource-providers-allocations.txt, shared storage): when the node's
disks are shared, DISK_GB is allocated on a provider that carries
``MISC_SHARES_VIA_AGGREGATE`` and DISK_GB inventory in one of the compute
node's aggregates (:meth:`ReportClient.sharing_providers`, sorted by UUID),
the first one when several do.

Worked out from Placement on every lookup (issue 26): a pool that leaves the
compute node's aggregates, loses the trait or its DISK_GB inventory, or is
deleted stops receiving DISK_GB at the next lookup, and one that joins is
used from then on; nothing cached can point at a provider Placement no
longer has (which made every cycle fail with a 404 until a SIGHUP).

Cost, per lookup of a node on shared storage (once per periodic cycle, once
per claim and per event's targeted update): 1 request, ``GET
/resource_providers?member_of=in:AGGS&required=MISC_SHARES_VIA_AGGREGATE&resources=DISK_GB:1``.
Placement lists only providers with room for 1 GiB, so when the pool found
last time is missing from that answer it is asked about directly: 2 more
requests (the same listing without ``resources``, then its inventories) tell
a full pool, which stays the node's pool, from one that left. A node without
shared storage costs nothing; a compute node in no aggregate costs nothing.
"""

from __future__ import annotations

import logging

from agent.model.provider_tree import ProviderTree
from agent.placement.errors import NotFound
from agent.placement.report import ReportClient
from drivers.records import HostResources

LOG = logging.getLogger(__name__)


class SharingProviders:
    """Finds each node's sharing provider by asking Placement (module docstring: cost).

    Args:
        report: the Placement façade.
    """

    def __init__(self, report: ReportClient) -> None:
        self.report = report
        # nodename -> the sharing provider found last time (or None): only to
        # keep a full pool and to log a change, never answered without asking.
        self._found: dict[str, str | None] = {}

    def lookup(self, tree: ProviderTree, nodename: str, host: HostResources) -> str | None:
        """UUID of the shared-storage provider for DISK_GB of ``nodename``, or None.

        None when the node's disks are not shared (``host``, the hardware
        laid out, says so), or no provider shares DISK_GB with the
        compute node's aggregates in ``tree``. Asks Placement each time (1
        request; 3 while the pool found last time is full).

        Raises:
            PlacementError, PlacementUnavailable: the query failed.
        """
        if not host.shared_storage:
            return None
        aggregates = set(tree.data(nodename).aggregates)
        found = self.report.sharing_providers(aggregates, "DISK_GB")
        previous = self._found.get(nodename)
        pick = found[0] if found else None
        if previous is not None and previous not in found and self._full(previous, aggregates):
            pick = previous  # still shared with the node: only out of room
        if len(found) > 1:
            LOG.warning(
                "node %s: several sharing providers offer DISK_GB (%s); using %s",
                nodename,
                ", ".join(found),
                pick,
            )
        if nodename in self._found and pick != previous:
            LOG.info(
                "node %s: DISK_GB of shared storage now goes to %s (was %s)",
                nodename,
                pick or "no provider",
                previous or "no provider",
            )
        self._found[nodename] = pick
        return pick

    def _full(self, uuid: str, aggregates: set[str]) -> bool:
        """True when ``uuid`` still shares DISK_GB with ``aggregates`` but has no room left.

        Two requests: the sharing providers of the aggregates whatever their
        room, then ``uuid``'s inventories (NotFound: it is gone).
        """
        if uuid not in self.report.sharing_providers(aggregates, None):
            return False
        try:
            return "DISK_GB" in self.report.provider_inventory(uuid)
        except NotFound:
            return False
