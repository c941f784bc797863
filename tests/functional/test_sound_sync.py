"""Sound sync against real Placement: every out-of-band change healed, nothing foreign touched.

Each test is one fault the agent had (issue "Sound sync"): a ``DELETE
/allocations`` that moves no generation, a claim that replaced the whole
consumer, a flush of several roots, allocations that churned between NUMA
cells. The host is examples/big-host.yaml with NUMA modelled (two cells),
under a nodename of the test's own.
"""

from __future__ import annotations

import uuid as uuidlib

import pytest

from agent.model.provider_tree import ProviderTree
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.records import Flavor, Instance
from tests.helpers.names import unique
from tests.helpers.placement_http import call, http_get
from tests.helpers.tracker import PROJECT, USER, Setup


@pytest.fixture
def setup(tmp_path, embedded) -> Setup:
    return Setup(tmp_path, embedded)


def generation(base: str, uuid: str) -> int:
    return http_get(base, f"/resource_providers/{uuid}")["generation"]


def cpu_cell_of(s: Setup, consumer: str) -> str:
    (cell,) = [n for n in s.held(consumer) if "_NUMA" in n]
    return cell


def test_delete_after_warm_cycles_moves_no_generation_and_is_healed_next_cycle(setup):
    s = setup
    assert s.cycle(startup=True).ok
    for _ in range(3):
        assert s.cycle().ok  # warm: the audit knows every generation
    before = s.held(s.inst(1))
    root, cell0 = s.uuid(s.nodename), s.uuid(f"{s.nodename}_NUMA0")
    gens = (generation(s.base, root), generation(s.base, cell0))
    call(s.base, "DELETE", f"/allocations/{s.inst(1)}", expect=204)
    # The Placement fact the audit is built on: nothing tells a generation reader.
    assert (generation(s.base, root), generation(s.base, cell0)) == gens
    assert s.held(s.inst(1)) == {}
    outcome = s.cycle()
    assert outcome.nodes[0].allocations_written == [s.inst(1)]
    assert s.held(s.inst(1)) == before
    assert s.cycle().nodes[0].allocations_written == []


def test_delete_while_the_agent_is_down_is_healed_by_the_restarted_agent(setup, embedded):
    s = setup
    assert s.cycle(startup=True).ok
    assert s.cycle().ok
    before = s.held(s.inst(2))
    call(s.base, "DELETE", f"/allocations/{s.inst(2)}", expect=204)
    report = ReportClient(embedded.client(), s.state)
    restarted = ResourceTracker(s.conf, s.driver, report, s.state)
    outcome = restarted.update_available_resource(startup=True)
    assert outcome.nodes[0].allocations_written == [s.inst(2)]
    assert s.held(s.inst(2)) == before


def test_a_part_removed_from_a_device_provider_is_healed(setup):
    """A PUT that drops the VGPU moves the GPU's generation not at all, the cell's does."""
    s = setup
    assert s.cycle(startup=True).ok
    assert s.cycle().ok
    current = http_get(s.base, f"/allocations/{s.inst(1)}")
    gpu = s.uuid(f"{s.nodename}_pci_0000_5e_00_0")
    gpu_gen = generation(s.base, gpu)
    body = {
        "allocations": {
            rp: {"resources": a["resources"]}
            for rp, a in current["allocations"].items()
            if rp != gpu
        },
        "project_id": current["project_id"],
        "user_id": current["user_id"],
        "consumer_generation": current["consumer_generation"],
        "consumer_type": "INSTANCE",
    }
    call(s.base, "PUT", f"/allocations/{s.inst(1)}", body, expect=204)
    assert generation(s.base, gpu) == gpu_gen
    outcome = s.cycle()
    assert outcome.nodes[0].allocations_written == [s.inst(1)]
    assert s.held(s.inst(1))[f"{s.nodename}_pci_0000_5e_00_0"] == {"VGPU": 1}


