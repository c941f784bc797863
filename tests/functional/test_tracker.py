"""The resource tracker against a real Placement: cycles, allocation audit, claims.

Placement is the real openstack-placement application in-process (the
session's ``embedded`` fixture); every test uses its own nodename and its own
instance UUIDs, because the database is shared by the session.
"""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import replace
from typing import ClassVar

import pytest
import requests

from agent.conf import config as agent_config
from agent.model.exceptions import CapacityExceeded
from agent.placement.report import ReportClient
from agent.shape.layout import OWNER_TRAIT
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver
from drivers.records import Flavor, Instance
from tests.helpers.conf import make_conf
from tests.helpers.names import unique
from tests.helpers.placement_http import HEADERS, http_get
from tests.helpers.tracker import PROJECT, USER, Setup


@pytest.fixture
def setup(tmp_path, embedded) -> Setup:
    return Setup(tmp_path, embedded)


def test_startup_on_empty_placement_writes_tree_and_every_allocation(setup):
    s = setup
    n = s.nodename
    outcome = s.cycle(startup=True)
    assert outcome.ok, outcome.summary()
    (node,) = outcome.nodes
    assert node.providers == 8 and node.sync.created == 7
    assert sorted(node.allocations_written) == [s.inst(i) for i in (1, 2, 3, 4)]
    # vdi-1: 4 VCPU / 8 GiB pinned to cell 0, 40 GiB root, one mdev on GPU 0000:5e:00.0.
    assert s.held(s.inst(1)) == {
        f"{n}_NUMA0": {"VCPU": 4, "MEMORY_MB": 8192},
        n: {"DISK_GB": 40},
        f"{n}_pci_0000_5e_00_0": {"VGPU": 1},
    }
    assert s.held(s.inst(2))[f"{n}_pci_0000_5e_00_0"] == {"VGPU": 1}
    # nfv-router: pinned over both cells, boot from volume (swap 2 GiB only), 3 VFs.
    assert s.held(s.inst(3)) == {
        f"{n}_NUMA0": {"PCPU": 4, "MEMORY_MB": 8192},
        f"{n}_NUMA1": {"PCPU": 4, "MEMORY_MB": 8192},
        n: {"DISK_GB": 2},
        f"{n}_pci_0000_3b_00_0": {"SRIOV_NET_VF": 2},
        f"{n}_pci_0000_d8_00_0": {"SRIOV_NET_VF": 1},
    }
    # storage-1: no NUMA affinity -> the cell with most free VCPU (cell 1: cell 0 has vdi-*).
    assert s.held(s.inst(4)) == {
        f"{n}_NUMA1": {"VCPU": 8, "MEMORY_MB": 32768},
        n: {"DISK_GB": 180},
        f"{n}_pci_0000_86_00_0": {"CUSTOM_PCI_8086_0A54": 1},
    }
    consumer = http_get(s.base, f"/allocations/{s.inst(4)}")
    assert consumer["project_id"] == "3e5f7a9b1c2d4e6f8a0b2c4d6e8f0a1b"
    assert consumer["consumer_type"] == "INSTANCE"
    # Every provider is marked as the agent's.
    for p in http_get(s.base, "/resource_providers", in_tree=s.uuid(n))["resource_providers"]:
        traits = http_get(s.base, f"/resource_providers/{p['uuid']}/traits")["traits"]
        assert OWNER_TRAIT in traits


def test_steady_state_costs_the_listing_and_one_read_per_cpu_provider(setup):
    """1 tree listing + the allocations of both NUMA cells (what agent.audit.audit_read reads)."""
    s = setup
    assert s.cycle(startup=True).ok
    s.cycle()
    outcome = s.cycle()
    assert outcome.ok and outcome.requests == 1 + 2
    assert outcome.nodes[0].allocations_written == []


def test_the_cycle_after_the_agents_own_writes_costs_the_steady_requests(setup):
    """Issue #16 item 5: no provider re-read after the start-up's own allocation writes.

    The start-up's one listing after its writes proves the generations moved
    only by the agent (agent.placement.own_writes), so the very next cycle
    already costs the steady 1 listing + the two NUMA cells' allocations.
    """
    s = setup
    assert s.cycle(startup=True).ok
    outcome = s.cycle()
    assert outcome.ok and outcome.requests == 1 + 2, outcome.summary()
    assert outcome.nodes[0].allocations_written == []


