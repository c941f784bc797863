"""Every benchmark still runs (at its smallest size), so ``make bench`` cannot break unseen.

Not a timed test: no figure is asserted, only that each benchmark completes
against real Placement and prints its figures (bench/tracker.py also checks
its own targets in its summary line, which is read here).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.paths import REPO

SMALLEST = {
    "claims.py": ["--providers", "20", "--claims", "3"],
    "cold_sync.py": ["--providers", "5", "--consumers", "20"],
    "fleet.py": ["--sizes", "2", "--interval", "1", "--seconds", "2"],
    "many_nodes.py": ["--nodes", "2", "3"],  # two sizes share the in-process Placement
    "discover.py": ["--runs", "1"],
    "events.py": ["--events", "3", "--burst", "10"],
    "provider_tree.py": [],
    "reshape.py": ["--sizes", "3"],
    # today's defaults (the base, always first) and one more point
    "serve_sweep.py": ["--nodes", "3", "--providers", "5", "--cycles", "1", "--points", "2/2/2/2"],
    "sync.py": ["--sizes", "1"],
    "tracker.py": ["--sizes", "3", "--devices", "3"],
}


def test_every_benchmark_is_listed_here():
    assert sorted(p.name for p in (REPO / "bench").glob("*.py")) == sorted(SMALLEST)


@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_benchmark_runs(name):
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / name), *SMALLEST[name]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "peak RSS" in done.stdout or "large fixture" in done.stdout, done.stdout[-2000:]
    if name == "many_nodes.py":
        # every cycle of the two small runs completes ("ok"), none "NOT OK"
        assert done.stdout.count("  ok  ") == 10 and "NOT OK" not in done.stdout, done.stdout
    if name == "serve_sweep.py":
        rows = [
            line for line in done.stdout.splitlines() if line.startswith("| ") and "x |" in line
        ]
        assert len(rows) == 2 and "NOT OK" not in done.stdout, done.stdout
        assert rows[0].startswith("| 1 | 1 | default | 4 |") and rows[0].count("1.00x") == 2, rows
        assert rows[1].startswith("| 2 | 2 | 2 | 2 |") and "-" not in rows[1].split("|")[5], rows
    if name == "tracker.py":
        summary = [line for line in done.stdout.splitlines() if "unchanged cycle" in line]
        assert len(summary) == 2, done.stdout
        for line in summary:  # "... 2 requests (target <= 2); DELETE healed in 1 cycle(s) ..."
            used, target = line.split(" requests (target <= ")
            assert int(used.split()[-1]) <= int(target.split(")")[0]), line
            assert "healed in 1 cycle(s) warm, 1 after a restart" in line, line
        (writer,) = [line for line in done.stdout.splitlines() if "another writer's change" in line]
        used, target = writer.split(" requests (target <= ")
        assert int(used.split()[-1]) <= int(target.split(":")[0]), writer
        assert "the trait seen" in writer, writer


def test_many_nodes_runs_on_mariadb():
    """The served mode: placement-serve on MariaDB, nodes synced in parallel, CPU printed."""
    args = ["--nodes", "3", "--placement", "mariadb", "--in-flight", "2"]
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "many_nodes.py"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("  ok  ") == 5 and "NOT OK" not in done.stdout, done.stdout
    assert done.stdout.count("CPU ms/request: Placement") == 5, done.stdout
