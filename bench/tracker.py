"""Benchmark: Placement requests and seconds of resource-tracker cycles with instances.

For a fake host (2 SR-IOV PFs; two NUMA cells, modelled in Placement or
not) running 10, 100 and 1,000 instances, against the real placement service
in-process (SQLite in a temporary directory), it prints for each cycle:
requests by method and path, seconds, allocations written and removed:

- start-up on an empty Placement (providers created, every allocation written),
- the next cycle (re-reads the providers whose generations its own writes moved),
- a steady cycle: target 1 + (providers that hold instance CPU and memory),
  so 1 + 1 flat and 1 + 2 with the two NUMA cells (agent.audit.audit_read),
- a cycle after one instance was spawned behind the agent's back (healed),
- a cycle after one instance was destroyed (its allocation removed),
- heal latency: ``DELETE /allocations/{consumer}`` behind a warm agent's
  back, then cycles until Placement holds the allocation again (target 1);
  the same after a restart of the agent,

then one line per size and shape with the steady-cycle requests against the
target. Then, for a compute node with 10, 100 and 1,000 device providers
(SR-IOV PFs), the cycle after another writer (nova's scheduler booting an
instance) wrote a new consumer on the compute node: target the unchanged
cycle plus one request per consumer that changed (agent.audit.audit_read:
the consumer generations say which), not one per provider, plus the 3 reads
of the compute node's inventories, traits and aggregates that any move of
its generation costs (agent.placement.mirror). And the peak RSS
of the process at the end.

Run: ``make bench`` or ``.venv/bin/python bench/tracker.py``.
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
from support.agent import fake_tracker, restart

from agent.placement.embedded import EmbeddedPlacement
from agent.tracker.cycle import ResourceTracker
from drivers.records import Flavor, Instance

SIZES = (10, 100, 1_000)


SUMMARY: list[str] = []


def instance_uuid(nodename: str, i: int) -> str:
    """Instance ``i`` of ``nodename``: unique per node, as consumers are in a real cloud."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{nodename}/{i}"))


