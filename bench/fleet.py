"""Benchmark: a fleet of agents against one Placement on MariaDB (issue #16).

N simulated hypervisors, each its own ``ResourceTracker`` with its own
``ReportClient`` (HTTP client), state directory and fake host of a realistic
shape (examples/big-host.yaml less one GPU and the NVMe: two NUMA cells
modelled, two SR-IOV PFs, one vGPU-capable GPU, 20 instances), run in this
process on a pool of threads, against ``placement-serve`` on a private
MariaDB under gunicorn on loopback. Each hypervisor starts (its start-up
cycle), then cycles every ``--interval`` seconds plus up to 10 % jitter for
``--seconds``. For N = 10, 100 and 500 it prints: start-up requests and
seconds; then, steady: Placement requests per second, p50/p99 request
latency, Placement's CPU (its processes, cores busy), agent cycle p99; and
from the same figures, the projected steady load of 10,000 hypervisors at a
60 s interval, next to the same projection for nova's periodic cycle
(one request per provider and per consumer a run, the issue's model).

Run: ``make bench`` or ``.venv/bin/python bench/fleet.py``.
"""

from __future__ import annotations

import argparse
import heapq
import random
import resource
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from support.servers import REPO, database_cpu_seconds, placement_on_mariadb, server_cpu_seconds

from agent.conf import config
from agent.placement.client import RequestEvent
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver

INSTANCES = 20
FLEET = 10_000
FLEET_INTERVAL = 60.0


def host_doc(nodename: str) -> dict[str, Any]:
    """big-host.yaml as a fleet member: one GPU, no NVMe, 20 instances of its own."""
    doc = yaml.safe_load((REPO / "examples" / "big-host.yaml").read_text())
    node = doc["nodes"][0]
    node["nodename"] = nodename
    node["gpus"] = node["gpus"][:1]
    node.pop("pci_devices", None)
    node["instances"] = [i for i in node["instances"] if not i.get("pci_devices")]
    for inst in node["instances"]:
        inst["uuid"] = str(uuid.uuid4())
    while len(node["instances"]) < INSTANCES:
        node["instances"].append(
            {
                "uuid": str(uuid.uuid4()),
                "project_id": "p-fleet",
                "user_id": "u-fleet",
                "flavor": {"vcpus": 1, "memory_mb": 1024, "root_gb": 10},
            }
        )
    return doc


class Recorder:
    """Every answered request's latency, from all the fleet's clients."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: list[float] = []

    def __call__(self, event: RequestEvent) -> None:
        if event.kind == "answer":
            with self.lock:
                self.latencies.append(event.seconds)

    def take(self) -> list[float]:
        with self.lock:
            taken, self.latencies = self.latencies, []
        return taken


def make_agent(tmp: Path, served: Any, i: int, recorder: Recorder) -> ResourceTracker:
    nodename = f"fleet-{i:04d}-{uuid.uuid4().hex[:4]}"
    tmp.mkdir(parents=True, exist_ok=True)
    host = tmp / f"{nodename}.yaml"
    host.write_text(yaml.safe_dump(host_doc(nodename), sort_keys=False))
    conf = config.load(
        [],
        {
            "DEFAULT": {"host": nodename, "state_path": str(tmp / nodename)},
            "numa": {"model_in_placement": True},
            "devices": {"enabled_mdev_types": ["nvidia-35", "nvidia-36"]},
        },
    )
    client = served.client()
    client.observers.append(recorder)
    state = StateStore(tmp / nodename)
    return ResourceTracker(conf, FakeDriver(conf, host), ReportClient(client, state), state)


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def steady(agents: list[ResourceTracker], interval: float, seconds: float) -> list[float]:
    """Cycle every agent every ``interval`` s (+ up to 10 % jitter) for ``seconds``; durations."""
    start = time.monotonic()
    due = [(start + random.uniform(0, interval), i) for i in range(len(agents))]
    heapq.heapify(due)
    durations: list[float] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        outcome = agents[i].update_available_resource(False)
        with lock:
            durations.append(outcome.duration)

    with ThreadPoolExecutor(16) as pool:
        while due and due[0][0] < start + seconds:
            when, i = heapq.heappop(due)
            time.sleep(max(0.0, when - time.monotonic()))
            pool.submit(run, i)
            heapq.heappush(due, (when + interval * random.uniform(1.0, 1.1), i))
    return durations


def bench(served: Any, tmp: Path, n: int, interval: float, seconds: float) -> None:
    recorder = Recorder()
    agents = [make_agent(tmp / f"n{n}", served, i, recorder) for i in range(n)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(lambda a: a.update_available_resource(True), agents))
    startup = time.monotonic() - t0
    failed = sum(not o.ok for o in outcomes)
    started = sum(o.requests for o in outcomes)
    recorder.take()
    providers = outcomes[0].nodes[0].providers
    before_req = sum(a.report.client.total_requests() for a in agents)
    cpu0, db0, t1 = server_cpu_seconds(served), database_cpu_seconds(served), time.monotonic()
    durations = steady(agents, interval, seconds)
    wall = time.monotonic() - t1
    cpu = server_cpu_seconds(served) - cpu0
    db = database_cpu_seconds(served) - db0
    requests = sum(a.report.client.total_requests() for a in agents) - before_req
    latencies = recorder.take()
    per_cycle = requests / max(1, len(durations))
    rps, cpu_per_request = requests / wall, (cpu + db) / max(1, requests)
    print(
        f"N={n:<4} start-up {started / n:5.1f} requests/agent, all in {startup:6.1f} s "
        f"({failed} failed) | steady: {rps:6.1f} req/s, latency p50 {p(latencies, 0.5) * 1000:5.1f}"
        f" ms p99 {p(latencies, 0.99) * 1000:6.1f} ms, Placement CPU {cpu / wall:4.2f} cores "
        f"(+ MariaDB {db / wall:4.2f}), "
        f"cycle p99 {p(durations, 0.99) * 1000:6.1f} ms, {per_cycle:.1f} requests/cycle"
    )
    ours = FLEET * per_cycle / FLEET_INTERVAL
    nova = FLEET * (providers + INSTANCES) / FLEET_INTERVAL
    print(
        f"       projected for {FLEET:,} hypervisors at {FLEET_INTERVAL:.0f} s: agent "
        f"{ours:7.1f} req/s ({ours * cpu_per_request:5.2f} cores of Placement and MariaDB; "
        f"{per_cycle / FLEET_INTERVAL:.3f} req/s per hypervisor) | nova's cycle "
        f"({providers} providers + {INSTANCES} consumers a run) {nova:7.1f} req/s "
        f"({nova * cpu_per_request:5.2f} cores) -> {nova / ours:.1f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,500", help="fleet sizes, comma-separated")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between cycles")
    parser.add_argument("--seconds", type=float, default=30.0, help="steady phase length")
    parser.add_argument("--workers", type=int, default=2, help="Placement's gunicorn workers")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"Placement: MariaDB, gunicorn {args.workers} workers, loopback; agents: threads of "
        f"this process; cycles every {args.interval:.0f} s (+<=10 %) for {args.seconds:.0f} s"
    )
    with tempfile.TemporaryDirectory() as tmp_dir, placement_on_mariadb(args.workers) as served:
        for n in sizes:
            bench(served, Path(tmp_dir), n, args.interval, args.seconds)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