def test_spawn_and_destroy_claim_and_give_back(setup):
    s = setup
    assert s.cycle(startup=True).ok
    new = Instance(
        str(uuidlib.uuid4()), PROJECT, USER, Flavor(2, 2048, root_gb=10), numa_cells=(1,)
    )
    s.driver.spawn(s.nodename, new)
    assert s.held(new.uuid) == {
        f"{s.nodename}_NUMA1": {"VCPU": 2, "MEMORY_MB": 2048},
        s.nodename: {"DISK_GB": 10},
    }
    outcome = s.cycle()
    assert new.uuid not in outcome.nodes[0].allocations_written  # already right
    s.driver.destroy(new.uuid)
    assert s.held(new.uuid) == {}
    outcome = s.cycle()
    assert outcome.ok and outcome.nodes[0].allocations_removed == []


def test_claim_that_does_not_fit_names_the_class_and_writes_nothing(setup):
    s = setup
    assert s.cycle(startup=True).ok
    big = Instance(
        str(uuidlib.uuid4()), PROJECT, USER, Flavor(2, 10_000_000, root_gb=10), numa_cells=(0,)
    )
    with pytest.raises(CapacityExceeded) as err:
        s.driver.spawn(s.nodename, big)
    assert err.value.resource_class == "MEMORY_MB"
    assert err.value.requested == 10_000_000
    assert "MEMORY_MB" in str(err.value)
    assert s.held(big.uuid) == {}
    assert big.uuid not in {i.uuid for i in s.driver.list_instances(s.nodename)}


def test_allocation_deleted_behind_the_agents_back_is_healed(setup):
    s = setup
    assert s.cycle(startup=True).ok
    before = s.held(s.inst(3))
    resp = requests.delete(f"{s.base}/allocations/{s.inst(3)}", headers=HEADERS, timeout=10)
    assert resp.status_code == 204
    outcome = s.cycle()
    assert outcome.nodes[0].allocations_written == [s.inst(3)]
    assert s.held(s.inst(3)) == before


def put_allocation(
    base: str,
    consumer: str,
    rp: str,
    resources: dict[str, int],
    ctype: str | None = "MIGRATION",
    owner: tuple[str, str] = (PROJECT, USER),
) -> None:
    """``ctype=None`` writes as nova 34 does, at 1.36: the consumer has no type."""
    body = {
        "allocations": {rp: {"resources": resources}},
        "project_id": owner[0],
        "user_id": owner[1],
        "consumer_generation": None,
    }
    headers = dict(HEADERS)
    if ctype is None:
        headers["OpenStack-API-Version"] = "placement 1.36"
    else:
        body["consumer_type"] = ctype
    resp = requests.put(f"{base}/allocations/{consumer}", json=body, headers=headers, timeout=10)
    assert resp.status_code == 204, resp.text


def test_unknown_consumer_is_left_alone(setup):
    s = setup
    assert s.cycle(startup=True).ok
    stranger = str(uuidlib.uuid4())
    put_allocation(s.base, stranger, s.uuid(s.nodename), {"DISK_GB": 5})
    for _ in range(2):
        outcome = s.cycle()
        assert outcome.nodes[0].unknown_consumers == [stranger]
        s.now += 10_000
    assert s.held(stranger) == {s.nodename: {"DISK_GB": 5}}


def test_unknown_consumer_cleared_after_the_opt_in_grace_period(tmp_path, embedded):
    s = Setup(tmp_path, embedded, compute={"remove_unknown_allocations_after": 600})
    assert s.cycle(startup=True).ok
    stranger = str(uuidlib.uuid4())
    put_allocation(
        s.base, stranger, s.uuid(s.nodename), {"DISK_GB": 5}, "INSTANCE", ("p-gone", "u-gone")
    )
    migration = str(uuidlib.uuid4())
    put_allocation(s.base, migration, s.uuid(s.nodename), {"DISK_GB": 3})
    # nova's migration record: no consumer type, the owner of an instance listed here.
    untyped = str(uuidlib.uuid4())
    put_allocation(s.base, untyped, s.uuid(s.nodename), {"DISK_GB": 2}, None)
    every = sorted([stranger, migration, untyped])
    assert sorted(s.cycle().nodes[0].unknown_consumers) == every  # first seen now
    s.now += 599
    assert sorted(s.cycle().nodes[0].unknown_consumers) == every
    s.now += 2
    outcome = s.cycle()
    assert outcome.nodes[0].allocations_removed == [stranger]
    assert s.held(stranger) == {}
    # A migration record is never an instance's leak: nova gives it back itself.
    kept = sorted([migration, untyped])
    assert sorted(outcome.nodes[0].unknown_consumers) == kept
    assert s.held(migration) == {s.nodename: {"DISK_GB": 3}}
    assert s.held(untyped) == {s.nodename: {"DISK_GB": 2}}
    states = {c["consumer"]: c for c in outcome.nodes[0].consumers}
    assert "project and user of an instance listed here" in states[untyped]["why"]
    s.now += 3600
    assert sorted(s.cycle().nodes[0].unknown_consumers) == kept


