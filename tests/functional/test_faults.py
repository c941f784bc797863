"""Crash safety against real Placement: a kill at any instant converges, nothing is lost.

Each case injects one fault (tests/helpers/faults.py: the agent
killed at a request as SIGKILL would, a removal answered 500, a state file
lost or unwritable, a domain that cannot be read) and ends with the same
check, read from Placement over plain HTTP: the node's providers are exactly
the ones the host has, each with the owner trait; every live instance holds
what the host says; no foreign consumer was touched; a further cycle writes
nothing.
"""

from __future__ import annotations

import shutil
import uuid as uuidlib
from pathlib import Path

import pytest
import requests

from agent.placement.report import ReportClient
from agent.shape.adapter import adapt
from agent.shape.layout import OWNER_TRAIT
from agent.state.layout import CONSUMERS_COPY_DIR, CONSUMERS_DIR, node_file
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from agent.tracker.discovery import discover_node
from drivers.fake import FakeDriver
from tests.helpers.conf import make_conf
from tests.helpers.faults import Killed, any_write, fail_at, kill_at, matching
from tests.helpers.placement_http import HEADERS, http_get
from tests.helpers.placement_http import held_by_name as held
from tests.helpers.tracker import PROJECT, USER, Setup


def foreign_consumer(s: Setup) -> tuple[str, dict]:
    """A consumer of another service on a provider of its own (outside our tree)."""
    rp = requests.post(
        f"{s.base}/resource_providers",
        json={"name": f"other-{uuidlib.uuid4().hex[:8]}"},
        headers=HEADERS,
        timeout=10,
    ).json()["uuid"]
    body = {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}}
    r = requests.put(
        f"{s.base}/resource_providers/{rp}/inventories", json=body, headers=HEADERS, timeout=10
    )
    assert r.status_code == 200, r.text
    consumer = str(uuidlib.uuid4())
    r = requests.put(
        f"{s.base}/allocations/{consumer}",
        json={
            "allocations": {rp: {"resources": {"VCPU": 2}}},
            "project_id": PROJECT,
            "user_id": USER,
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
        headers=HEADERS,
        timeout=10,
    )
    assert r.status_code == 204, r.text
    return consumer, held(s.base, consumer)


def assert_converged(s: Setup, driver: FakeDriver, state: Path, foreign: tuple[str, dict]) -> None:
    """The end check of every fault case (module docstring)."""
    root = http_get(s.base, "/resource_providers", name=s.nodename)["resource_providers"]
    assert len(root) == 1, root
    root_uuid = root[0]["uuid"]
    want = discover_node(adapt(driver, driver.conf), s.nodename, root_uuid)
    in_tree = http_get(s.base, "/resource_providers", in_tree=root_uuid)["resource_providers"]
    assert sorted(p["name"] for p in in_tree) == sorted(p.name for p in want.tree.all_data())
    for p in in_tree:
        traits = http_get(s.base, f"/resource_providers/{p['uuid']}/traits")["traits"]
        assert OWNER_TRAIT in traits, p["name"]
        inv = http_get(s.base, f"/resource_providers/{p['uuid']}/inventories")["inventories"]
        wanted = want.tree.data(p["name"]).inventory
        assert {rc: i["total"] for rc, i in inv.items()} == {
            rc: i.total for rc, i in wanted.items()
        }, p["name"]
    names = {p.uuid: p.name for p in want.tree.all_data()}
    for consumer, alloc in want.allocations.items():
        expect = {names[rp]: a for rp, a in alloc.allocations.items()}
        assert held(s.base, consumer) == expect, consumer
    assert held(s.base, foreign[0]) == foreign[1]
    report = ReportClient(s.client, StateStore(state))
    again = ResourceTracker(
        driver.conf, driver, report, StateStore(state)
    ).update_available_resource(False)
    assert again.ok, again.summary()
    assert again.nodes[0].allocations_written == [] and again.nodes[0].allocations_removed == []
    assert (again.nodes[0].sync.created, again.nodes[0].sync.inventories) == (0, 0)


def restart(s: Setup, driver: FakeDriver, state: Path) -> ResourceTracker:
    store = StateStore(state)
    return ResourceTracker(driver.conf, driver, ReportClient(s.client, store), store)


COLD_SYNC_KILLS = [
    ("creates", matching("POST", "/resource_providers"), 2, "after"),
    ("creates", matching("POST", "/resource_providers"), 5, "after"),
    ("creates", matching("POST", "/resource_providers"), 8, "before"),
    ("traits", matching("PUT", "/resource_providers/{uuid}/traits"), 1, "after"),
    ("traits", matching("PUT", "/resource_providers/{uuid}/traits"), 4, "before"),
    ("inventories", matching("PUT", "/resource_providers/{uuid}/inventories"), 3, "after"),
    # A cold sync writes the instances together (POST /allocations, one transaction).
    ("allocations", matching("POST", "/allocations"), 1, "after"),
    ("allocations", matching("POST", "/allocations"), 1, "before"),
]


@pytest.mark.parametrize(("kind", "match", "k", "when"), COLD_SYNC_KILLS)
def test_agent_killed_during_a_cold_sync_converges_on_restart(
    tmp_path, embedded, kind, match, k, when
):
    s = Setup(tmp_path, embedded)
    foreign = foreign_consumer(s)
    counter = kill_at(s.client, k, match, s.state.path, tmp_path / "at-kill", when)
    with pytest.raises(Killed):
        s.cycle(startup=True)
    assert counter["seen"] == k, f"no kill at {kind} #{k}"
    outcome = restart(s, s.driver, tmp_path / "at-kill").update_available_resource(True)
    assert outcome.ok, outcome.summary()
    assert_converged(s, s.driver, tmp_path / "at-kill", foreign)


def test_state_lost_with_the_kill_converges_too(tmp_path, embedded):
    """Killed after 4 creates, and the state directory gone with the host's disk."""
    s = Setup(tmp_path, embedded)
    foreign = foreign_consumer(s)
    kill_at(s.client, 4, matching("POST", "/resource_providers"), s.state.path, tmp_path / "x")
    with pytest.raises(Killed):
        s.cycle(startup=True)
    empty = tmp_path / "empty"
    assert restart(s, s.driver, empty).update_available_resource(True).ok
    assert_converged(s, s.driver, empty, foreign)


def numa_driver(tmp_path: Path) -> FakeDriver:
    conf = make_conf(
        tmp_path,
        numa={"model_in_placement": True},
        devices={"enabled_mdev_types": ["nvidia-35", "nvidia-36"]},
    )
    return FakeDriver(conf, tmp_path / "host.yaml")


def reshape_writes(tmp_path: Path, embedded) -> int:
    """How many writes an uninterrupted flat -> NUMA start-up reshape makes."""
    (tmp_path / "probe").mkdir()
    s = Setup(tmp_path / "probe", embedded, numa={"model_in_placement": False})
    assert s.cycle(startup=True).ok
    s.cycle()
    counted = kill_at(s.client, 10_000, any_write, s.state.path, tmp_path / "unused")
    assert (
        restart(s, numa_driver(tmp_path / "probe"), s.state.path)
        .update_available_resource(True)
        .nodes[0]
        .sync.reshaped
    )
    return counted["seen"]


def test_start_up_reshape_killed_at_each_write_completes_on_the_next_start(tmp_path, embedded):
    writes = reshape_writes(tmp_path, embedded)
    assert writes >= 4  # two cells created, the reshaper, traits
    for k in range(1, writes + 1):
        for when in ("before", "after"):
            case = tmp_path / f"{k}-{when}"
            case.mkdir()
            s = Setup(case, embedded, numa={"model_in_placement": False})
            assert s.cycle(startup=True).ok
            foreign = foreign_consumer(s)
            numa = numa_driver(case)
            tracker = restart(s, numa, s.state.path)
            kill_at(s.client, k, any_write, s.state.path, case / "at-kill", when)
            with pytest.raises(Killed):
                tracker.update_available_resource(True)
            outcome = restart(s, numa, case / "at-kill").update_available_resource(True)
            assert outcome.ok, f"write {k} {when}: {outcome.summary()}"
            assert_converged(s, numa, case / "at-kill", foreign)


def test_a_removal_answered_500_is_tried_again_until_it_lands(setup):
    s = setup
    assert s.cycle(startup=True).ok
    s.driver.unsubscribe(s.tracker.handle_event)
    s.driver.destroy(s.inst(2))  # gone behind the agent's back
    fail_at(s.client, matching("PUT", "/allocations/{consumer}"))
    first = s.cycle()
    assert first.status == "degraded" and first.nodes[0].allocations_removed == []
    assert "allocations not removed" in first.nodes[0].problems[0]
    second = s.cycle()
    assert second.nodes[0].allocations_removed == [s.inst(2)] and second.ok
    assert held(s.base, s.inst(2)) == {}


@pytest.fixture
def setup(tmp_path, embedded) -> Setup:
    return Setup(tmp_path, embedded)


def test_known_consumers_survive_the_loss_of_one_state_file(setup):
    s = setup
    assert s.cycle(startup=True).ok
    primary = s.state.path / node_file(CONSUMERS_DIR, s.nodename)
    primary.write_text("{ not json")
    s.driver.unsubscribe(s.tracker.handle_event)
    s.driver.destroy(s.inst(1))
    assert s.cycle().nodes[0].allocations_removed == [s.inst(1)]
    assert held(s.base, s.inst(1)) == {}
    primary.unlink()
    s.driver.destroy(s.inst(2))
    assert s.cycle().nodes[0].allocations_removed == [s.inst(2)]
    assert (s.state.path / node_file(CONSUMERS_COPY_DIR, s.nodename)).exists()


def test_an_unwritable_state_directory_degrades_the_cycle_but_placement_is_kept(setup, caplog):
    s = setup
    assert s.cycle(startup=True).ok
    # A file in place of the directory (root ignores permission bits).
    shutil.rmtree(s.state.path)
    s.state.path.write_text("not a directory")
    call = requests.delete(f"{s.base}/allocations/{s.inst(3)}", headers=HEADERS, timeout=10)
    assert call.status_code == 204
    with caplog.at_level("ERROR"):
        outcome = s.cycle()
        s.cycle()
    assert outcome.status == "degraded" and "cannot be written" in outcome.state_error
    assert outcome.nodes[0].allocations_written == [s.inst(3)]  # Placement healed anyway
    assert held(s.base, s.inst(3))
    assert caplog.text.count("cannot be written") == 1  # said once
    s.state.path.unlink()
    assert s.cycle().ok  # writable again


def test_a_domain_that_cannot_be_read_keeps_its_allocation(tmp_path, served):
    """libvirt test:///: one domain's XML cannot be read for a while (a transient error).

    A Placement of its own: test:///'s domains have fixed UUIDs, and another
    test's node holding them in a shared Placement would make them *moving* here.
    """
    embedded = served
    import libvirt

    from tests.helpers.libvirt_fixtures import libvirt_driver

    driver = libvirt_driver(
        tmp_path, "small-host", DEFAULT={"host": f"lv-{uuidlib.uuid4().hex[:8]}"}
    )
    conf = driver.conf
    store = StateStore(conf.state_path)
    report = ReportClient(embedded.client(), store)
    tracker = ResourceTracker(conf, driver, report, store)
    first = tracker.update_available_resource(True)
    # (small-host has a domain whose disk does not fit this machine's file system.)
    assert first.progressed, first.summary()
    victim = sorted(first.nodes[0].allocations_written)[0]
    before = http_get(embedded.url, f"/allocations/{victim}")["allocations"]
    assert before
    real = libvirt.virDomain.XMLDesc

    def broken(dom, flags=0):
        if dom.UUIDString() == victim:
            raise libvirt.libvirtError("internal error: cannot read the domain's definition")
        return real(dom, flags)

    libvirt.virDomain.XMLDesc = broken
    try:
        outcome = tracker.update_available_resource(False)
    finally:
        libvirt.virDomain.XMLDesc = real
    assert outcome.nodes[0].allocations_removed == []
    assert http_get(embedded.url, f"/allocations/{victim}")["allocations"] == before
    assert tracker.update_available_resource(False).nodes[0].allocations_written == []
