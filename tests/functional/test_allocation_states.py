"""The allocation audit's states against a real Placement (issue #26; docs/service.md).

A host (examples/big-host.yaml), what another writer does (nova's scheduler
and conductor, as plain HTTP at nova's microversion 1.36, so its consumers
carry no type), one cycle, and what Placement holds afterwards. Each defect
the issue lists that lives in the audit has its own test here (1, 2, 3); the
kill at every request boundary of a cycle that writes, removes and moves is
the write-ahead record's proof.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from pathlib import Path

import pytest
import requests

from agent.cli.main import main
from agent.placement.report import ReportClient
from agent.service.exit_codes import EXIT_DRIFT
from agent.state.layout import CONSUMERS_DIR, node_file
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from agent.tracker.targeted import EventBatch
from drivers.records import Flavor, Instance
from tests.helpers.faults import Killed, any_write, before_send, kill_at, matching
from tests.helpers.placement_http import HEADERS, call, http_get
from tests.helpers.tracker import PROJECT, USER, Setup

NOVA = {**HEADERS, "OpenStack-API-Version": "placement 1.36"}
"""nova 34 writes allocations at 1.28-1.36: no consumer type."""


def nova_call(base: str, method: str, path: str, body: dict, expect: int = 204) -> None:
    """A write as nova's report client sends it (microversion 1.36)."""
    resp = requests.request(method, base + path, json=body, headers=NOVA, timeout=10)
    assert resp.status_code == expect, resp.text


def nova_put(base: str, consumer: str, per_rp: dict[str, dict[str, int]]) -> None:
    """A consumer's allocations as nova's report client writes them (1.36, its generation)."""
    current = http_get(base, f"/allocations/{consumer}")
    body = {
        "allocations": {rp: {"resources": r} for rp, r in per_rp.items()},
        "project_id": current.get("project_id", PROJECT),
        "user_id": current.get("user_id", USER),
        "consumer_generation": current.get("consumer_generation"),
    }
    nova_call(base, "PUT", f"/allocations/{consumer}", body)


def generation(base: str, consumer: str) -> int | None:
    return http_get(base, f"/allocations/{consumer}").get("consumer_generation")


def other_compute_node(s: Setup) -> str:
    """Another hypervisor's compute node (VCPU, MEMORY_MB), as nova-compute creates it."""
    rp = str(uuidlib.uuid4())
    call(s.base, "POST", "/resource_providers", {"name": f"dest-{rp[:8]}", "uuid": rp}, expect=200)
    call(
        s.base,
        "PUT",
        f"/resource_providers/{rp}/inventories",
        {
            "resource_provider_generation": 0,
            "inventories": {"VCPU": {"total": 64}, "MEMORY_MB": {"total": 262144}},
        },
    )
    return rp


def node_usage(s: Setup) -> dict[str, int]:
    """``{rc: used}`` summed over the node's providers (GET .../usages)."""
    total: dict[str, int] = {}
    for rp in s.report.get_provider_tree_and_ensure_root(s.nodename).get_provider_uuids():
        for rc, n in http_get(s.base, f"/resource_providers/{rp}/usages")["usages"].items():
            total[rc] = total.get(rc, 0) + n
    return total


def restart(s: Setup, state: Path) -> ResourceTracker:
    store = StateStore(state)
    report = ReportClient(s.client, store)
    return ResourceTracker(s.conf, s.driver, report, store, clock=lambda: s.now)


def by_uuid(base: str, consumer: str) -> dict[str, dict[str, int]]:
    allocs = http_get(base, f"/allocations/{consumer}")["allocations"]
    return {rp: a["resources"] for rp, a in allocs.items()}


# -- moving ----------------------------------------------------------------------------


def test_a_domain_nova_is_moving_away_is_not_written_back(tmp_path, embedded):
    """Resize awaiting confirmation: the source writes nothing; nova's record stays."""
    s = Setup(tmp_path, embedded, compute={"remove_unknown_allocations_after": 60})
    assert s.cycle(startup=True).ok
    inst = s.inst(1)
    source_share = by_uuid(s.base, inst)
    usage_before = node_usage(s)
    dest = other_compute_node(s)
    # The conductor: the source share to a migration record; the scheduler: the destination.
    migration = str(uuidlib.uuid4())
    nova_put(s.base, migration, source_share)
    nova_put(s.base, inst, {dest: {"VCPU": 4, "MEMORY_MB": 8192}})
    before = (generation(s.base, inst), generation(s.base, migration))
    for _ in range(3):
        outcome = s.cycle()
        s.now += 3600  # far past remove_unknown_allocations_after
        node = outcome.nodes[0]
        assert outcome.ok, outcome.summary()
        assert node.moving == [inst] and inst not in node.allocations_written
        assert migration in node.unknown_consumers and not node.allocations_removed
    assert (generation(s.base, inst), generation(s.base, migration)) == before
    assert by_uuid(s.base, migration) == source_share
    # The source host counts the instance once: through nova's migration record.
    assert node_usage(s) == usage_before
    states = {c["consumer"]: c for c in outcome.nodes[0].consumers}
    assert states[inst]["state"] == "moving"
    assert states[migration]["state"] == "not an instance"
    # Confirm: nova deletes the record's allocations; the domain leaves the source.
    nova_put(s.base, migration, {})
    s.driver.unsubscribe(s.tracker.handle_event)
    s.driver.destroy(inst)
    gen = generation(s.base, inst)
    outcome = s.cycle()
    assert outcome.ok and outcome.nodes[0].allocations_removed == []
    assert generation(s.base, inst) == gen  # the destination's consumer untouched
    assert by_uuid(s.base, inst) == {dest: {"VCPU": 4, "MEMORY_MB": 8192}}


