"""One agent, many nodes, synced in parallel (issue #16, the bare-metal case).

Placement runs on MariaDB under two gunicorn workers. An agent of 12 nodes
at 4 in flight must leave what the same agent one node at a time leaves, in
the same number of requests, with no node's entry lost from the shared
state files, and never more requests on the wire than
``max_concurrent_requests``, although the nodes, the writer and the audit
all send at once.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from agent.placement.report import ReportClient
from agent.state.layout import CONSUMERS_DIR, node_file
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver
from tests.helpers.conf import make_conf
from tests.helpers.hosts import flat_nodes_file
from tests.helpers.names import unique
from tests.helpers.placement_http import http_get

NODES = 12


class InFlight:
    """The most requests seen on the wire at once through one client."""

    def __init__(self, client: Any) -> None:
        self.now = self.peak = 0
        self.lock = threading.Lock()
        real = client.transport.send

        def counted(*args: Any, **kw: Any) -> Any:
            with self.lock:
                self.now += 1
                self.peak = max(self.peak, self.now)
            try:
                return real(*args, **kw)
            finally:
                with self.lock:
                    self.now -= 1

        client.transport.send = counted


def agent(tmp_path: Path, placement: Any, prefix: str, in_flight: int) -> ResourceTracker:
    conf = make_conf(tmp_path, DEFAULT={"reserved_host_memory_mb": 0})
    driver = FakeDriver(conf, flat_nodes_file(tmp_path / "nodes.yaml", prefix, NODES))
    state = StateStore(tmp_path / "state")
    report = ReportClient(
        placement.client(), state, sleep=lambda _s: None, max_concurrent_requests=in_flight
    )
    return ResourceTracker(conf, driver, report, state)


def test_nodes_in_parallel_equal_one_at_a_time(tmp_path, served_mariadb):
    base = served_mariadb.url
    seq = agent(tmp_path / "1", served_mariadb, unique("seq"), 1)
    par = agent(tmp_path / "4", served_mariadb, unique("par"), 4)
    wire = InFlight(par.report.client)

    a, b = seq.update_available_resource(True), par.update_available_resource(True)
    assert a.ok and b.ok, (a.summary(), b.summary())
    # a new node: look-up, create, inventories, traits; no second listing, no read
    # of the root just created (issue 28); every node's instance in one POST
    # /allocations (12 < 100 consumers a batch); and the root document once
    # (the microversion)
    assert a.requests == b.requests == 4 * NODES + 1 + 1
    names = par.driver.get_nodenames()
    assert [n.nodename for n in b.nodes] == names  # in the driver's order
    assert 2 <= wire.peak <= 4

    # every node's entry is in the shared state files (none lost to another's write)
    state = StateStore(tmp_path / "4" / "state")
    assert sorted(state.root_uuids()) == sorted(names)
    for nodename in names:
        record = state.consumers(nodename)
        assert record is not None and len(record["instances"]) == 1, nodename
        (consumer,) = record["instances"]
        held = http_get(base, f"/allocations/{consumer}")["allocations"]
        assert [a["resources"] for a in held.values()] == [
            {"VCPU": 16, "MEMORY_MB": 65536, "DISK_GB": 500}
        ]

    # the next cycle, then unchanged: the listing and the compute node's allocations
    # per node, either way (the start-up's own writes proven by that listing)
    a, b = seq.update_available_resource(False), par.update_available_resource(False)
    assert a.ok and b.ok
    assert a.requests == b.requests == 2 * NODES
    assert 2 <= wire.peak <= 4

    # unchanged: no node's record is written again (a file per node, saved only on change)
    files = [tmp_path / "4" / "state" / node_file(CONSUMERS_DIR, n) for n in names]
    written = [f.stat().st_mtime_ns for f in files]
    assert par.update_available_resource(False).ok
    assert [f.stat().st_mtime_ns for f in files] == written
    par.report.pool.close()
    par.nodes.close()
