"""A provider whose generation only allocation writes moved keeps its details without reads.

nova's scheduler claims on a NUMA cell (or the compute node) at every boot,
which moves the provider's generation. The audit reads that provider's
allocations anyway; when the consumers new or changed there account for the
whole move, the mirror keeps the provider's inventories, traits and
aggregates (:mod:`agent.placement.allocation_reads`, issue 28: the cycle costs
the unchanged cycle plus one read per changed consumer). Everything else must
still be seen: a move the allocations do not explain is read at once, and a
vouch never stands in for a read before a write, or after
``resource_provider_association_refresh`` seconds (a restart does not reset
that age, issue 33).

Real Placement (in-process); the one case the rule cannot see (a request
placing two consumers on the cell hides an operator's trait written in the
same interval) is produced for real with ``POST /allocations``.
"""

from __future__ import annotations

import shutil
import uuid as uuidlib
from collections import Counter

import pytest
import requests

from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from tests.helpers.faults import Killed, kill_at, matching
from tests.helpers.placement_http import HEADERS, http_get
from tests.helpers.tracker import PROJECT, USER, Setup

DETAILS = (
    ("GET", "/resource_providers/{uuid}/inventories"),
    ("GET", "/resource_providers/{uuid}/traits"),
    ("GET", "/resource_providers/{uuid}/aggregates"),
)
TRAIT = "CUSTOM_OPERATOR_RACK_A"


@pytest.fixture
def setup(tmp_path, embedded) -> Setup:
    return Setup.started(tmp_path, embedded)


def counted(s: Setup) -> Counter:
    counts, outcome = s.counted_cycle()
    assert outcome.ok, outcome.summary()
    return counts


def details_read(counts: Counter) -> int:
    return sum(counts[d] for d in DETAILS)


def claim(s: Setup, rp: str, consumers: int = 1) -> list[str]:
    """Another writer's new consumers on ``rp``, all in one request (1 generation move)."""
    made = [str(uuidlib.uuid4()) for _ in range(consumers)]
    one = {
        "allocations": {rp: {"resources": {"VCPU": 1, "MEMORY_MB": 256}}},
        "project_id": PROJECT,
        "user_id": USER,
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }
    if consumers == 1:
        answer = requests.put(
            f"{s.base}/allocations/{made[0]}", json=one, headers=HEADERS, timeout=10
        )
    else:
        body = {c: one for c in made}
        answer = requests.post(f"{s.base}/allocations", json=body, headers=HEADERS, timeout=10)
    assert answer.status_code == 204, answer.text
    return made


def operator_trait(s: Setup, rp: str) -> None:
    """An operator adds :data:`TRAIT` to ``rp`` (osc-placement's ``trait set`` does this)."""
    assert requests.put(f"{s.base}/traits/{TRAIT}", headers=HEADERS, timeout=10).ok
    held = http_get(s.base, f"/resource_providers/{rp}/traits")
    body = {
        "traits": [*held["traits"], TRAIT],
        "resource_provider_generation": held["resource_provider_generation"],
    }
    answer = requests.put(
        f"{s.base}/resource_providers/{rp}/traits", json=body, headers=HEADERS, timeout=10
    )
    assert answer.status_code == 200, answer.text


def in_placement(s: Setup, rp: str) -> set[str]:
    return set(http_get(s.base, f"/resource_providers/{rp}/traits")["traits"])


def mirrored(s: Setup, name: str) -> frozenset[str]:
    return s.report.mirror.tree(s.nodename).data(name).traits


def test_a_claim_costs_one_read_and_no_details(setup):
    s = setup
    steady = counted(s)
    cell = s.uuid(f"{s.nodename}_NUMA0")
    claim(s, cell)
    counts = counted(s)
    assert details_read(counts) == 0
    assert sum(counts.values()) == sum(steady.values()) + 1  # the new consumer, read once
    assert cell in s.report.mirror.vouched
    assert sum(counted(s).values()) == sum(steady.values())  # and then steady again


