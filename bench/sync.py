"""Benchmark: Placement requests and seconds of a provider-tree sync.

For trees of 1, 10, 100 and 1,000 providers (a compute node with VCPU and
children, each with an SRIOV_NET_VF inventory and two traits) it prints, against
the real placement service in-process (SQLite in a temporary directory):

- first sync (root created, every child created and written),
- a cycle with nothing changed,
- a cycle with one inventory changed,
- a restart (a new ReportClient on the same state directory) with nothing changed,

with the request count by method and path template, seconds, and the peak
RSS of the process at the end. Targets (issue 3): nothing changed = 1
request, one change = 2, restart = 2 (root document + one tree read), first
sync = the API's minimum (root document, tree read, one create per provider,
one inventory write and one trait write per provider that has them, plus the
custom trait created once).

Then a cold sync (first sync of a new node, size = the largest of ``--sizes``)
at 1, 2, 4 and 8 requests in flight (``[placement] max_concurrent_requests``,
``--in-flight``) against a SERVED Placement: ``compute-agent placement-serve``
on SQLite in a subprocess (tests/helpers/served.py), one process, so the gain
shown is the client's overlap of HTTP round trips with the server's work; the
request count must not change with the concurrency (bench/cold_sync.py does
the same on MariaDB under several workers).

Run: ``make bench`` or ``.venv/bin/python bench/sync.py``.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from collections import Counter
from pathlib import Path

from support.servers import ServedPlacement

from agent.model.provider_tree import ProviderTree
from agent.placement.client import PlacementClient
from agent.placement.embedded import EmbeddedPlacement
from agent.placement.report import ReportClient
from agent.state.store import StateStore

SIZES = (1, 10, 100, 1_000)


def desired(tree: ProviderTree, nodename: str, size: int, vcpus: int = 64) -> None:
    """A compute node with VCPU and ``size - 1`` children with SRIOV_NET_VF and traits."""
    tree.update_inventory(nodename, {"VCPU": {"total": vcpus, "allocation_ratio": 4.0}})
    for i in range(size - 1):
        name = f"{nodename}_pci_0000_{i // 32:02x}_{i % 32:02x}_0"
        if not tree.exists(name):
            tree.new_child(name, nodename)
        tree.update_inventory(name, {"SRIOV_NET_VF": {"total": 8}})
        tree.update_traits(name, ["HW_NIC_SRIOV", f"CUSTOM_PHYSNET_NET{i % 4}"])


def cycle(report: ReportClient, nodename: str, size: int, vcpus: int = 64) -> None:
    """One agent cycle: read, lay out, write what differs."""
    tree = report.get_provider_tree_and_ensure_root(nodename)
    desired(tree, nodename, size, vcpus)
    result = report.update_from_provider_tree(tree)
    if result.errors:
        raise RuntimeError(f"sync of {nodename} failed: {result.errors}")


def measure(client: PlacementClient, report: ReportClient, *args: object) -> tuple:
    """Run one :func:`cycle`; its request count, requests by path and seconds."""
    before = Counter(client.counts)
    start = time.perf_counter()
    cycle(report, *args)
    seconds = time.perf_counter() - start
    delta = Counter(client.counts)
    delta.subtract(before)
    return sum(delta.values()), +delta, seconds


def show(label: str, figures: tuple) -> None:
    total, by_path, seconds = figures
    detail = ", ".join(f"{m} {p} x{n}" for (m, p), n in sorted(by_path.items()))
    print(f"  {label:<22} {total:>5} requests {seconds:8.3f} s   {detail}")


def bench_size(placement: EmbeddedPlacement, tmp: str, size: int) -> None:
    nodename = f"bench-{size}"
    state = StateStore(f"{tmp}/state-{size}")
    client = placement.client()
    report = ReportClient(client, state)
    print(f"{size} provider(s):")
    show("first sync", measure(client, report, nodename, size))
    show("nothing changed", measure(client, report, nodename, size))
    show("one inventory changed", measure(client, report, nodename, size, 48))
    # A restart: a new client and report client (no memory) on the same state directory.
    restarted = placement.client()
    again = ReportClient(restarted, state)
    show("restart, no change", measure(restarted, again, nodename, size, 48))


def bench_served(tmp: str, size: int, in_flight: list[int]) -> None:
    """Cold syncs of ``size`` providers on placement-serve (SQLite), one per concurrency."""
    served = ServedPlacement(Path(tmp) / "served")
    served.start()
    try:
        print(f"cold sync of {size} provider(s) on placement-serve (SQLite):")
        for n in in_flight:
            client = served.client()
            report = ReportClient(
                client, StateStore(f"{tmp}/served-{n}"), max_concurrent_requests=n
            )
            try:
                show(f"{n} in flight", measure(client, report, f"cold-{n}-{size}", size))
            finally:
                report.pool.close()
    finally:
        served.stop()


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark for each size (``--sizes 1 10`` to choose)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedPlacement(f"{tmp}/placement") as placement:
        for size in args.sizes:
            bench_size(placement, tmp, size)
        bench_served(tmp, max(args.sizes), args.in_flight)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak_mib:.0f} MiB")


if __name__ == "__main__":
    main()