def foreign_providers(s: Setup) -> tuple[str, str]:
    """Another host's compute node and a network agent's bandwidth child of ours.

    Returns:
        (source host UUID, bandwidth provider UUID).
    """
    src = call(s.base, "POST", "/resource_providers", {"name": unique("src-host")})["uuid"]
    call(
        s.base,
        "PUT",
        f"/resource_providers/{src}/inventories",
        {
            "resource_provider_generation": 0,
            "inventories": {"VCPU": {"total": 16}, "MEMORY_MB": {"total": 65536}},
        },
    )
    bw = call(
        s.base,
        "POST",
        "/resource_providers",
        {"name": unique(f"{s.nodename}:eth0"), "parent_provider_uuid": s.uuid(s.nodename)},
    )["uuid"]
    call(
        s.base,
        "PUT",
        f"/resource_providers/{bw}/inventories",
        {
            "resource_provider_generation": 0,
            "inventories": {"NET_BW_EGR_KILOBIT_PER_SEC": {"total": 10_000_000}},
        },
    )
    return src, bw


def test_claim_keeps_the_source_host_and_the_bandwidth_parts(setup):
    s = setup
    assert s.cycle(startup=True).ok
    src, bw = foreign_providers(s)
    new = Instance(str(uuidlib.uuid4()), PROJECT, USER, Flavor(2, 2048, root_gb=10))
    foreign = {src: {"VCPU": 2, "MEMORY_MB": 2048}, bw: {"NET_BW_EGR_KILOBIT_PER_SEC": 1000}}
    call(
        s.base,
        "PUT",
        f"/allocations/{new.uuid}",
        {
            "allocations": {rp: {"resources": r} for rp, r in foreign.items()},
            "project_id": PROJECT,
            "user_id": USER,
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
        expect=204,
    )
    s.driver.spawn(s.nodename, new)  # the claim of a migration's destination
    held = http_get(s.base, f"/allocations/{new.uuid}")["allocations"]
    assert held[src]["resources"] == foreign[src]
    assert held[bw]["resources"] == foreign[bw]
    mine = s.held(new.uuid)
    assert mine[s.nodename] == {"DISK_GB": 10}
    assert sum(a.get("VCPU", 0) for n, a in mine.items() if "_NUMA" in n) == 2
    # The audit agrees with the claim and, writing nothing, keeps both parts.
    assert s.cycle().nodes[0].allocations_written == []
    # Healing a deleted allocation writes our part only: the rest is Placement's to keep.
    call(s.base, "DELETE", f"/allocations/{new.uuid}", expect=204)
    assert new.uuid in s.cycle().nodes[0].allocations_written
    assert set(http_get(s.base, f"/allocations/{new.uuid}")["allocations"]) & {src, bw} == set()
    # Destroying it gives back this host's part only.
    s.driver.destroy(new.uuid)
    assert s.held(new.uuid) == {}


def rewrite_drift(s: Setup) -> None:
    """The operator turns ``[compute] rewrite_differing_allocations`` on (a new tracker)."""
    s.conf.set_override("rewrite_differing_allocations", True, group="compute")
    s.tracker = ResourceTracker(s.conf, s.driver, s.report, s.state, clock=lambda: s.now)


def test_audit_heal_keeps_a_foreign_part_of_an_instance(setup):
    s = setup
    assert s.cycle(startup=True).ok
    _, bw = foreign_providers(s)
    current = http_get(s.base, f"/allocations/{s.inst(4)}")
    body = {
        "allocations": {
            **{rp: {"resources": a["resources"]} for rp, a in current["allocations"].items()},
            bw: {"resources": {"NET_BW_EGR_KILOBIT_PER_SEC": 500}},
        },
        "project_id": current["project_id"],
        "user_id": current["user_id"],
        "consumer_generation": current["consumer_generation"],
        "consumer_type": "INSTANCE",
    }
    # Another writer also doubles its memory on our compute node's cell: ours to fix.
    cell = s.uuid(cpu_cell_of(s, s.inst(4)))
    body["allocations"][cell]["resources"]["MEMORY_MB"] *= 2
    call(s.base, "PUT", f"/allocations/{s.inst(4)}", body, expect=204)
    assert s.cycle().nodes[0].drift == [s.inst(4)]  # by default reported, not rewritten
    rewrite_drift(s)
    assert s.cycle().nodes[0].allocations_written == [s.inst(4)]
    after = http_get(s.base, f"/allocations/{s.inst(4)}")["allocations"]
    assert after[bw]["resources"] == {"NET_BW_EGR_KILOBIT_PER_SEC": 500}
    assert after[cell]["resources"]["MEMORY_MB"] == 32768


def test_a_raised_ratio_a_smaller_new_uuid_and_a_restart_move_no_running_instance(setup, embedded):
    s = setup
    assert s.cycle(startup=True).ok
    assert s.cycle().ok
    unpinned = s.inst(4)  # storage-1 has no NUMA affinity
    home = cpu_cell_of(s, unpinned)
    other = f"{s.nodename}_NUMA{1 - int(home[-1])}"
    before = s.held(unpinned)
    # The operator makes the other cell far emptier: the rule alone would move it there.
    other_uuid = s.uuid(other)
    inv = http_get(s.base, f"/resource_providers/{other_uuid}/inventories")
    inv["inventories"]["VCPU"]["allocation_ratio"] = 16.0
    inv["inventories"]["MEMORY_MB"]["allocation_ratio"] = 4.0
    call(s.base, "PUT", f"/resource_providers/{other_uuid}/inventories", inv)
    outcome = s.cycle()
    assert outcome.nodes[0].allocations_written == []
    assert s.held(unpinned) == before
    assert (
        http_get(s.base, f"/resource_providers/{other_uuid}/inventories")["inventories"]["VCPU"][
            "allocation_ratio"
        ]
        == 16.0
    )  # the operator's ratio stays ([DEFAULT] cpu_allocation_ratio is unset)
    # A new instance whose UUID sorts first is placed by the rule, around the others.
    first = Instance("00000000-0000-4000-8000-000000000001", PROJECT, USER, Flavor(2, 1024))
    s.driver.spawn(s.nodename, first)
    assert s.cycle().nodes[0].allocations_written == []
    assert s.held(unpinned) == before
    report = ReportClient(embedded.client(), s.state)
    restarted = ResourceTracker(s.conf, s.driver, report, s.state)
    assert restarted.update_available_resource(startup=True).nodes[0].allocations_written == []
    assert s.held(unpinned) == before
    s.driver.destroy(first.uuid)


def test_an_instance_that_no_longer_fits_its_cell_is_placed_again(setup):
    s = setup
    assert s.cycle(startup=True).ok
    unpinned = s.inst(4)
    home = cpu_cell_of(s, unpinned)
    home_uuid = s.uuid(home)
    inv = http_get(s.base, f"/resource_providers/{home_uuid}/inventories")
    inv["inventories"]["VCPU"]["allocation_ratio"] = 0.1  # 4 VCPUs: too few for its 8
    call(s.base, "PUT", f"/resource_providers/{home_uuid}/inventories", inv)
    assert s.cycle().nodes[0].drift == [unpinned]  # by default reported, not moved
    rewrite_drift(s)
    s.cycle()
    assert cpu_cell_of(s, unpinned) != home


def test_two_roots_in_one_flush_each_created_once(tmp_path, embedded):
    client = embedded.client()
    report = ReportClient(client, StateStore(tmp_path / "state"))
    names = [unique("node-a"), unique("node-b")]
    tree = ProviderTree()
    for name in names:
        root = tree.new_root(name, str(uuidlib.uuid4()))
        tree.update_inventory(root, {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}})
        child = tree.new_child(f"{name}_NUMA0", root)
        tree.update_traits(child, ["HW_NUMA_ROOT"])
    posts = client.counts[("POST", "/resource_providers")]
    result = report.update_from_provider_tree(tree)
    # Each root is created once (while it is listed), each child by the flush.
    assert result.errors == [] and result.created == 2
    assert client.counts[("POST", "/resource_providers")] - posts == 4
    for name in names:
        (held,) = http_get(embedded.url, "/resource_providers", name=name)["resource_providers"]
        assert held["uuid"] == tree.data(name).uuid
        inv = http_get(embedded.url, f"/resource_providers/{held['uuid']}/inventories")
        assert inv["inventories"]["VCPU"]["total"] == 8
        child = http_get(embedded.url, "/resource_providers", name=f"{name}_NUMA0")
        assert child["resource_providers"][0]["parent_provider_uuid"] == held["uuid"]
    again = report.update_from_provider_tree(tree)
    assert (again.created, again.inventories, again.traits) == (0, 0, 0)


