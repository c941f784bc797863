"""The agent against Placement on MariaDB, the database production Placement runs on.

Placement is served by ``compute-agent placement-serve --placement-db
mysql+pymysql://... --workers 2`` (gunicorn, two worker processes) on a
private ``mariadbd`` started by the session's fixture; its schema was made
by ``placement-manage db sync``. The agent's cold sync, steady cycle, heal
of an out-of-band ``DELETE`` and start-up reshape are the ones the SQLite
tests check, on the other database engine (MySQL's isolation, its 409s on
concurrent updates, its case and collation rules).
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psutil

from agent.placement.serve import available_cpus
from agent.shape.adapter import adapt
from agent.tracker.reshape import reshape_node
from drivers.fake import FakeDriver
from tests.helpers.conf import make_conf
from tests.helpers.paths import REPO
from tests.helpers.placement_http import call, http_get
from tests.helpers.served import ServedPlacement
from tests.helpers.tracker import Setup


def test_cold_sync_steady_cycle_and_a_delete_healed(tmp_path, served_mariadb):
    s = Setup(tmp_path, served_mariadb)
    first = s.cycle(startup=True)
    assert first.ok and first.nodes[0].providers > 5
    assert first.nodes[0].allocations_written  # every instance of big-host.yaml
    s.cycle()  # re-reads what its own writes moved
    steady = s.cycle()
    assert steady.ok and steady.requests == 3  # the listing and the two NUMA cells
    before = s.held(s.inst(1))
    call(s.base, "DELETE", f"/allocations/{s.inst(1)}", expect=204)
    healed = s.cycle()
    assert healed.nodes[0].allocations_written == [s.inst(1)]
    assert s.held(s.inst(1)) == before


def totals(held: dict[str, dict[str, int]]) -> dict[str, int]:
    """A consumer's amounts summed over its providers, by resource class."""
    out: dict[str, int] = {}
    for amounts in held.values():
        for rc, n in amounts.items():
            out[rc] = out.get(rc, 0) + n
    return out


def test_start_up_reshape_flat_to_numa(tmp_path, served_mariadb):
    s = Setup(tmp_path, served_mariadb, numa={"model_in_placement": False})
    assert s.cycle(startup=True).ok
    flat = {i: s.held(s.inst(i)) for i in (1, 2, 3)}
    assert all(flat.values()) and not any("_NUMA" in rp for h in flat.values() for rp in h)
    conf = make_conf(
        tmp_path / "numa",
        numa={"model_in_placement": True},
        devices={"enabled_mdev_types": ["nvidia-35", "nvidia-36"]},
    )
    outcome = reshape_node(s.report, adapt(FakeDriver(conf, s.host_path)), s.nodename)
    assert outcome.reshaped
    assert http_get(s.base, "/resource_providers", name=f"{s.nodename}_NUMA0")["resource_providers"]
    for i, held in flat.items():
        after = s.held(s.inst(i))
        assert any("_NUMA" in rp for rp in after)  # moved under a cell
        assert totals(after) == totals(held)  # every amount moved with its inventory


def test_placement_serve_refuses_sqlite_with_several_workers(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli.main", "placement-serve", "--placement-db",
         f"sqlite:///{tmp_path}/p.sqlite", "--workers", "2", "--port", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "SQLite serves one writer at a time" in done.stderr


def test_placement_serve_names_an_unreachable_database_without_its_password(tmp_path):
    url = "mysql+pymysql://placement:s3cret@127.0.0.1:1/placement"
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli.main", "placement-serve", "--placement-db", url,
         "--port", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "placement:***@127.0.0.1:1/placement" in done.stderr and "s3cret" not in done.stderr


def test_the_pool_size_reaches_placements_database_engine(mariadb):
    """``--db-pool-size``/``--db-max-overflow`` end as the SQLAlchemy pool's bounds."""
    script = (
        "import sys; from agent.placement.embedded import PoolSize, placement_app_for_url; "
        "placement_app_for_url(sys.argv[1], pool=PoolSize(7, 3)); "
        "from placement import db_api; pool = db_api.get_placement_engine().pool; "
        "print(type(pool).__name__, pool.size(), pool._max_overflow)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, mariadb.database()],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["QueuePool", "7", "3"]


def test_placement_serve_with_its_defaults_serves_a_worker_per_cpu(tmp_path, mariadb):
    """No ``--workers`` nor ``--threads``: a worker per CPU (two threads each, checked
    in tests/unit/test_placement_serve_options.py); the agent's cycles and requests
    in parallel are served."""
    served = ServedPlacement(
        tmp_path / "served", database=mariadb.database(), workers=None, options=()
    )
    served.start()
    try:
        assert served.proc is not None
        master = psutil.Process(served.proc.pid)
        deadline = time.monotonic() + 20  # the workers fork one after the other
        while len(master.children()) < available_cpus() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(master.children()) == available_cpus()
        s = Setup(tmp_path, served)
        assert s.cycle(startup=True).ok and s.cycle().ok
        with ThreadPoolExecutor(16) as pool:
            listed = list(pool.map(lambda _i: http_get(s.base, "/resource_providers"), range(32)))
        assert all(len(r["resource_providers"]) > 5 for r in listed)
    finally:
        served.stop()