def test_a_revert_brings_the_instance_back_here(tmp_path, embedded):
    s = Setup(tmp_path, embedded)
    assert s.cycle(startup=True).ok
    inst = s.inst(2)
    source_share = by_uuid(s.base, inst)
    dest = other_compute_node(s)
    migration = str(uuidlib.uuid4())
    nova_put(s.base, migration, source_share)
    nova_put(s.base, inst, {dest: {"VCPU": 4, "MEMORY_MB": 8192}})
    assert s.cycle().nodes[0].moving == [inst]
    # Revert: move_allocations(migration, instance) in one POST /allocations.
    gen_m, gen_i = generation(s.base, migration), generation(s.base, inst)
    nova_call(
        s.base,
        "POST",
        "/allocations",
        {
            inst: {
                "allocations": {rp: {"resources": r} for rp, r in source_share.items()},
                "project_id": PROJECT,
                "user_id": USER,
                "consumer_generation": gen_i,
            },
            migration: {
                "allocations": {},
                "project_id": PROJECT,
                "user_id": USER,
                "consumer_generation": gen_m,
            },
        },
    )
    outcome = s.cycle()
    assert outcome.nodes[0].moving == [] and outcome.nodes[0].allocations_written == []
    assert by_uuid(s.base, inst) == source_share


# -- drift -----------------------------------------------------------------------------


def test_an_allocation_that_differs_is_reported_not_rewritten(tmp_path, embedded):
    s = Setup(tmp_path, embedded)
    assert s.cycle(startup=True).ok
    inst = s.inst(1)
    held = by_uuid(s.base, inst)
    # nova's scheduler claimed more memory than the domain has (a flavor it knows better).
    changed = {rp: dict(a) for rp, a in held.items()}
    cell = next(rp for rp, a in changed.items() if "MEMORY_MB" in a)
    changed[cell]["MEMORY_MB"] += 1024
    nova_put(s.base, inst, changed)
    gen = generation(s.base, inst)
    for _ in range(2):
        outcome = s.cycle()
        assert outcome.ok and outcome.nodes[0].drift == [inst]
        assert outcome.nodes[0].allocations_written == []
    assert generation(s.base, inst) == gen and by_uuid(s.base, inst) == changed
    states = {c["consumer"]: c for c in outcome.nodes[0].consumers}
    assert "MEMORY_MB=" in states[inst]["drift"]
    # The operator's choice: rewrite drift.
    s.conf.set_override("rewrite_differing_allocations", True, group="compute")
    fixed = ResourceTracker(s.conf, s.driver, s.report, s.state).update_available_resource(False)
    assert fixed.nodes[0].allocations_written == [inst]
    assert by_uuid(s.base, inst) == held


# -- defect 2: claims ------------------------------------------------------------------


def test_a_claim_is_kept_until_the_instance_is_listed(tmp_path, embedded):
    """Issue #26 defect 2: the next cycle removed a claim the driver did not list yet."""
    s = Setup(tmp_path, embedded, DEFAULT={"instance_build_timeout": 600})
    assert s.cycle(startup=True).ok
    new = Instance(str(uuidlib.uuid4()), PROJECT, USER, Flavor(2, 2048, root_gb=10))
    claimed = s.tracker.instance_claim(s.nodename, new)  # not spawned: not listed yet
    assert claimed.allocations
    for _ in range(2):
        outcome = s.cycle()
        assert outcome.nodes[0].allocations_removed == []
        assert by_uuid(s.base, new.uuid) == claimed.allocations
    states = {c["consumer"]: c for c in outcome.nodes[0].consumers}
    assert states[new.uuid]["state"] == "claimed, building"
    # Listed: an instance here, in step.
    s.driver.unsubscribe(s.tracker.handle_event)
    s.driver.spawn(s.nodename, new)
    outcome = s.cycle()
    assert outcome.nodes[0].allocations_written == [] and outcome.nodes[0].drift == []
    # A claim never listed is given back once instance_build_timeout passed.
    other = Instance(str(uuidlib.uuid4()), PROJECT, USER, Flavor(1, 512, root_gb=1))
    s.tracker.instance_claim(s.nodename, other)
    s.now += 601
    assert s.cycle().nodes[0].allocations_removed == [other.uuid]
    assert by_uuid(s.base, other.uuid) == {}


