"""Benchmark: the agent's requests beside nova's claims, at 1,000 providers.

A compute node and 999 SR-IOV PFs (an ``SRIOV_NET_VF`` inventory each), no
instance of the agent's own. nova 34's own ``SchedulerReportClient``
(tests/helpers/nova_client.py :class:`Nova`) claims 10 instances, each with
VCPU and MEMORY_MB on the compute node and one VF on a PF of its own (a
``resources:SRIOV_NET_VF=1`` flavor; the candidate using that PF is claimed).
Against the real placement service in-process (SQLite in a temporary
directory), it prints the agent's requests, by method and path:

- an unchanged cycle,
- the first cycle after nova's 10 claims (issue 33, "Reads that pay once":
  target the unchanged cycle plus one request per changed consumer; each
  fact is read once: the vouch for the moved PFs and the audit share the
  consumers' reads, :mod:`agent.placement.allocation_reads`),
- an unchanged restart (a new agent on the same state directory),
- a restart after 10 more claims made while the agent was down (target the
  unchanged restart plus one request per consumer that changed meanwhile),

and nova's own requests for each batch of claims. The figures are printed,
not asserted in time (tests/functional/test_reads_once.py asserts the
counts on a smaller tree).

Run: ``make bench`` or ``.venv/bin/python bench/claims.py [--providers N --claims K]``.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from support.agent import fake_tracker, restart  # noqa: E402

from agent.placement.embedded import EmbeddedPlacement  # noqa: E402
from agent.tracker.cycle import ResourceTracker  # noqa: E402
from tests.helpers.nova_client import Flavor, Nova  # noqa: E402

FLAVOR = Flavor(1, 512, 0, (("resources:SRIOV_NET_VF", "1"),))
"""One VCPU, 512 MiB, no disk, and one VF: nova claims the VF on a PF of the tree."""


def host_file(path: Path, nodename: str, providers: int) -> Path:
    """A flat host: a compute node and ``providers - 1`` SR-IOV PFs, no instance."""
    pfs = [
        {"address": f"{i // 256:04x}:{i % 256:02x}:00.0", "total_vfs": 8, "numa_node": 0}
        for i in range(providers - 1)
    ]
    node = {"nodename": nodename, "cpu": {"vcpus": 64}, "memory_mb": 262_144, "disk_gb": 10_000}
    path.write_text(yaml.safe_dump({"nodes": [{**node, "sriov_pfs": pfs, "instances": []}]}))
    return path


def run(tracker: ResourceTracker, label: str, startup: bool = False) -> int:
    """One cycle; prints and returns its requests."""
    client = tracker.report.client
    before = Counter(client.counts)
    outcome = tracker.update_available_resource(startup)
    if not outcome.ok:
        raise RuntimeError(outcome.summary())
    delta = Counter(client.counts)
    delta.subtract(before)
    delta = +delta
    top = ", ".join(f"{m} {p} x{n}" for (m, p), n in delta.most_common(4))
    print(f"  {label:<44} {sum(delta.values()):>5} requests  [{top}]")
    return sum(delta.values())


def claims(nova: Nova, nodename: str, pfs: list[str], log: list[tuple[str, str]]) -> int:
    """nova claims one instance per PF of ``pfs``; returns nova's requests for them."""
    seen = len(log)
    for pf in pfs:
        nova.schedule(str(uuid.uuid4()), FLAVOR, nodename, via=pf)
    assert not nova.refused, nova.refused
    return len(log) - seen


def counting(nova: Nova) -> list[tuple[str, str]]:
    """Every request nova's adapter sends, as ``(method, url)``."""
    log: list[tuple[str, str]] = []
    send = nova.adapter.request

    def request(url: str, method: str, **kwargs: object) -> object:
        log.append((method, url))
        return send(url, method, **kwargs)

    nova.adapter.request = request  # type: ignore[method-assign]
    return log


def bench(placement: EmbeddedPlacement, tmp: Path, providers: int, k: int) -> list[str]:
    """The four figures for one tree of ``providers`` and ``k`` claims per batch."""
    nodename = f"bench-claims-{providers}"
    tracker = fake_tracker(
        placement, tmp, nodename, host_file(tmp / f"{nodename}.yaml", nodename, providers)
    )
    print(f"a compute node and {providers - 1} PFs, nova claiming {k} instances per batch:")
    tracker.update_available_resource(True)
    tracker.update_available_resource(False)
    steady = run(tracker, "unchanged cycle")
    nova = Nova(placement.url, "bench-project", "bench-user")
    log = counting(nova)
    tree = tracker.report.mirror.tree(nodename)
    pfs = sorted(u for u in tree.get_provider_uuids() if tree.data(u).parent_uuid is not None)
    first = claims(nova, nodename, pfs[:k], log)
    after = run(tracker, f"first cycle after {k} claims (nova: {first} requests)")
    run(tracker, "next cycle")
    restarted = restart(placement, tracker)
    unchanged = run(restarted, "restart, state kept, nothing changed", startup=True)
    second = claims(nova, nodename, pfs[k : 2 * k], log)
    again = restart(placement, tracker)
    down = run(again, f"restart, state kept, after {k} claims (nova: {second})", startup=True)
    return [
        f"  {providers:>5} providers, {k} claims: unchanged cycle {steady}; first cycle after "
        f"the claims {after} (target <= {steady + k}); restart {unchanged}, after {k} claims "
        f"made while down {down} (target <= {unchanged + k}); nova {first} + {second}"
    ]


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (``--providers 20 --claims 3`` for a small one)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", type=int, nargs="+", default=[1_000])
    parser.add_argument("--claims", type=int, default=10)
    args = parser.parse_args(argv)
    summary: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, EmbeddedPlacement(f"{tmp}/placement") as placement:
        for providers in args.providers:
            summary += bench(placement, Path(tmp), providers, args.claims)
    print("summary:")
    print("\n".join(summary))
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