def host_file(path: Path, nodename: str, instances: int) -> Path:
    """A two-cell host large enough for ``instances`` small instances."""
    doc = {
        "nodes": [
            {
                "nodename": nodename,
                "memory_mb": 2_097_152,
                "disk_gb": 100_000,
                "numa_cells": [
                    {"id": 0, "vcpus": 512, "memory_mb": 1_048_576},
                    {"id": 1, "vcpus": 512, "memory_mb": 1_048_576},
                ],
                "sriov_pfs": [
                    {"address": "0000:3b:00.0", "total_vfs": 64, "numa_node": 0},
                    {"address": "0000:d8:00.0", "total_vfs": 64, "numa_node": 1},
                ],
                "instances": [
                    {
                        "uuid": instance_uuid(nodename, i),
                        "project_id": "bench-project",
                        "user_id": "bench-user",
                        "numa_cells": [i % 2],
                        "flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1},
                    }
                    for i in range(instances)
                ],
            }
        ]
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def run(tracker: ResourceTracker, label: str, startup: bool = False) -> int:
    client = tracker.report.client
    before = Counter(client.counts)
    start = time.perf_counter()
    outcome = tracker.update_available_resource(startup)
    seconds = time.perf_counter() - start
    if not outcome.ok:
        raise RuntimeError(outcome.summary())
    delta = Counter(client.counts)
    delta.subtract(before)
    delta = +delta
    node = outcome.nodes[0]
    top = ", ".join(f"{m} {p} x{n}" for (m, p), n in delta.most_common(4))
    print(
        f"  {label:<34} {sum(delta.values()):>5} requests {seconds:8.3f} s  "
        f"written {len(node.allocations_written):>4} removed {len(node.allocations_removed)}  "
        f"[{top}]"
    )
    return sum(delta.values())


def heal_latency(tracker: ResourceTracker, consumer: str) -> int:
    """Cycles until ``consumer``'s allocation, deleted out of band, is back (0: never, in 5)."""
    client = tracker.report.client
    want = client.get("/allocations/{consumer}", consumer=consumer)["allocations"]
    client.delete("/allocations/{consumer}", consumer=consumer)
    for cycles in range(1, 6):
        tracker.update_available_resource(False)
        held = client.get("/allocations/{consumer}", consumer=consumer)["allocations"]
        if {rp: a["resources"] for rp, a in held.items()} == {
            rp: a["resources"] for rp, a in want.items()
        }:
            return cycles
    return 0


def bench(placement: EmbeddedPlacement, tmp: Path, size: int, numa: bool) -> None:
    shape = "numa" if numa else "flat"
    nodename = f"bench-rt-{shape}-{size}"
    host = host_file(tmp / f"{nodename}.yaml", nodename, size)
    tracker = fake_tracker(placement, tmp, nodename, host, numa)
    print(f"{size} instances, {shape}:")
    run(tracker, "start-up, empty Placement", startup=True)
    run(tracker, "next cycle")
    steady = run(tracker, "steady")
    extra = Instance(str(uuid.uuid4()), "bench-project", "bench-user", Flavor(2, 1024, 1))
    tracker.driver.spawn(nodename, extra)  # no tracker attached: the audit finds and heals it
    run(tracker, "one instance spawned behind it")
    run(tracker, "next cycle")
    tracker.driver.destroy(extra.uuid)
    run(tracker, "one instance destroyed")
    run(tracker, "next cycle")
    run(tracker, "steady")
    warm = heal_latency(tracker, instance_uuid(nodename, 0))
    run(tracker, "next cycle")
    restarted = restart(placement, tracker)
    restarted.update_available_resource(True)
    after_restart = heal_latency(restarted, instance_uuid(nodename, 1))
    target = 1 + (2 if numa else 1)
    SUMMARY.append(
        f"  {size:>5} instances {shape:<4}: unchanged cycle {steady} requests (target <= "
        f"{target}); DELETE healed in {warm} cycle(s) warm, {after_restart} after a restart"
    )


def device_host(path: Path, nodename: str, devices: int) -> Path:
    """A flat host with ``devices`` SR-IOV PFs (a provider each) and two instances."""
    pfs = [
        {"address": f"{i // 256:04x}:{i % 256:02x}:00.0", "total_vfs": 8, "numa_node": 0}
        for i in range(devices)
    ]
    instances = [
        {
            "uuid": instance_uuid(nodename, i),
            "project_id": "bench-project",
            "user_id": "bench-user",
            "flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1},
        }
        for i in range(2)
    ]
    node = {"nodename": nodename, "cpu": {"vcpus": 64}, "memory_mb": 262_144, "disk_gb": 10_000}
    doc = {"nodes": [{**node, "sriov_pfs": pfs, "instances": instances}]}
    path.write_text(yaml.safe_dump(doc))
    return path


def other_writer(placement: EmbeddedPlacement, tmp: Path, devices: int) -> None:
    """The cycle after another writer put a new consumer on the compute node."""
    nodename = f"bench-writer-{devices}"
    tracker = fake_tracker(
        placement, tmp, nodename, device_host(tmp / f"{nodename}.yaml", nodename, devices)
    )
    print(f"{devices} device providers and a compute node, another writer:")
    tracker.update_available_resource(True)
    tracker.update_available_resource(False)
    steady = run(tracker, "unchanged")
    client = tracker.report.client
    root = client.get("/resource_providers", params={"name": nodename})["resource_providers"]
    body = {
        "allocations": {root[0]["uuid"]: {"resources": {"VCPU": 1, "MEMORY_MB": 512}}},
        "project_id": "bench-project",
        "user_id": "bench-user",
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }
    client.put("/allocations/{consumer}", consumer=str(uuid.uuid4()), json=body)
    after = run(tracker, "after another writer's new consumer")
    # The same, and an operator's trait on the compute node: the allocations do not
    # explain the whole move, so the compute node's details are read (3 more).
    client.put("/allocations/{consumer}", consumer=str(uuid.uuid4()), json=body)
    client.put("/traits/{name}", name="CUSTOM_BENCH_OPERATOR")
    traits = client.get("/resource_providers/{uuid}/traits", uuid=root[0]["uuid"])
    client.put(
        "/resource_providers/{uuid}/traits",
        uuid=root[0]["uuid"],
        json={
            "traits": [*traits["traits"], "CUSTOM_BENCH_OPERATOR"],
            "resource_provider_generation": traits["resource_provider_generation"],
        },
    )
    both = run(tracker, "... and an operator's trait")
    kept = "CUSTOM_BENCH_OPERATOR" in tracker.report.mirror.tree(nodename).data(nodename).traits
    SUMMARY.append(
        f"  {devices:>5} device providers: after another writer's change {after} requests "
        f"(target <= {steady + 1}: steady {steady} + 1 consumer); with an operator's trait "
        f"too {both} (+3: the compute node's inventories, traits and aggregates read), "
        f"the trait {'seen' if kept else 'MISSED'}"
    )


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark for each size and shape (``--sizes 10 100`` to choose)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--devices", type=int, nargs="*", default=list(SIZES))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedPlacement(f"{tmp}/placement") as placement:
        for numa in (False, True):
            for size in args.sizes:
                bench(placement, Path(tmp), size, numa)
        for devices in args.devices:
            other_writer(placement, Path(tmp), devices)
    print("summary:")
    print("\n".join(SUMMARY))
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