# -- defect 3: a refused batch ---------------------------------------------------------


def test_a_batch_refused_400_fails_only_the_consumer_at_fault(tmp_path, embedded):
    """Issue #26 defect 3: a provider gone under a batch aborted the node's whole audit,
    and the empty consumer Placement kept could never be written again."""
    s = Setup(tmp_path, embedded)
    assert s.cycle(startup=True).ok
    s.driver.unsubscribe(s.tracker.handle_event)
    nvme = s.uuid(f"{s.nodename}_pci_0000_86_00_0")  # only instance 4 uses it
    inst4 = next(i for i in s.driver.list_instances(s.nodename) if i.uuid == s.inst(4))
    s.driver.destroy(inst4.uuid)
    assert s.cycle().nodes[0].allocations_removed == [inst4.uuid]
    # Two instances new to the node at once: instance 4 back, and one without devices.
    plain = Instance(str(uuidlib.uuid4()), PROJECT, USER, Flavor(1, 1024, root_gb=1))
    s.driver.spawn(s.nodename, inst4)
    s.driver.spawn(s.nodename, plain)
    # Someone deletes the NVMe's provider just before the batch is sent: POST answers 400.
    fired = before_send(
        s.client,
        lambda m, t, _p: (m, t) == ("POST", "/allocations"),
        lambda: call(s.base, "DELETE", f"/resource_providers/{nvme}", expect=204),
    )
    outcome = s.cycle()
    assert fired
    node = outcome.nodes[0]
    assert node.ok, outcome.summary()
    assert node.allocations_written == [plain.uuid]  # the node's audit went on
    assert [p for p in node.problems if inst4.uuid in p]  # the one at fault is named
    # The next cycle lays the provider out again and writes instance 4.
    again = s.cycle()
    assert again.ok, again.summary()
    assert again.nodes[0].allocations_written == [inst4.uuid]
    assert by_uuid(s.base, inst4.uuid)


# -- defect 1 and the write-ahead record ------------------------------------------------


def test_killed_after_the_bulk_write_the_instances_are_recorded(tmp_path, embedded):
    """Issue #26 defect 1: new instances written, then the agent dies before its record is
    saved; destroyed later, their allocations leaked forever as unknown consumers."""
    s = Setup(tmp_path, embedded)
    s.driver.unsubscribe(s.tracker.handle_event)
    at_kill = tmp_path / "at-kill"
    kill_at(s.client, 1, matching("POST", "/allocations"), s.state.path, at_kill, "after")
    with pytest.raises(Killed):
        s.cycle(startup=True)
    assert by_uuid(s.base, s.inst(3))  # the write reached Placement
    s.driver.destroy(s.inst(3))  # destroyed while the agent was down
    s.client._send = type(s.client)._send.__get__(s.client)  # type: ignore[method-assign]
    tracker = restart(s, at_kill)
    outcome = tracker.update_available_resource(True)
    assert outcome.ok, outcome.summary()
    # Its answer was lost with the process, so the agent cannot tell its own write from
    # nova's: removed once absent past the grace, as an allocation nova wrote would be
    # ([compute] absent_instance_timeout, counted by periodic audits: issue 39).
    states = {c["consumer"]: c for c in outcome.nodes[0].consumers}
    assert states[s.inst(3)]["state"] == "gone"
    s.now += 60
    assert not tracker.update_available_resource(False).nodes[0].allocations_removed
    assert by_uuid(s.base, s.inst(3))
    s.now += s.conf.compute.absent_instance_timeout
    assert s.inst(3) in tracker.update_available_resource(False).nodes[0].allocations_removed
    assert by_uuid(s.base, s.inst(3)) == {}


def scenario(s: Setup) -> tuple[str, str, str, dict]:
    """A warm host where the next cycle writes (a new instance), removes (one destroyed)
    and sees a move (nova moved one away): ``(new, gone, moving, moving's allocation)``."""
    assert s.cycle(startup=True).ok
    s.driver.unsubscribe(s.tracker.handle_event)
    new = Instance(str(uuidlib.uuid4()), PROJECT, USER, Flavor(1, 1024, root_gb=1))
    s.driver.spawn(s.nodename, new)
    s.driver.destroy(s.inst(2))
    dest = other_compute_node(s)
    migration = str(uuidlib.uuid4())
    nova_put(s.base, migration, by_uuid(s.base, s.inst(1)))
    moved = {dest: {"VCPU": 4, "MEMORY_MB": 8192}}
    nova_put(s.base, s.inst(1), moved)
    return new.uuid, s.inst(2), s.inst(1), moved


