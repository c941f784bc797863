"""Benchmark: requests in flight against Placement on MariaDB (issue #16).

Placement is ``placement-serve --placement-db mysql+pymysql://... --workers
W`` (gunicorn, W processes) on a private MariaDB, on loopback, sharing this
machine's cores with the agent. It prints, at 1, 2, 4, 8, 16 and 32
requests in flight (``[placement] max_concurrent_requests``; ``--in-flight``
picks others), with the requests per second and the CPU each request cost
Placement, MariaDB and the agent (this process):

- **cold sync** of a tree of ``--providers`` providers (bench/sync.py's tree:
  a compute node and children with SRIOV_NET_VF and traits): wall time,
  request count (the minimum, whatever the concurrency) and the speed-up
  against one in flight (target >= 1.7x on 2 cores);
- **get_allocations_for_provider_tree** with ``--consumers`` consumers on
  that tree (written beforehand, 100 per ``POST /allocations``): wall time,
  requests, speed-up (target >= 3x against one at a time).

Run: ``make bench`` or ``.venv/bin/python bench/cold_sync.py``.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
import uuid
from typing import Any

from support.reads import timed_tree_read
from support.servers import CpuSplit, placement_on_mariadb
from sync import desired

from agent.model.allocations import ConsumerAllocations
from agent.placement.report import ReportClient
from agent.state.store import StateStore

IN_FLIGHT = (1, 2, 4, 8, 16, 32)


def cpu_line(cpu: CpuSplit, requests: int) -> str:
    """``CPU ms/req: Placement p, MariaDB d, agent a`` since ``cpu`` was made."""
    spent = cpu.per_request(requests)
    return "CPU ms/req: Placement {:4.1f}, MariaDB {:4.1f}, agent {:4.1f}".format(*spent)


def cold_sync(served: Any, tmp: str, providers: int, in_flight: int) -> tuple[float, int, str]:
    nodename = f"cold-{in_flight}-{uuid.uuid4().hex[:6]}"
    client = served.client()
    report = ReportClient(
        client, StateStore(f"{tmp}/{nodename}"), max_concurrent_requests=in_flight
    )
    start = time.perf_counter()
    tree = report.get_provider_tree_and_ensure_root(nodename)
    desired(tree, nodename, providers)
    result = report.update_from_provider_tree(tree)
    seconds = time.perf_counter() - start
    if result.errors or result.created != providers - 1:
        raise RuntimeError(f"cold sync of {nodename} failed: {result}")
    report.pool.close()
    return seconds, client.total_requests(), nodename


def allocate(served: Any, tmp: str, nodename: str, consumers: int) -> None:
    """``consumers`` consumers: 1 VCPU each on the root, 1 SRIOV_NET_VF on a child (while any)."""
    report = ReportClient(served.client(), StateStore(f"{tmp}/{nodename}"))
    tree = report.get_provider_tree_and_ensure_root(nodename)
    desired(tree, nodename, len(tree.get_provider_uuids()), vcpus=consumers)  # room for all
    report.update_from_provider_tree(tree)
    root = tree.data(nodename).uuid
    children = [u for u in tree.get_provider_uuids() if u != root]
    wanted = {}
    for i in range(consumers):
        held: dict[str, dict[str, int]] = {root: {"VCPU": 1}}
        if i < 8 * len(children):
            held[children[i % len(children)]] = {"SRIOV_NET_VF": 1}
        wanted[str(uuid.uuid4())] = ConsumerAllocations(
            allocations=held,
            project_id="p-bench",
            user_id="u-bench",
            consumer_type="INSTANCE",
        )
    _batches, refused = report.write_new_allocations(wanted)
    if refused:
        raise RuntimeError(f"{len(refused)} consumers not written")


def read_all(served: Any, tmp: str, nodename: str, in_flight: int) -> tuple[float, int, int]:
    return timed_tree_read(served.client(), f"{tmp}/{nodename}-r{in_flight}", nodename, in_flight)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", type=int, default=1_000)
    parser.add_argument("--consumers", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=4, help="Placement's gunicorn workers")
    parser.add_argument(
        "--in-flight",
        default=",".join(map(str, IN_FLIGHT)),
        help="requests in flight to measure, comma-separated (the first is the base)",
    )
    args = parser.parse_args()
    in_flight = [int(n) for n in args.in_flight.split(",")]
    print(f"Placement: MariaDB, gunicorn {args.workers} workers, loopback; cores shared")
    with tempfile.TemporaryDirectory() as tmp, placement_on_mariadb(args.workers) as served:
        print(f"cold sync of {args.providers} providers:")
        base = None
        tree_for_reads = ""
        for n in in_flight:
            cpu = CpuSplit(served)
            seconds, requests, nodename = cold_sync(served, tmp, args.providers, n)
            base = base or seconds
            tree_for_reads = tree_for_reads or nodename
            print(
                f"  {n} in flight: {seconds:7.2f} s  {requests:>6} requests  "
                f"{requests / seconds:6.0f} req/s  {cpu_line(cpu, requests)}  "
                f"speed-up {base / seconds:4.2f}x"
            )
        if args.consumers:
            allocate(served, tmp, tree_for_reads, args.consumers)
            print(f"get_allocations_for_provider_tree, {args.consumers} consumers:")
            base = None
            for n in in_flight:
                cpu = CpuSplit(served)
                seconds, requests, found = read_all(served, tmp, tree_for_reads, n)
                base = base or seconds
                print(
                    f"  {n} in flight: {seconds:7.2f} s  {requests:>6} requests  "
                    f"{found} consumers  {cpu_line(cpu, requests)}  speed-up {base / seconds:4.2f}x"
                )
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
