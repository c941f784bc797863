"""Benchmark: build, look up and diff a 10,000-provider ProviderTree.

Prints seconds for each step and the peak RSS of the process. Run: make bench.
"""

from __future__ import annotations

import resource
import time
import uuid

from agent.model.provider_tree import ProviderTree
from agent.model.tree_diff import diff_trees

N = 10_000
ROOT = str(uuid.UUID(int=1))


def build(n: int) -> ProviderTree:
    tree = ProviderTree()
    tree.new_root("bench", ROOT)
    cells = 8
    for c in range(cells):
        tree.new_child(f"bench_NUMA{c}", "bench")
        tree.update_inventory(
            f"bench_NUMA{c}", {"VCPU": {"total": 64}, "MEMORY_MB": {"total": 65536}}
        )
    for i in range(n - cells - 1):
        name = f"bench_pci_{i:08d}"
        tree.new_child(name, f"bench_NUMA{i % cells}")
        tree.update_inventory(name, {"SRIOV_NET_VF": {"total": 1 + i % 64}})
        tree.update_traits(name, ["HW_NIC_SRIOV", f"CUSTOM_PHYSNET_NET{i % 4}"])
    return tree


def timed(label: str, fn):
    start = time.perf_counter()
    result = fn()
    print(f"{label:<44} {time.perf_counter() - start:8.4f} s")
    return result


def main() -> None:
    print(f"ProviderTree with {N} providers")
    tree = timed("build", lambda: build(N))
    names = [p.name for p in tree.all_data()]
    uuids = tree.get_provider_uuids()
    timed("look up every provider by name", lambda: [tree.data(n) for n in names])
    timed("look up every provider by UUID", lambda: [tree.data(u) for u in uuids])
    timed("exists() for every name", lambda: [tree.exists(n) for n in names])
    other = timed("copy", tree.copy)
    timed("diff, nothing changed", lambda: diff_trees(tree, other))
    for i in range(0, N - 9, 100):
        other.update_inventory(f"bench_pci_{i:08d}", {"SRIOV_NET_VF": {"total": 128}})
    d = timed("diff, 100 inventories changed", lambda: diff_trees(tree, other))
    assert len(d.inventory) == 100, len(d.inventory)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'peak RSS':<44} {peak_mib:8.1f} MiB")


if __name__ == "__main__":
    main()
