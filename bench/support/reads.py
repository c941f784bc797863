"""One timed ``get_allocations_for_provider_tree`` at a given number of requests in flight."""

from __future__ import annotations

import time
from pathlib import Path

from agent.placement.client import PlacementClient
from agent.placement.report import ReportClient
from agent.state.store import StateStore


def timed_tree_read(
    client: PlacementClient, state: str | Path, nodename: str, in_flight: int
) -> tuple[float, int, int]:
    """Read every allocation of ``nodename``'s tree (the reshape's read), ``in_flight`` at once.

    Returns:
        ``(seconds, requests, consumers found)``; the tree listing before it is not counted.
    """
    report = ReportClient(client, StateStore(state), max_concurrent_requests=in_flight)
    report.get_provider_tree_and_ensure_root(nodename)
    before = client.total_requests()
    start = time.perf_counter()
    found = report.get_allocations_for_provider_tree(nodename)
    seconds = time.perf_counter() - start
    report.pool.close()
    return seconds, client.total_requests() - before, len(found)