def test_the_agents_own_removal_of_a_gone_instance_is_proven_not_read(setup):
    """The agent removes a gone instance it wrote by a ``PUT`` of empty allocations, which
    Placement records as allocations of 0 on each provider it held (their generations move
    by one); its own writes count that move, so the next listing proves it and the cycle
    after costs the steady one (it read the cells' details, 6 requests more, before)."""
    s = setup
    s.driver.unsubscribe(s.tracker.handle_event)  # gone behind the agent's back
    steady = counted(s)
    s.driver.destroy(s.inst(1))
    counts, outcome = s.counted_cycle()
    assert outcome.ok and s.inst(1) in outcome.nodes[0].allocations_removed, outcome.summary()
    assert counts[("PUT", "/allocations/{consumer}")] == 1
    counts = counted(s)
    assert details_read(counts) == 0, counts
    assert sum(counts.values()) == sum(steady.values()), counts


def test_a_claim_and_an_operators_trait_are_both_seen(setup):
    s = setup
    name = f"{s.nodename}_NUMA0"
    cell = s.uuid(name)
    claim(s, cell)
    operator_trait(s, cell)
    counts = counted(s)
    assert details_read(counts) == 3  # two moves, one consumer: not explained
    assert TRAIT in mirrored(s, name)
    assert cell not in s.report.mirror.vouched


def masked(s: Setup) -> tuple[str, str]:
    """Two consumers in one request and an operator's trait: two moves, two consumers.

    The rule's blind spot (module docstring of agent.placement.allocation_reads): the trait is not
    seen by this cycle.
    """
    name = f"{s.nodename}_NUMA0"
    cell = s.uuid(name)
    claim(s, cell, consumers=2)
    operator_trait(s, cell)
    counts = counted(s)
    assert details_read(counts) == 0
    assert TRAIT not in mirrored(s, name)
    return name, cell


def test_a_vouched_provider_is_read_before_the_agent_writes_it(setup):
    s = setup
    name, cell = masked(s)
    before = Counter(s.client.statuses)
    s.host.node()["numa_cells"][0]["memory_mb"] = 262144  # the cell's inventory changes
    s.host.set("memory_mb", 262144 + 393216)
    s.host.write(s.host_path)
    s.driver.reload()
    counts = counted(s)
    assert details_read(counts) == 3
    assert counts[("PUT", "/resource_providers/{uuid}/inventories")] == 1
    statuses = Counter(s.client.statuses)
    statuses.subtract(before)
    assert statuses[("PUT", 409)] == 0  # written at the generation just read
    inventory = http_get(s.base, f"/resource_providers/{cell}/inventories")["inventories"]
    assert inventory["MEMORY_MB"]["total"] == 262144
    assert TRAIT in in_placement(s, cell)  # the operator's trait was never at risk
    assert TRAIT in mirrored(s, name)
    assert cell not in s.report.mirror.vouched


def test_a_vouch_expires_after_the_association_refresh(setup):
    s = setup
    now = [0.0]
    s.report.mirror.vouched.clock = lambda: now[0]
    assert s.report.mirror.vouched.refresh_after == 300  # nova's default
    name, _ = masked(s)
    now[0] = 299.0
    assert details_read(counted(s)) == 0
    now[0] = 300.0
    counts = counted(s)
    assert details_read(counts) == 3
    assert TRAIT in mirrored(s, name)
    assert details_read(counted(s)) == 0  # read: nothing to refresh any more


def test_no_refresh_on_time_alone_with_zero(tmp_path, embedded):
    s = Setup(tmp_path, embedded, compute={"resource_provider_association_refresh": 0})
    assert s.cycle(startup=True).ok and s.cycle().ok
    now = [0.0]
    s.report.mirror.vouched.clock = lambda: now[0]
    name, _ = masked(s)
    now[0] = 10.0**6
    assert details_read(counted(s)) == 0
    assert TRAIT not in mirrored(s, name)


