"""New consumers of many nodes written together (issue 28): 100 per ``POST /allocations``.

Against the session's in-process Placement, with the fake driver's flat
nodes of one instance each (tests/helpers/hosts.py ``flat_nodes_file``): a
start-up of 150 new nodes costs 4 requests a node and 2 ``POST
/allocations`` in all; a batch Placement refuses (409: one instance's
consumer already holds a network agent's bandwidth) is written one by one,
each consumer in its own node's audit, keeping the other writer's part; a
batch that fails (a 500, which Placement cannot be made to answer on
demand: injected at the client's send, the only stand-in) fails the nodes
it carried, after their records were saved with their instances
(write-ahead), and no other node.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.placement.errors import parse_error
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver
from tests.helpers.conf import make_conf
from tests.helpers.hosts import HostDescription, flat_nodes_file
from tests.helpers.mariadb import MARIADB_GROUP
from tests.helpers.names import unique
from tests.helpers.placement_http import call, held_by_name, put_allocations

POST = ("POST", "/allocations")


def agent(tmp_path: Path, placement: Any, nodes: int, in_flight: int = 1) -> ResourceTracker:
    """An agent of ``nodes`` flat nodes, one instance each, ``in_flight`` requests at once."""
    conf = make_conf(tmp_path, DEFAULT={"reserved_host_memory_mb": 0})
    driver = FakeDriver(conf, flat_nodes_file(tmp_path / "nodes.yaml", unique("bulk"), nodes))
    state = StateStore(tmp_path / "state")
    report = ReportClient(
        placement.client(), state, sleep=lambda _s: None, max_concurrent_requests=in_flight
    )
    return ResourceTracker(conf, driver, report, state)


def instances(tracker: ResourceTracker) -> dict[str, str]:
    """``{nodename: its one instance}``."""
    names = tracker.driver.get_nodenames()
    return {n: tracker.driver.list_instances(n)[0].uuid for n in names}


def posted_bodies(
    tracker: ResourceTracker, fail_first: Callable[[], None] | None = None, fail: int = 1
) -> list:
    """The consumers of each ``POST /allocations`` sent (a list per request).

    With ``fail_first``, the ``fail``-th one is not sent: ``fail_first()``
    runs, then it is answered 500 (Placement cannot be made to give one on demand).
    """
    client = tracker.report.client
    real = client._send
    bodies: list[list[str]] = []

    def send(method: str, template: str, path: str, json: Any, *args: Any, **kw: Any) -> Any:
        if (method, template) == POST:
            bodies.append(sorted(json))
            if fail_first is not None and len(bodies) == fail:
                fail_first()
                error = {"errors": [{"status": 500, "title": "Internal Server Error"}]}
                raise parse_error(500, error, method, path)
        return real(method, template, path, json, *args, **kw)

    client._send = send  # type: ignore[method-assign]
    return bodies


def close(tracker: ResourceTracker) -> None:
    tracker.report.pool.close()
    tracker.nodes.close()


@pytest.mark.parametrize(
    "placement,in_flight",
    [
        pytest.param("embedded", 1, id="one-at-a-time"),
        # asked for at run time: the conftest's hook cannot see that it uses MariaDB
        pytest.param("served_mariadb", 4, id="4-in-flight-mariadb", marks=MARIADB_GROUP),
    ],
)
def test_new_nodes_instances_go_100_per_request_across_nodes(
    tmp_path, request, placement, in_flight
):
    """At 4 in flight the batches are sent by the node threads as they fill (the
    in-process Placement's SQLite takes one writer at a time: MariaDB there)."""
    nodes = 150
    placement = request.getfixturevalue(placement)
    tracker = agent(tmp_path, placement, nodes, in_flight)
    bodies = posted_bodies(tracker)
    outcome = tracker.update_available_resource(True)
    assert outcome.ok, outcome.summary()
    # look-up, create, inventories, traits per node; 2 POST /allocations in all; the
    # root document once
    assert outcome.requests == 4 * nodes + 2 + 1
    assert sorted(len(b) for b in bodies) == [50, 100]
    by_node = instances(tracker)
    assert sorted(c for b in bodies for c in b) == sorted(by_node.values())
    for node in outcome.nodes:
        assert node.allocations_written == [by_node[node.nodename]], node.nodename
    for consumer in list(by_node.values())[::37]:
        assert list(held_by_name(placement.url, consumer).values()) == [
            {"VCPU": 16, "MEMORY_MB": 65536, "DISK_GB": 500}
        ]
    # each node counted its part of each request: the next listing proves them all,
    # so the next cycle is the unchanged one (the listing and the compute node's
    # allocations per node), and writes nothing
    again = tracker.update_available_resource(False)
    assert again.ok and again.requests == 2 * nodes
    assert len(bodies) == 2
    close(tracker)


def test_a_refused_batch_is_written_one_by_one_each_in_its_own_node(tmp_path, embedded):
    tracker = agent(tmp_path, embedded, 3)
    by_node = instances(tracker)
    first, known = next(iter(by_node.items()))
    # Another writer (a network agent) already gave the first node's instance
    # bandwidth: Placement knows its consumer and refuses the batch (409).
    net = str(uuidlib.uuid4())
    call(embedded.url, "POST", "/resource_providers", {"name": unique("net"), "uuid": net})
    call(
        embedded.url,
        "PUT",
        f"/resource_providers/{net}/inventories",
        {
            "resource_provider_generation": 0,
            "inventories": {"NET_BW_EGR_KILOBIT_PER_SEC": {"total": 10000}},
        },
    )
    put_allocations(embedded.url, known, {net: {"NET_BW_EGR_KILOBIT_PER_SEC": 1000}})
    bodies = posted_bodies(tracker)
    outcome = tracker.update_available_resource(True)
    assert outcome.ok, outcome.summary()
    assert bodies == [sorted(by_node.values())]  # one request for the three nodes, refused
    counts = tracker.report.client.counts
    assert counts[("PUT", "/allocations/{consumer}")] == 3  # then each alone
    for node in outcome.nodes:  # each consumer in its own node's audit
        assert node.allocations_written == [by_node[node.nodename]]
    held = held_by_name(embedded.url, known)
    assert held[first] == {"VCPU": 16, "MEMORY_MB": 65536, "DISK_GB": 500}
    assert list(held.values()).count({"NET_BW_EGR_KILOBIT_PER_SEC": 1000}) == 1  # kept
    assert tracker.update_available_resource(False).ok
    close(tracker)


def test_a_failed_batch_fails_only_its_nodes_whose_records_were_saved_first(tmp_path, embedded):
    nodes = 130
    tracker = agent(tmp_path, embedded, nodes)
    by_node = instances(tracker)
    state = StateStore(tmp_path / "state")
    saved: dict[str, set[str]] = {}

    def snapshot() -> None:  # what a crash at this request would leave
        saved.update({n: set((state.consumers(n) or {}).get("instances", [])) for n in by_node})

    bodies = posted_bodies(tracker, fail_first=snapshot)
    outcome = tracker.update_available_resource(True)
    assert [len(b) for b in bodies] == [100, 30]
    failed = set(bodies[0])
    assert sum(1 for n in outcome.nodes if not n.ok) == 100
    for node in outcome.nodes:
        consumer = by_node[node.nodename]
        if consumer in failed:
            assert not node.ok and "500" in node.error, node.nodename
            assert consumer in saved[node.nodename]  # recorded before the request
            assert held_by_name(embedded.url, consumer) == {}
        else:
            assert node.ok and node.allocations_written == [consumer], node.nodename
            assert held_by_name(embedded.url, consumer)
    # the next cycle writes the 100 left, in one request, and fails nothing
    again = tracker.update_available_resource(False)
    assert again.ok, again.summary()
    assert sorted(bodies[2]) == sorted(failed) and len(bodies) == 3
    # then unchanged: 2 requests a node
    assert tracker.update_available_resource(False).requests == 2 * nodes
    close(tracker)


def test_a_node_in_a_written_and_a_failed_batch_records_the_written(tmp_path, embedded):
    """Two nodes of 60 small instances: the first request carries the first node's
    60 and 40 of the second's, the second request the second's last 20, and fails."""
    tracker = agent(tmp_path, embedded, 2)
    path = tmp_path / "nodes.yaml"
    host = HostDescription.load(path)
    for node in host.nodes:
        flavor = {"vcpus": 1, "memory_mb": 512, "root_gb": 1}
        node["instances"] = [
            {"uuid": str(uuidlib.uuid4()), "project_id": "p", "user_id": "u", "flavor": flavor}
            for _ in range(60)
        ]
    host.write(path)
    tracker.driver.reload()
    first, second = tracker.driver.get_nodenames()
    bodies = posted_bodies(tracker, fail_first=lambda: None, fail=2)
    outcome = tracker.update_available_resource(True)
    assert [len(b) for b in bodies] == [100, 20]
    a, b = outcome.nodes
    assert a.ok and len(a.allocations_written) == 60
    assert not b.ok and "500" in b.error
    written = set(bodies[0]) - {i.uuid for i in tracker.driver.list_instances(first)}
    assert len(written) == 40
    # the second node's record says which of its instances the agent wrote: those
    # of the request answered, which Placement holds; not the 20 of the failed one
    record = StateStore(tmp_path / "state").consumers(second)
    assert written <= set(record["wrote"]) and not set(bodies[1]) & set(record["wrote"])
    assert all(held_by_name(embedded.url, c) for c in sorted(written)[:5])
    assert held_by_name(embedded.url, bodies[1][0]) == {}
    again = tracker.update_available_resource(False)
    assert again.ok, again.summary()
    assert bodies[2] == bodies[1]  # the 20 left, in one request
    assert tracker.update_available_resource(False).requests == 2 * 2
    close(tracker)


def test_an_instance_listed_on_two_nodes_is_batched_once_then_read_by_the_second(
    tmp_path, embedded
):
    """A driver that lists one instance on two nodes (a listing in the middle of a
    rebalance): it goes in the batch for the first node only; the second reads it
    once that request is answered, finds it held on the first node, and writes
    nothing (*moving*), as when each node wrote alone (its own batch's 409)."""
    tracker = agent(tmp_path, embedded, 3)
    path = tmp_path / "nodes.yaml"
    host = HostDescription.load(path)
    first, second, _third = host.nodes
    second["instances"] = [dict(first["instances"][0])]
    host.write(path)
    tracker.driver.reload()
    names = tracker.driver.get_nodenames()
    twin = first["instances"][0]["uuid"]
    assert [i.uuid for i in tracker.driver.list_instances(names[1])] == [twin]
    bodies = posted_bodies(tracker)
    outcome = tracker.update_available_resource(True)
    assert outcome.ok, outcome.summary()
    assert len(bodies) == 1 and bodies[0].count(twin) == 1 and len(bodies[0]) == 2
    assert outcome.nodes[0].allocations_written == [twin]
    assert outcome.nodes[1].allocations_written == [] and outcome.nodes[1].moving == [twin]
    assert list(held_by_name(embedded.url, twin)) == [names[0]]
    assert tracker.report.client.counts[("PUT", "/allocations/{consumer}")] == 0
    close(tracker)