class Pool:
    """A shared-storage pool as an operator adds one: a provider of its own sharing DISK_GB
    with the compute node by aggregate (plain HTTP to Placement)."""

    def __init__(self, s: Setup) -> None:
        self.name = unique("nfs-pool")
        self.aggregate = str(uuidlib.uuid4())
        found = call(s.base, "POST", "/resource_providers", {"name": self.name}, expect=200)
        self.uuid = found["uuid"]
        for path, body in (
            ("inventories", {"inventories": {"DISK_GB": {"total": 20_000}}}),
            ("traits", {"traits": ["MISC_SHARES_VIA_AGGREGATE"]}),
            ("aggregates", {"aggregates": [self.aggregate]}),
        ):
            gen = http_get(s.base, f"/resource_providers/{self.uuid}")["generation"]
            body["resource_provider_generation"] = gen
            call(s.base, "PUT", f"/resource_providers/{self.uuid}/{path}", body)
        root = s.uuid(s.nodename)
        gen = http_get(s.base, f"/resource_providers/{root}")["generation"]
        call(
            s.base,
            "PUT",
            f"/resource_providers/{root}/aggregates",
            {"resource_provider_generation": gen, "aggregates": [self.aggregate]},
        )


def on_shared_storage(s: Setup) -> Setup:
    """The setup's host with its instance disks on shared storage."""
    s.host.set("shared_storage", True).write(s.host_path)
    s.driver.reload()
    return s


