"""The shared-storage provider a compute node's DISK_GB goes to.

Rule (resource-providers-allocations.txt, shared storage): when the node's
disks are shared, DISK_GB is allocated on a provider that carries
``MISC_SHARES_VIA_AGGREGATE`` and DISK_GB inventory in one of the compute
node's aggregates (:meth:`ReportClient.sharing_providers`, sorted by UUID),
the first one when several do.
"""

from __future__ import annotations

import logging

from agent.model.provider_tree import ProviderTree
from agent.placement.report import ReportClient
from drivers.base import ComputeDriver

LOG = logging.getLogger(__name__)


class SharingProviders:
    """Finds each node's sharing provider, asking Placement only when aggregates change.

    Args:
        driver: the compute driver (says whether a node's storage is shared).
        report: the Placement façade.
    """

    def __init__(self, driver: ComputeDriver, report: ReportClient) -> None:
        self.driver = driver
        self.report = report
        # nodename -> (compute node aggregates, sharing provider UUID or None)
        self._found: dict[str, tuple[frozenset[str], str | None]] = {}

    def lookup(self, tree: ProviderTree, nodename: str) -> str | None:
        """UUID of the shared-storage provider for DISK_GB of ``nodename``, or None.

        None when the node's disks are not shared (the hardware the driver
        last laid out says so) or no provider shares DISK_GB with the
        compute node's aggregates in ``tree``.

        Raises:
            PlacementError: the query failed.
        """
        if not self.driver.laid_out_resources(nodename).shared_storage:
            return None
        aggregates = tree.data(nodename).aggregates
        cached = self._found.get(nodename)
        # Asked again only when the compute node's aggregates change (or on
        # SIGHUP, which builds a new tracker): a steady cycle stays one request.
        if cached is not None and cached[0] == aggregates:
            return cached[1]
        found = self.report.sharing_providers(set(aggregates), "DISK_GB")
        self._found[nodename] = (aggregates, found[0] if found else None)
        if len(found) > 1:
            LOG.warning(
                "node %s: several sharing providers offer DISK_GB (%s); using %s",
                nodename,
                ", ".join(found),
                found[0],
            )
        return found[0] if found else None
