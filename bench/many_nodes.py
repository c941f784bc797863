"""Benchmark: one agent serving many nodes, the bare-metal case (issue #16).

The fake driver describes ``--nodes`` nodes (each a flat compute node: 32
VCPUs, 128 GiB, 1 TiB, one instance of its own), and one
``ResourceTracker`` keeps them all in Placement (the real service
in-process, SQLite). It prints requests and seconds of the start-up
cycle, an unchanged cycle and a cycle where one node changed (its memory
total), and the peak RSS of the process. Targets: unchanged cycle under 2 s,
peak RSS under 500 MiB.

Run: ``make bench`` or ``.venv/bin/python bench/many_nodes.py``.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import yaml

from agent.conf import config
from agent.placement.embedded import EmbeddedPlacement
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver


def host_file(path: Path, nodes: int) -> Path:
    doc = {
        "nodes": [
            {
                "nodename": f"bm-{i:05d}",
                "cpu": {"vcpus": 32},
                "memory_mb": 131072,
                "disk_gb": 1024,
                "instances": [
                    {
                        "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"bm/{i}")),
                        "project_id": "p-bm",
                        "user_id": "u-bm",
                        "flavor": {"vcpus": 16, "memory_mb": 65536, "root_gb": 500},
                    }
                ],
            }
            for i in range(nodes)
        ]
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(tracker: ResourceTracker, label: str, startup: bool = False) -> None:
    client = tracker.report.client
    before = Counter(client.counts)
    start = time.perf_counter()
    outcome = tracker.update_available_resource(startup)
    seconds = time.perf_counter() - start
    delta = Counter(client.counts)
    delta.subtract(before)
    top = ", ".join(f"{m} {t} x{n}" for (m, t), n in (+delta).most_common(3))
    state = "ok" if outcome.ok else f"NOT OK: {outcome.summary()}"
    print(f"  {label:<22} {sum(delta.values()):>6} requests {seconds:8.2f} s  {state}  [{top}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir, EmbeddedPlacement(Path(tmp_dir) / "p") as p:
        tmp = Path(tmp_dir)
        defaults = {"state_path": str(tmp / "state"), "reserved_host_memory_mb": 0}
        conf = config.load([], {"DEFAULT": defaults})
        driver = FakeDriver(conf, host_file(tmp / "hosts.yaml", args.nodes))
        state = StateStore(tmp / "state")
        tracker = ResourceTracker(conf, driver, ReportClient(p.client(), state), state)
        print(f"{args.nodes} nodes in one agent (fake driver), Placement in-process (SQLite):")
        run(tracker, "start-up", startup=True)
        run(tracker, "next cycle")
        run(tracker, "unchanged cycle")
        driver.update_host(driver.get_nodenames()[0], memory_mb=262144)
        run(tracker, "one node changed")
        run(tracker, "unchanged cycle")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
