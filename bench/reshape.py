"""Benchmark: a flat -> NUMA reshape carrying 100, 1,000 and 10,000 consumers.

Each size gets its own compute node in the embedded Placement (the real
openstack-placement application on SQLite, in-process): a flat tree, one
instance per consumer allocated on the compute node (half pinned to a NUMA
cell, half unpinned), then ``[numa] model_in_placement`` turned on and
:func:`agent.tracker.reshape.reshape_node` timed. Every consumer's VCPU and
MEMORY_MB move, so the reshape carries all of them.

Printed per size: seconds in total; seconds inside Placement's WSGI
application; seconds in the agent, split into its own work (detection,
rewrite, bodies) and the HTTP client stack (requests, keystoneauth,
wsgi-intercept); requests by method and path; then the peak RSS.
Target (issue #7): one ``POST /reshaper``, agent under 10% of the total.

Then, on a SERVED Placement (``compute-agent placement-serve`` on SQLite in a
subprocess, tests/helpers/served.py) with the largest size's consumers,
:meth:`ReportClient.get_allocations_for_provider_tree` (the reshape's read of
every consumer) at 1, 2, 4 and 8 requests in flight (``--in-flight``): its
requests (the same at every concurrency: one per provider and one per
consumer) and seconds, with the speed-up over 1 in flight (target of issue
#16: 3x or more at 4).

Run: ``.venv/bin/python -m bench.reshape`` (``make bench`` runs every benchmark).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.reads import timed_tree_read
from support.servers import ServedPlacement
from wsgi_intercept.interceptor import RequestsInterceptor

from agent.conf import config as agent_config
from agent.placement.client import PlacementClient
from agent.placement.embedded import NOAUTH_HEADERS, placement_app
from agent.placement.report import ReportClient
from agent.shape.adapter import adapt
from agent.state.store import StateStore
from agent.tracker.reshape import reshape_node
from drivers.fake import FakeDriver

SIZES = (100, 1_000, 10_000)
URL = "http://bench-placement:80"


class Clock:
    """Seconds spent inside the WSGI application and inside ``PlacementClient.request``."""

    def __init__(self) -> None:
        self.app = 0.0
        self.client = 0.0
        self.by_method: dict[str, float] = {}

    def wrap_app(self, app: Callable[..., Any]) -> Callable[..., Any]:
        def timed(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            t = time.perf_counter()
            try:
                # placement answers with a list: materialise it inside the timing
                return list(app(environ, start_response))
            finally:
                spent = time.perf_counter() - t
                self.app += spent
                method = environ["REQUEST_METHOD"]
                path = environ.get("PATH_INFO", "")
                key = f"{method} {path if path == '/reshaper' else '(other)'}"
                self.by_method[key] = self.by_method.get(key, 0.0) + spent

        return timed

    def wrap_client(self, client: PlacementClient) -> None:
        real = client.request

        def timed(*args: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return real(*args, **kw)
            finally:
                self.client += time.perf_counter() - t

        client.request = timed  # type: ignore[method-assign]


def host_yaml(name: str, consumers: int) -> str:
    """A two-cell host with room for ``consumers`` 1-VCPU, 256-MiB instances on either cell."""
    cell_cpus = max(64, consumers // 2)  # x4 allocation ratio: ample room on each cell
    cell_mem = max(65536, consumers * 256)
    lines = [
        "nodes:",
        f"  - nodename: {name}",
        f"    memory_mb: {2 * cell_mem}",
        "    disk_gb: 100",
        "    numa_cells:",
        f"      - {{id: 0, vcpus: {cell_cpus}, memory_mb: {cell_mem}}}",
        f"      - {{id: 1, vcpus: {cell_cpus}, memory_mb: {cell_mem}}}",
        "    instances:",
    ]
    for i in range(consumers):
        cells = f", numa_cells: [{i % 4}]" if i % 4 < 2 else ""
        lines.append(
            f"      - {{uuid: {uuid_of(name, i)}, project_id: p, user_id: u{cells}, "
            "flavor: {vcpus: 1, memory_mb: 256}}"
        )
    return "\n".join(lines) + "\n"


def uuid_of(name: str, i: int) -> str:
    import uuid

    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{name}/{i}"))


def driver(tmp: Path, name: str, numa: bool, consumers: int) -> FakeDriver:
    path = tmp / f"{name}.yaml"
    if not path.exists():
        path.write_text(host_yaml(name, consumers))
    conf = agent_config.load(
        [],
        {
            "DEFAULT": {"state_path": str(tmp / "state"), "reserved_host_memory_mb": 0},
            "numa": {"model_in_placement": numa},
        },
    )
    return FakeDriver(conf, path)


def setup(client: PlacementClient, tmp: Path, name: str, consumers: int) -> None:
    """The flat tree and one allocation per instance (one POST /allocations for all)."""
    report = ReportClient(client, StateStore(tmp / "state"))
    flat = driver(tmp, name, numa=False, consumers=consumers)
    tree = report.get_provider_tree_and_ensure_root(name)
    adapt(flat, flat.conf).update_provider_tree(tree, name)
    report.update_from_provider_tree(tree)
    expected = adapt(flat, flat.conf).expected_allocations(tree, name)
    client.post(
        "/allocations",
        json={c: rec.to_placement() for c, rec in expected.items()},
    )


def run_size(tmp: Path, clock: Clock, consumers: int) -> None:
    name = f"bench-{consumers}"
    client = PlacementClient.for_endpoint(URL, extra_headers=NOAUTH_HEADERS)
    setup(client, tmp, name, consumers)

    client = PlacementClient.for_endpoint(URL, extra_headers=NOAUTH_HEADERS)
    assert client.microversion  # the root document is not part of the reshape
    client.counts.clear()
    clock.wrap_client(client)
    report = ReportClient(client, StateStore(tmp / "state"))
    numa = driver(tmp, name, numa=True, consumers=consumers)
    clock.app = clock.client = 0.0
    clock.by_method.clear()
    start = time.perf_counter()
    outcome = reshape_node(report, adapt(numa), name)
    total = time.perf_counter() - start
    assert outcome.reshaped and len(outcome.allocations_after) == consumers, outcome

    agent_own = total - clock.client
    stack = clock.client - clock.app
    rows = [
        ("total", total),
        ("in Placement (WSGI application)", clock.app),
        *((f"  {k}", v) for k, v in sorted(clock.by_method.items())),
        ("in the agent", agent_own + stack),
        ("  own work (detect, rewrite, bodies)", agent_own),
        ("  HTTP client stack", stack),
    ]
    print(f"\nreshape flat -> NUMA carrying {consumers:,} consumers")
    for label, seconds in rows:
        print(f"  {label:<38} {seconds:9.3f} s  {seconds / total:6.1%}")
    print(f"  requests: {sum(client.counts.values())}")
    for (method, path), n in sorted(client.counts.items(), key=lambda kv: -kv[1]):
        print(f"    {n:7d}  {method} {path}")


def read_tree_served(tmp: Path, consumers: int, in_flight: list[int]) -> None:
    """get_allocations_for_provider_tree on placement-serve, once per concurrency."""
    served = ServedPlacement(tmp / "served")
    served.start()
    try:
        name = f"served-{consumers}"
        setup(served.client(), tmp / "served", name, consumers)
        print(f"\nget_allocations_for_provider_tree, {consumers:,} consumers, placement-serve")
        first = 0.0
        for n in in_flight:
            state = tmp / "served" / "state"
            seconds, requests, found = timed_tree_read(served.client(), state, name, n)
            assert found == consumers, found
            first = first or seconds
            print(f"  {n} in flight: {requests} requests {seconds:8.3f} s  x{first / seconds:.2f}")
    finally:
        served.stop()


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark for each size (``--sizes 100 1000`` to choose)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args(argv)
    clock = Clock()
    with tempfile.TemporaryDirectory(prefix="bench-reshape-") as tmp:
        app = clock.wrap_app(placement_app(Path(tmp) / "placement"))
        with RequestsInterceptor(lambda: app, url=URL):
            for size in args.sizes:
                run_size(Path(tmp), clock, size)
        read_tree_served(Path(tmp), max(args.sizes), args.in_flight)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS {peak_mib:.1f} MiB")


if __name__ == "__main__":
    main()