def test_a_kill_at_every_request_boundary_converges_with_nothing_leaked(tmp_path, embedded):
    (tmp_path / "probe").mkdir()
    probe = Setup(tmp_path / "probe", embedded)
    scenario(probe)
    counted = kill_at(probe.client, 10_000, any_write, probe.state.path, tmp_path / "unused")
    assert probe.cycle().ok
    writes = counted["seen"]
    assert writes >= 2  # the new instance's write and the gone one's removal
    for k in range(1, writes + 1):
        for when in ("before", "after"):
            (tmp_path / f"{k}-{when}").mkdir()
            s = Setup(tmp_path / f"{k}-{when}", embedded)
            new, gone, moving, moved = scenario(s)
            snap = tmp_path / f"{k}-{when}-state"
            counter = kill_at(s.client, k, any_write, s.state.path, snap, when)
            with pytest.raises(Killed):
                s.cycle()
                pytest.fail(f"no kill at write {k} of {writes}: {counter}")
            s.client._send = type(s.client)._send.__get__(s.client)  # type: ignore[method-assign]
            outcome = restart(s, snap).update_available_resource(True)
            assert outcome.ok, (k, when, outcome.summary())
            assert by_uuid(s.base, new), (k, when)
            assert by_uuid(s.base, gone) == {}, (k, when)
            assert by_uuid(s.base, moving) == moved, (k, when)
            settled = restart(s, snap).update_available_resource(False)
            node = settled.nodes[0]
            assert node.allocations_written == node.allocations_removed == [], (k, when)
            record = json.loads((snap / node_file(CONSUMERS_DIR, s.nodename)).read_text())
            assert new in json.dumps(record), (k, when)


def test_show_lists_each_consumer_with_its_state_and_drift(tmp_path, embedded, capsys):
    """``compute-agent show --format json``: the consumers as the last audit found them;
    ``--check`` exits with the drift code when an allocation differs."""
    s = Setup(tmp_path, embedded)
    assert s.cycle(startup=True).ok
    inst = s.inst(1)
    changed = by_uuid(s.base, inst)
    cell = next(rp for rp, a in changed.items() if "MEMORY_MB" in a)
    changed[cell]["MEMORY_MB"] += 1024
    nova_put(s.base, inst, changed)
    assert s.cycle().nodes[0].drift == [inst]
    conf = tmp_path / "show.conf"
    conf.write_text(
        f"[DEFAULT]\nstate_path = {s.state.path}\n"
        f"[compute]\ndriver = fake\n[fake]\nhost_file = {s.host_path}\n"
        "[numa]\nmodel_in_placement = true\n"
        "[devices]\nenabled_mdev_types = nvidia-35,nvidia-36\n"
        f"[placement]\nauth_type = admin_token\nendpoint = {s.base}\ntoken = admin\n"
        "noauth_roles = admin,service\n"
    )
    capsys.readouterr()
    code = main(["show", "--check", "--format", "json", "--config", str(conf)])
    assert code == EXIT_DRIFT
    (node,) = json.loads(capsys.readouterr().out)["nodes"]
    states = {c["consumer"]: c for c in node["consumers"]}
    assert states[inst]["state"] == "instance here" and "MEMORY_MB=" in states[inst]["drift"]
    assert {c["state"] for c in states.values()} == {"instance here"}
    assert sorted(states) == sorted(s.inst(n) for n in (1, 2, 3, 4))


def test_instances_new_to_an_event_batch_are_written_in_one_post(tmp_path, embedded):
    """A targeted update writes instances that hold nothing here together (one ``POST
    /allocations``), not one read and one write each."""
    s = Setup(tmp_path, embedded)
    assert s.cycle(startup=True).ok
    s.driver.unsubscribe(s.tracker.handle_event)
    new = [Instance(str(uuidlib.uuid4()), PROJECT, USER, Flavor(1, 512, root_gb=1)) for _ in "abc"]
    for instance in new:
        s.driver.spawn(s.nodename, instance)
    before = dict(s.client.counts)
    outcome = s.tracker.apply_events(EventBatch(instances={s.nodename: {i.uuid for i in new}}))
    assert sorted(outcome.written) == sorted(i.uuid for i in new) and outcome.errors == []
    sent = {k: n - before.get(k, 0) for k, n in s.client.counts.items() if n != before.get(k, 0)}
    # The audit's evidence read anew (each CPU and memory provider: issue 39, one procedure
    # for every trigger), then one POST for the three.
    cpu = len(s.tracker.views.cached(s.nodename).cpu_providers)
    assert sent == {
        ("GET", "/resource_providers/{uuid}/allocations"): cpu,
        ("POST", "/allocations"): 1,
    }