def test_a_restart_keeps_a_vouch_and_its_age(setup, tmp_path, embedded):
    """Issue 33: a restart with the state kept read every vouched provider's details again
    (33 requests after nova's 10 claims); the state directory now keeps each vouch with the
    wall-clock time it began, so the restarted agent reads nothing more, and reads the
    details when the vouch is ``resource_provider_association_refresh`` seconds old, counted
    from before the restart (here 250 s of it had passed)."""
    s = setup
    name, cell = masked(s)
    records = s.state.seen_providers(s.nodename)
    (vouched,) = [r for r in records if r["uuid"] == cell]
    vouched["vouched"]["since"] -= 250.0
    s.state.set_seen_providers(s.nodename, records)
    report = ReportClient(embedded.client(), StateStore(tmp_path / "state"))
    now = [0.0]
    report.mirror.vouched.clock = lambda: now[0]
    tracker = ResourceTracker(s.conf, s.driver, report, report.state)

    def restarted_cycle() -> Counter:
        before = Counter(report.client.counts)
        assert tracker.update_available_resource(False).ok
        counts = Counter(report.client.counts)
        counts.subtract(before)
        return +counts

    assert details_read(restarted_cycle()) == 0
    assert cell in report.mirror.vouched
    assert TRAIT not in report.mirror.tree(s.nodename).data(name).traits
    now[0] = 49.0
    assert details_read(restarted_cycle()) == 0
    now[0] = 50.0
    assert details_read(restarted_cycle()) == 3
    assert TRAIT in report.mirror.tree(s.nodename).data(name).traits


def test_the_agents_own_write_and_a_claim_in_one_interval(setup):
    """The agent's own allocation write is counted exactly (agent.placement.own_writes); a
    claim on top is vouched for: no details read either way."""
    s = setup
    s.host.add(
        "instances",
        {
            "uuid": s.inst(9),
            "name": "new",
            "project_id": PROJECT,
            "user_id": USER,
            "flavor": {"name": "m1.small", "vcpus": 1, "memory_mb": 512, "root_gb": 1},
            "numa_cells": [0],
        },
    )
    s.host.write(s.host_path)
    s.driver.reload()
    wrote = s.cycle()
    assert wrote.ok and s.inst(9) in wrote.nodes[0].allocations_written
    claim(s, s.uuid(f"{s.nodename}_NUMA0"))
    counts = counted(s)
    assert details_read(counts) == 0
    # the claim's consumer alone: the agent's own write is recorded at the consumer
    # generation it produced (a new consumer's first write makes it 1: issue 39), so the
    # record tells it unchanged
    assert counts[("GET", "/allocations/{consumer}")] == 1


def test_a_write_of_its_own_the_state_does_not_record_explains_nothing(setup, tmp_path, embedded):
    """Issue 33, case 6: the agent writes two new instances on a cell in one ``POST
    /allocations`` (one generation move) and is killed before its record says so; an
    operator then adds a trait to the cell. After the restart the two new consumers must
    not explain both moves (the trait was hidden): they are the agent's own, written in
    requests its state does not count."""
    s = setup
    s.driver.unsubscribe(s.tracker.handle_event)
    name = f"{s.nodename}_NUMA0"
    cell = s.uuid(name)
    for n in (9, 10):
        s.host.add(
            "instances",
            {
                "uuid": s.inst(n),
                "name": f"new-{n}",
                "project_id": PROJECT,
                "user_id": USER,
                "flavor": {"name": "m1.small", "vcpus": 1, "memory_mb": 512, "root_gb": 1},
                "numa_cells": [0],
            },
        )
    s.host.write(s.host_path)
    s.driver.reload()
    at_kill = tmp_path / "at-kill"
    kill_at(s.client, 1, matching("POST", "/allocations"), s.state.path, at_kill, "after")
    with pytest.raises(Killed):
        s.cycle()
    operator_trait(s, cell)
    shutil.rmtree(s.state.path)
    shutil.copytree(at_kill, s.state.path)
    report = ReportClient(embedded.client(), StateStore(s.state.path))
    tracker = ResourceTracker(s.conf, s.driver, report, report.state)
    assert tracker.update_available_resource(False).ok
    assert TRAIT in report.mirror.tree(s.nodename).data(name).traits