def test_known_consumers_survive_a_restart(setup, embedded):
    """An instance gone while the agent was down still has its allocation removed."""
    s = setup
    assert s.cycle(startup=True).ok
    # Destroyed behind the agent's back (it was not running).
    s.driver.unsubscribe(s.tracker.handle_event)
    s.driver.destroy(s.inst(2))
    report = ReportClient(embedded.client(), s.state)
    restarted = ResourceTracker(s.conf, s.driver, report, s.state)
    outcome = restarted.update_available_resource(startup=True)
    assert outcome.nodes[0].allocations_removed == [s.inst(2)]
    assert s.held(s.inst(2)) == {}


def test_instance_moved_away_keeps_its_allocations_elsewhere(setup):
    """Only this host's part of a gone instance's allocations is removed. Another writer
    (here, the test) rewrote it since the agent's write, so it is that writer's: removed
    once absent past ``[compute] absent_instance_timeout`` (issue 39)."""
    s = setup
    assert s.cycle(startup=True).ok
    other = unique("other-host")
    resp = requests.post(
        f"{s.base}/resource_providers", json={"name": other}, headers=HEADERS, timeout=10
    )
    other_uuid = resp.json()["uuid"]
    requests.put(
        f"{s.base}/resource_providers/{other_uuid}/inventories",
        json={"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}},
        headers=HEADERS,
        timeout=10,
    ).raise_for_status()
    current = http_get(s.base, f"/allocations/{s.inst(1)}")
    body = {
        "allocations": {
            **{rp: {"resources": a["resources"]} for rp, a in current["allocations"].items()},
            other_uuid: {"resources": {"VCPU": 1}},
        },
        "project_id": current["project_id"],
        "user_id": current["user_id"],
        "consumer_generation": current["consumer_generation"],
        "consumer_type": "INSTANCE",
    }
    resp = requests.put(f"{s.base}/allocations/{s.inst(1)}", json=body, headers=HEADERS, timeout=10)
    assert resp.status_code == 204, resp.text
    s.driver.unsubscribe(s.tracker.handle_event)
    s.driver.destroy(s.inst(1))
    assert s.cycle().nodes[0].allocations_removed == []
    s.now += s.conf.compute.absent_instance_timeout
    outcome = s.cycle()
    assert outcome.nodes[0].allocations_removed == [s.inst(1)]
    assert s.held(s.inst(1)) == {other: {"VCPU": 1}}


class FlakyDriver(FakeDriver):
    """A fake driver whose discovery fails for the nodes listed in ``broken``."""

    broken: ClassVar[set[str]] = set()

    def get_host_resources(self, nodename: str):
        if nodename in self.broken:
            raise OSError(f"/sys/devices/system/node of {nodename}: Input/output error")
        return super().get_host_resources(nodename)


def test_one_failing_node_does_not_stop_the_other(tmp_path, embedded):
    s = Setup(tmp_path, embedded, driver_cls=FlakyDriver, nodes=2)
    good, bad = s.nodenames
    s.driver.broken = {bad}
    outcome = s.cycle(startup=True)
    assert not outcome.ok
    by_name = {n.nodename: n for n in outcome.nodes}
    assert by_name[good].ok and by_name[good].sync.created == 7
    assert not by_name[bad].ok and "Input/output error" in by_name[bad].error
    assert s.held(s.inst(1))  # the good node's instances got their allocations
    s.driver.broken = set()
    outcome = s.cycle(startup=True)
    assert outcome.ok
    assert {n.nodename: n.sync.created for n in outcome.nodes}[bad] == 7


def test_gpu_removed_while_allocated_stays_reserved_until_its_instances_go(setup):
    s = setup
    n = s.nodename
    gpu = f"{n}_pci_0000_5e_00_0"
    assert s.cycle(startup=True).ok
    gpu_uuid = s.uuid(gpu)
    s.driver.remove_device(n, "0000:5e:00.0")
    outcome = s.cycle()
    assert outcome.ok, outcome.summary()
    assert outcome.nodes[0].retained == [gpu]
    inv = http_get(s.base, f"/resource_providers/{gpu_uuid}/inventories")["inventories"]
    assert inv["VGPU"]["reserved"] == inv["VGPU"]["total"] == 4
    assert s.held(s.inst(1))[gpu] == {"VGPU": 1}  # nothing taken from under the instance
    assert s.cycle().nodes[0].allocations_written == []  # and the audit leaves it so
    s.driver.unsubscribe(s.tracker.handle_event)
    s.driver.destroy(s.inst(1))
    s.cycle()
    assert s.uuid(gpu) == gpu_uuid  # vdi-2 still holds one
    s.driver.destroy(s.inst(2))
    assert s.cycle().nodes[0].allocations_removed == [s.inst(2)]
    outcome = s.cycle()  # the first cycle that finds the provider unused removes it
    assert outcome.nodes[0].retained == []
    assert not s.report.get_provider_tree_and_ensure_root(n).exists(gpu)
    resp = requests.get(f"{s.base}/resource_providers/{gpu_uuid}", headers=HEADERS, timeout=10)
    assert resp.status_code == 404


def test_foreign_child_provider_is_never_changed_or_deleted(setup):
    s = setup
    assert s.cycle(startup=True).ok
    body = {"name": f"{s.nodename}:ovs-agent", "parent_provider_uuid": s.uuid(s.nodename)}
    resp = requests.post(f"{s.base}/resource_providers", json=body, headers=HEADERS, timeout=10)
    foreign = resp.json()["uuid"]
    requests.put(
        f"{s.base}/resource_providers/{foreign}/inventories",
        json={
            "resource_provider_generation": 0,
            "inventories": {"NET_BW_EGR_KILOBIT_PER_SEC": {"total": 10_000_000}},
        },
        headers=HEADERS,
        timeout=10,
    ).raise_for_status()
    before = http_get(s.base, f"/resource_providers/{foreign}")
    for _ in range(2):
        assert s.cycle().ok
    after = http_get(s.base, f"/resource_providers/{foreign}")
    assert after["generation"] == before["generation"]
    traits = http_get(s.base, f"/resource_providers/{foreign}/traits")["traits"]
    assert traits == []


def test_capacity_check_uses_current_usage(setup):
    """A claim that fits the inventory but not what is left after the other instances."""
    s = setup
    assert s.cycle(startup=True).ok
    cell0 = s.uuid(f"{s.nodename}_NUMA0")
    inv = http_get(s.base, f"/resource_providers/{cell0}/inventories")["inventories"]
    capacity = inv["MEMORY_MB"]["total"] - inv["MEMORY_MB"]["reserved"]
    used = http_get(s.base, f"/resource_providers/{cell0}/usages")["usages"]["MEMORY_MB"]
    assert used == 3 * 8192
    fits = Instance(
        str(uuidlib.uuid4()), PROJECT, USER, Flavor(1, capacity - used), (), False, (0,)
    )
    s.driver.spawn(s.nodename, fits)
    one_more = replace(fits, uuid=str(uuidlib.uuid4()), flavor=Flavor(1, 1))
    with pytest.raises(CapacityExceeded) as err:
        s.driver.spawn(s.nodename, one_more)
    assert (err.value.resource_class, err.value.used, err.value.capacity) == (
        "MEMORY_MB",
        capacity,
        capacity,
    )


def test_startup_cycle_reshapes_and_a_later_cycle_refuses_to(tmp_path, embedded):
    """NUMA modelling turned on: ReshapeNeeded outside start-up, a reshape at start-up."""
    from agent.model.exceptions import ReshapeNeeded

    flat = Setup(tmp_path, embedded, numa={"model_in_placement": False})
    assert flat.cycle(startup=True).ok
    n = flat.nodename
    assert flat.held(flat.inst(4))[n] == {"VCPU": 8, "MEMORY_MB": 32768, "DISK_GB": 180}
    conf = make_conf(
        tmp_path,
        numa={"model_in_placement": True},
        devices={"enabled_mdev_types": ["nvidia-35", "nvidia-36"]},
    )
    driver = FakeDriver(conf, tmp_path / "host.yaml")
    tracker = ResourceTracker(conf, driver, flat.report, flat.state)
    with pytest.raises(ReshapeNeeded):
        tracker.update_available_resource(startup=False)
    outcome = tracker.update_available_resource(startup=True)
    assert outcome.ok and outcome.nodes[0].sync.reshaped
    assert flat.held(flat.inst(4)) == {
        f"{n}_NUMA1": {"VCPU": 8, "MEMORY_MB": 32768},
        n: {"DISK_GB": 180},
        f"{n}_pci_0000_86_00_0": {"CUSTOM_PCI_8086_0A54": 1},
    }
    assert flat.held(flat.inst(3))[f"{n}_NUMA0"] == {"PCPU": 4, "MEMORY_MB": 8192}
    assert tracker.update_available_resource(startup=False).nodes[0].allocations_written == []


def test_shared_storage_disk_goes_to_the_sharing_provider(tmp_path, embedded):
    """DISK_GB on shared storage: against the provider sharing it by aggregate.

    Instances that already hold their allocation move their disk to the
    sharing provider found later only when the operator asks for drift to be
    rewritten (``rewrite_differing_allocations``); new ones go there anyway.
    """
    s = Setup(tmp_path, embedded, compute={"rewrite_differing_allocations": True})
    s.host.set("shared_storage", True).write(s.host_path)
    s.driver.reload()
    assert s.cycle(startup=True).ok
    root = s.uuid(s.nodename)
    assert "DISK_GB" not in s.held(s.inst(4)).get(s.nodename, {})  # no sharing provider yet
    agg = str(uuidlib.uuid4())
    resp = requests.post(
        f"{s.base}/resource_providers", json={"name": unique("nfs")}, headers=HEADERS, timeout=10
    )
    nfs = resp.json()["uuid"]
    for path, body in (
        (
            "inventories",
            {"resource_provider_generation": 0, "inventories": {"DISK_GB": {"total": 10_000}}},
        ),
        ("traits", {"resource_provider_generation": 1, "traits": ["MISC_SHARES_VIA_AGGREGATE"]}),
        ("aggregates", {"resource_provider_generation": 2, "aggregates": [agg]}),
    ):
        r = requests.put(
            f"{s.base}/resource_providers/{nfs}/{path}", json=body, headers=HEADERS, timeout=10
        )
        assert r.status_code == 200, r.text
    gen = http_get(s.base, f"/resource_providers/{root}")["generation"]
    r = requests.put(
        f"{s.base}/resource_providers/{root}/aggregates",
        json={"resource_provider_generation": gen, "aggregates": [agg]},
        headers=HEADERS,
        timeout=10,
    )
    assert r.status_code == 200, r.text
    outcome = s.cycle()
    assert sorted(outcome.nodes[0].allocations_written) == [s.inst(i) for i in (1, 2, 3, 4)]
    held = s.held(s.inst(4))
    assert held[http_get(s.base, f"/resource_providers/{nfs}")["name"]] == {"DISK_GB": 180}
    assert "DISK_GB" not in held.get(s.nodename, {})
    s.cycle()
    assert s.cycle().requests == 1 + 2 + 1  # the sharing provider is asked for at each lookup
    nfs_name = http_get(s.base, f"/resource_providers/{nfs}")["name"]
    new = Instance(str(uuidlib.uuid4()), PROJECT, USER, Flavor(1, 512, root_gb=7))
    s.driver.spawn(s.nodename, new)  # the claim puts its disk on the sharing provider
    assert s.held(new.uuid)[nfs_name] == {"DISK_GB": 7}
    assert s.cycle().nodes[0].allocations_written == []
    s.driver.destroy(new.uuid)  # and giving it back clears it there too
    assert s.held(new.uuid) == {}
    s.driver.unsubscribe(s.tracker.handle_event)
    s.driver.destroy(s.inst(4))  # gone behind the agent's back
    assert s.cycle().nodes[0].allocations_removed == [s.inst(4)]
    assert s.held(s.inst(4)) == {}


def spy_calls(driver: FakeDriver, *names: str) -> dict[str, list[str]]:
    """Wrap the driver's methods ``names``: each call's nodename is recorded, by method."""
    calls: dict[str, list[str]] = {name: [] for name in names}
    for name in names:
        method = getattr(driver, name)

        def spy(nodename, *args, _method=method, _seen=calls[name], **kwargs):
            _seen.append(nodename)
            return _method(nodename, *args, **kwargs)

        setattr(driver, name, spy)
    return calls


def test_one_listing_and_one_discovery_per_node_per_cycle(tmp_path, embedded):
    """A cycle lists each node's instances once and discovers its hardware once (#12),
    on a steady host and on one where hardware and instances changed."""
    s = Setup(tmp_path, embedded, nodes=2)
    assert s.cycle(startup=True).ok
    assert s.cycle().ok  # re-reads what the start-up writes moved

    calls = spy_calls(s.driver, "list_instances", "get_host_resources")
    assert s.cycle().ok
    assert {name: sorted(seen) for name, seen in calls.items()} == {
        "list_instances": sorted(s.nodenames),
        "get_host_resources": sorted(s.nodenames),
    }

    n = s.nodename
    # Changes behind the tracker's back: the cycle finds them.
    s.driver.unsubscribe(s.tracker.handle_event)
    s.driver.update_host(n, memory_mb=s.driver.get_host_resources(n).memory_mb - 1024)
    s.driver.remove_device(n, "0000:5e:00.0")  # a GPU whose vGPUs are in use: retained
    s.driver.destroy(s.inst(4))
    for seen in calls.values():
        seen.clear()
    outcome = s.cycle()
    assert outcome.ok, outcome.summary()
    node = outcome.nodes[0]
    assert node.sync.inventories and node.retained == [f"{n}_pci_0000_5e_00_0"]
    assert node.allocations_removed == [s.inst(4)]
    assert {name: sorted(seen) for name, seen in calls.items()} == {
        "list_instances": sorted(s.nodenames),
        "get_host_resources": sorted(s.nodenames),
    }


def test_a_resource_class_named_like_the_mdev_types_trait_creates_both(tmp_path, embedded):
    """``[mdev_nvidia-N] mdev_class = CUSTOM_NVIDIA_N`` beside the type's trait (issue 32, 4).

    The class and the trait share a name; Placement keeps them apart, so the agent must
    create both (on the old code the class's ``PUT /resource_classes`` counted for the trait
    too: ``PUT .../traits`` answered 400 "No such trait" every cycle). The type's number is
    the test's own: the session's Placement must not hold the trait already.
    """
    s = Setup(tmp_path, embedded, numa={"model_in_placement": False})
    type_id = f"nvidia-{uuidlib.uuid4().int % 10**12}"
    name = "CUSTOM_" + type_id.upper().replace("-", "_")
    gpu = s.host.node()["gpus"][0]
    for item in (*gpu["mdev_types"], *gpu["mdevs"]):
        key = "id" if "id" in item else "type"
        item[key] = type_id if item[key] == "nvidia-35" else item[key]
    s.host.write(s.host_path)
    conf_file = tmp_path / "agent.conf"
    conf_file.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\n"
        f"[devices]\nenabled_mdev_types = {type_id}\n"
        f"[mdev_{type_id}]\ndevice_addresses = {gpu['address']}\nmdev_class = {name}\n"
    )
    conf = agent_config.load([str(conf_file)])
    s.driver = FakeDriver(conf, s.host_path)
    s.tracker = ResourceTracker(conf, s.driver, s.report, s.state, clock=lambda: s.now)
    for startup in (True, False):
        outcome = s.cycle(startup=startup)
        assert outcome.ok, outcome.summary()
    gpu_name = f"{s.nodename}_pci_0000_5e_00_0"
    rp = s.uuid(gpu_name)
    traits = http_get(s.base, f"/resource_providers/{rp}/traits")["traits"]
    inventories = http_get(s.base, f"/resource_providers/{rp}/inventories")["inventories"]
    assert name in traits
    assert set(inventories) == {name}
    assert s.held(s.inst(1))[gpu_name] == {name: 1}
