"""Benchmark: one agent serving many nodes, the bare-metal case (issue #16).

The fake driver describes ``--nodes`` nodes (each a flat compute node: 32
VCPUs, 128 GiB, 1 TiB, one instance of its own), and one
``ResourceTracker`` keeps them all in Placement (the real service
in-process, SQLite; or, with ``--placement mariadb``, ``placement-serve``
on MariaDB with ``--workers`` gunicorn workers, the nodes synced
``--in-flight`` at a time). It prints requests and seconds of the start-up
cycle, an unchanged cycle and a cycle where one node changed (its memory
total), and the peak RSS of the process. Targets: unchanged cycle under 2 s,
peak RSS under 500 MiB.

Each cycle's line says its requests per node. ``--nodes`` takes several
sizes (default 10, 100 and 1,000), run one after the other, so the agent's
CPU per request at start-up can be compared across them (it must not grow
with the nodes: each node's state is a file of its own, agent/state/layout.py).

On a served Placement it also prints the CPU each request cost Placement,
MariaDB and the agent, and from it the model: the
cores a Placement needs to serve that cycle in 2 s. The unchanged cycle
cannot cost less than one request per node holding instances: Placement
moves no generation when a consumer's allocations are deleted, and no call
lists the allocations of several providers (docs/scale.md).

Run: ``make bench`` or ``.venv/bin/python bench/many_nodes.py [--placement mariadb]``.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from support.servers import CpuSplit, placement_on_mariadb

from agent.conf import config
from agent.placement.client import PlacementClient
from agent.placement.embedded import EmbeddedPlacement
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver
from tests.helpers.hosts import flat_nodes_file


def run(
    tracker: ResourceTracker, label: str, startup: bool = False, served: object = None
) -> tuple[int, float, bool]:
    """One cycle of ``tracker``, its line printed; returns ``(requests, seconds, ok)``."""
    client = tracker.report.client
    before = Counter(client.counts)
    cpu = CpuSplit(served) if served is not None else None
    start = time.perf_counter()
    outcome = tracker.update_available_resource(startup)
    seconds = time.perf_counter() - start
    delta = Counter(client.counts)
    delta.subtract(before)
    top = ", ".join(f"{m} {t} x{n}" for (m, t), n in (+delta).most_common(3))
    state = "ok" if outcome.ok else f"NOT OK: {outcome.summary()}"
    requests = sum(delta.values())
    per_node = requests / max(1, len(outcome.nodes))
    print(
        f"  {label:<22} {requests:>6} requests ({per_node:.2f}/node) {seconds:8.2f} s  "
        f"{state}  [{top}]"
    )
    if cpu is not None and requests:
        spent = cpu.per_request(requests)
        cores = requests * (spent[0] + spent[1]) / 1000 / 2.0
        print(
            "    CPU ms/request: Placement {:.1f}, MariaDB {:.1f}, agent {:.1f}; ".format(*spent)
            + f"Placement + MariaDB need {cores:.1f} cores to serve this cycle in 2 s"
        )
    return requests, seconds, outcome.ok


def agent_of(
    tmp: Path,
    client: PlacementClient,
    nodes: int,
    prefix: str,
    in_flight: int,
    cycle_timeout: float | None = None,
) -> tuple[ResourceTracker, FakeDriver]:
    """An agent of ``nodes`` flat fake nodes named ``prefix-NNNNN`` (one instance each),
    its state under ``tmp``, ``in_flight`` requests at once; ``cycle_timeout`` (seconds)
    bounds each cycle (``[DEFAULT] cycle_timeout``: no request starts after it).
    Close it with :func:`close`."""
    defaults: dict[str, object] = {"state_path": str(tmp / "state"), "reserved_host_memory_mb": 0}
    if cycle_timeout is not None:
        defaults["cycle_timeout"] = cycle_timeout
    conf = config.load([], {"DEFAULT": defaults})
    driver = FakeDriver(conf, flat_nodes_file(tmp / "hosts.yaml", prefix, nodes))
    state = StateStore(tmp / "state")
    report = ReportClient(client, state, max_concurrent_requests=in_flight)
    return ResourceTracker(conf, driver, report, state), driver


def close(tracker: ResourceTracker) -> None:
    """Stop ``tracker``'s threads (its report client's and its nodes' pools)."""
    tracker.report.pool.close()
    tracker.nodes.close()


@contextlib.contextmanager
def placement(kind: str, root: Path, workers: int) -> Iterator[tuple[PlacementClient, object]]:
    """A client of the Placement asked for, and the served Placement (None in-process)."""
    if kind == "mariadb":
        with placement_on_mariadb(workers) as served:
            yield served.client(), served
    else:
        with EmbeddedPlacement(root / "p") as p:
            yield p.client(), None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 100, 1_000])
    parser.add_argument("--placement", choices=["embedded", "mariadb"], default="embedded")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (mariadb)")
    parser.add_argument("--in-flight", type=int, default=4, help="nodes/requests at once (mariadb)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        shared = None
        if args.placement == "embedded":
            # One process serves one SQLite database: the sizes share it, each
            # with nodes of its own names.
            root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            shared = stack.enter_context(EmbeddedPlacement(root / "p"))
        for index, nodes in enumerate(args.nodes):
            one_size(args, nodes, f"bm{index}", shared)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def one_size(
    args: argparse.Namespace, nodes: int, prefix: str, shared: EmbeddedPlacement | None
) -> None:
    """The cycles of one agent of ``nodes`` nodes named ``prefix-NNNNN``, on a Placement
    of its own (served), or the process's in-process one (``shared``)."""
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        where = (
            contextlib.nullcontext((shared.client(), None))
            if shared is not None
            else placement(args.placement, tmp, args.workers)
        )
        with where as (client, served):
            in_flight = args.in_flight if served is not None else 1
            tracker, driver = agent_of(tmp, client, nodes, prefix, in_flight)
            where = (
                f"placement-serve on MariaDB, {args.workers} workers, {in_flight} in flight"
                if served is not None
                else "Placement in-process (SQLite)"
            )
            print(f"{nodes} nodes in one agent (fake driver), {where}:")
            run(tracker, "start-up", startup=True, served=served)
            run(tracker, "next cycle", served=served)
            run(tracker, "unchanged cycle", served=served)
            driver.update_host(driver.get_nodenames()[0], memory_mb=262144)
            run(tracker, "one node changed", served=served)
            run(tracker, "unchanged cycle", served=served)
            close(tracker)


if __name__ == "__main__":
    main()
