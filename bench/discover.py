"""Seconds of one full host discovery: a large synthetic host and this machine.

Usage: ``.venv/bin/python bench/discover.py [--runs N]``. The large host
(8 PFs x 128 VFs, 8 GPUs with 4 mdev types, 4 NUMA cells, 128 CPUs) is
written to a temporary directory by ``drivers.host.synthetic.large_host``.
Target: under 0.1 s for the large host.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drivers.host.device_spec import parse_device_specs
from drivers.host.discovery import discover_host
from drivers.host.settings import HostSettings
from drivers.host.synthetic import large_host, write_sysfs


def best_of(settings: HostSettings, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        discover_host(settings)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = write_sysfs(Path(tmp) / "large", large_host())
        settings = HostSettings(
            nodename="large",
            sysfs_root=str(root),
            instances_path=tmp,
            specs=parse_device_specs(['{"vendor_id": "8086", "physical_network": "physnet1"}']),
            enabled_mdev_types=("nvidia-35",),
        )
        d = discover_host(settings)
        large = best_of(settings, args.runs)
        print(
            f"large fixture ({len(d.functions)} PCI functions, {len(d.resources.gpus)} GPUs, "
            f"{len(d.resources.numa_cells)} NUMA cells): {large:.4f} s "
            f"(target < 0.1 s: {'met' if large < 0.1 else 'MISSED'})"
        )
        local = best_of(HostSettings(nodename="local", instances_path=tmp), args.runs)
        print(f"this machine: {local:.4f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