def test_a_pool_joined_after_start_up_gets_the_disks_it_lacks(tmp_path, embedded):
    """The instances held no DISK_GB (no pool yet): their disks are added there, a
    missing part, nothing held changed; the operator's aggregate on the node stays."""
    s = on_shared_storage(Setup(tmp_path, embedded))
    assert s.cycle(startup=True).ok
    assert "DISK_GB" not in s.held(s.inst(4)).get(s.nodename, {})
    pool = Pool(s)
    outcome = s.cycle()
    assert outcome.ok, outcome.summary()
    assert s.inst(4) in outcome.nodes[0].allocations_written
    assert s.held(s.inst(4))[pool.name] == {"DISK_GB": 180}
    assert "DISK_GB" not in s.held(s.inst(4)).get(s.nodename, {})
    s.cycle()
    steady = s.cycle()
    assert steady.nodes[0].sync.created == 0 and steady.nodes[0].allocations_written == []
    root = s.uuid(s.nodename)
    aggregates = http_get(s.base, f"/resource_providers/{root}/aggregates")["aggregates"]
    assert aggregates == [pool.aggregate]
    # The listing, the two NUMA cells' allocations, and the sharing provider asked for
    # (agent/tracker/sharing.py).
    assert steady.requests == 1 + 2 + 1


def test_deleted_allocation_on_the_sharing_provider_is_healed(tmp_path, embedded):
    """Only the shared part removed: the CPU provider's generation moves, the share is read."""
    s = on_shared_storage(Setup(tmp_path, embedded))
    assert s.cycle(startup=True).ok
    pool = Pool(s)
    s.cycle()
    s.cycle()
    current = http_get(s.base, f"/allocations/{s.inst(4)}")
    body = {
        "allocations": {
            rp: {"resources": a["resources"]}
            for rp, a in current["allocations"].items()
            if rp != pool.uuid
        },
        "project_id": current["project_id"],
        "user_id": current["user_id"],
        "consumer_generation": current["consumer_generation"],
        "consumer_type": "INSTANCE",
    }
    call(s.base, "PUT", f"/allocations/{s.inst(4)}", body, expect=204)
    # The part on the sharing provider is missing, nothing held is changed: healed.
    assert s.cycle().nodes[0].allocations_written == [s.inst(4)]
    assert s.held(s.inst(4))[pool.name] == {"DISK_GB": 180}
