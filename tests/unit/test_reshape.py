"""Reshape detection and the allocation rewrite (agent/shape/reshape.py), on in-memory trees.

Spec: reshape-provider-tree.txt; rules for consumers: docs/reshape.md.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from agent.conf import config as agent_config
from agent.model.allocations import ConsumerAllocations
from agent.model.exceptions import ConfigError, ReshapeFailed, ReshapeNeeded
from agent.model.provider_tree import ProviderTree
from agent.shape.adapter import DriverAdapter, adapt
from agent.shape.layout import _rename_classes, apply_layout, desired_providers
from agent.shape.policy import LayoutPolicy, policy_from_conf
from agent.shape.reshape import ClassMove, find_moves, reshape_allocations
from drivers.base import ComputeDriver
from drivers.host import HostDriver
from drivers.records import (
    Flavor,
    Gpu,
    HostResources,
    Instance,
    Mdev,
    MdevType,
    NumaCell,
    PciDevice,
)
from tests.helpers.conf import make_conf
from tests.helpers.sysfs_fixtures import make_conf as host_conf

ROOT = "9b0c2d4e-6f8a-4b1c-9d2e-3f4a5b6c7d8e"
SHARING = "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"
M1, M2, M3 = (f"0c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5{i}" for i in range(3))
GPU_A, GPU_B = "cn_pci_0000_5e_00_0", "cn_pci_0000_af_00_0"

HOST = HostResources(
    nodename="cn",
    vcpus=16,
    pcpus=0,
    memory_mb=32768,
    disk_gb=500,
    numa_cells=(
        NumaCell(0, vcpus=8, pcpus=0, memory_mb=16384),
        NumaCell(1, vcpus=8, pcpus=0, memory_mb=16384),
    ),
    gpus=(
        Gpu(
            "0000:5e:00.0",
            {"nvidia-35": MdevType("nvidia-35", "GRID", 2)},
            (Mdev(M1, "nvidia-35", "0000:5e:00.0"), Mdev(M2, "nvidia-35", "0000:5e:00.0")),
            numa_node=0,
        ),
        Gpu(
            "0000:af:00.0",
            {"nvidia-35": MdevType("nvidia-35", "GRID", 3)},
            (Mdev(M3, "nvidia-35", "0000:af:00.0"),),
            numa_node=1,
        ),
    ),
)
FLAT = LayoutPolicy(reserved_host_memory_mb=0, enabled_mdev_types=("nvidia-35",))
NUMA = replace(FLAT, model_numa=True)


def inst(n: int, **kw) -> Instance:
    fields = dict(
        uuid=f"00000000-0000-4000-8000-{n:012d}",
        project_id="p",
        user_id="u",
        flavor=Flavor(vcpus=2, memory_mb=2048, root_gb=10),
    )
    fields.update(kw)
    return Instance(**fields)


def tree_for(policy: LayoutPolicy, host: HostResources = HOST) -> ProviderTree:
    tree = ProviderTree()
    tree.new_root(host.nodename, ROOT)
    apply_layout(tree, host, policy)
    return tree


def old_vgpu_tree() -> ProviderTree:
    """Nova's old shape: VGPU (4 + 4) on the compute node, no GPU providers."""
    tree = tree_for(replace(FLAT, enabled_mdev_types=()))
    inv = dict(tree.data("cn").inventory)
    inv["VGPU"] = {"total": 8, "max_unit": 8}
    tree.update_inventory("cn", inv)
    return tree


def record(per_rp: dict[str, dict[str, int]], gen: int = 1) -> dict:
    """A GET /allocations/{consumer} body."""
    return {
        "allocations": {rp: {"generation": 3, "resources": dict(r)} for rp, r in per_rp.items()},
        "project_id": "p",
        "user_id": "u",
        "consumer_generation": gen,
        "consumer_type": "INSTANCE",
    }


def typed(expected: dict) -> dict[str, ConsumerAllocations]:
    """What a driver's expected_allocations returns, from GET /allocations-shaped records."""
    return {c: ConsumerAllocations.from_placement(rec) for c, rec in expected.items()}


def amounts(allocations: dict) -> dict[str, dict[str, dict[str, int]]]:
    return {
        c: {rp: a["resources"] for rp, a in rec["allocations"].items()}
        for c, rec in allocations.items()
    }


def totals(allocations: dict) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for c, rec in allocations.items():
        for a in rec["allocations"].values():
            for rc, n in a["resources"].items():
                out.setdefault(c, {})[rc] = out.get(c, {}).get(rc, 0) + n
    return out


class Driver(ComputeDriver):
    """A driver over fixed records, to exercise the adapter's update_provider_tree."""

    def __init__(self, conf, host: HostResources, instances: list[Instance], policy) -> None:
        super().__init__(conf)
        self.policy = policy
        self.host = host
        self.instances = instances

    def get_nodenames(self) -> list[str]:
        return [self.host.nodename]

    def get_host_resources(self, nodename: str) -> HostResources:
        return self.host

    def list_instances(self, nodename: str) -> list[Instance]:
        return list(self.instances)


# -- detection -------------------------------------------------------------------


def test_vgpu_on_the_root_moves_to_the_gpu_providers():
    held = old_vgpu_tree()
    new = held.copy()
    apply_layout(new, HOST, FLAT)
    (move,) = find_moves(held, new, "cn")
    assert move.resource_class == "VGPU"
    assert move.sources == ((ROOT, "VGPU"),)
    assert {new.data(u).name for u in move.targets} == {GPU_A, GPU_B}


def test_numa_on_moves_cpu_and_memory_and_off_moves_them_back():
    flat = tree_for(FLAT)
    numa = flat.copy()
    apply_layout(numa, HOST, NUMA)
    on = find_moves(flat, numa, "cn")
    assert [m.resource_class for m in on] == ["MEMORY_MB", "VCPU"]
    assert all(m.sources == ((ROOT, m.resource_class),) for m in on)
    assert {numa.data(u).name for u in on[0].targets} == {"cn_NUMA0", "cn_NUMA1"}
    back = numa.copy()
    apply_layout(back, HOST, FLAT)
    off = find_moves(numa, back, "cn")
    assert [m.resource_class for m in off] == ["MEMORY_MB", "VCPU"]
    assert all(m.targets == (ROOT,) for m in off)
    # the GPU providers are re-parented, keeping their UUID: VGPU does not move
    assert "VGPU" not in {m.resource_class for m in on + off}


def test_rename_moves_the_class_on_the_same_provider():
    held = tree_for(FLAT)
    inv = dict(held.data(GPU_A).inventory)
    inv["CUSTOM_OLD_VGPU"] = inv.pop("VGPU")
    held.update_inventory(GPU_A, inv)
    new = held.copy()
    apply_layout(new, HOST, FLAT)
    gpu_a = held.data(GPU_A).uuid
    (move,) = find_moves(held, new, "cn", {"CUSTOM_OLD_VGPU": "VGPU"})
    assert (gpu_a, "CUSTOM_OLD_VGPU") in move.sources
    assert gpu_a in move.targets
    # without the rename configured, it is an ordinary inventory change
    assert find_moves(held, new, "cn") == []


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda h: h, id="nothing changed"),
        pytest.param(lambda h: replace(h, disk_gb=900), id="a total changed"),
        pytest.param(lambda h: replace(h, shared_storage=True), id="disk to shared storage"),
        pytest.param(lambda h: replace(h, gpus=h.gpus[:1]), id="a GPU unplugged"),
        # GPU B replaced by GPU C: one provider gone, a new one created
        pytest.param(
            lambda h: replace(h, gpus=(h.gpus[0], replace(h.gpus[1], address="0000:d8:00.0"))),
            id="a GPU replaced",
        ),
    ],
)
def test_ordinary_changes_are_not_reshapes(change):
    held = tree_for(FLAT)
    new = held.copy()
    apply_layout(new, change(HOST), FLAT)
    assert find_moves(held, new, "cn") == []


def test_a_tree_placement_does_not_hold_yet_needs_no_reshape():
    held = ProviderTree()
    held.new_root("cn", ROOT)
    new = held.copy()
    apply_layout(new, HOST, NUMA)
    assert find_moves(held, new, "cn") == []


# -- the allocation rewrite --------------------------------------------------------


def test_known_consumers_follow_the_driver_unknown_ones_the_most_free_provider():
    tree = tree_for(FLAT)
    a, b = tree.data(GPU_A).uuid, tree.data(GPU_B).uuid
    move = ClassMove("VGPU", ((ROOT, "VGPU"),), (a, b))
    allocations = {
        "i1": record({ROOT: {"VCPU": 2, "VGPU": 1}, SHARING: {"DISK_GB": 10}}),
        "i2": record({ROOT: {"VCPU": 2, "VGPU": 1}}),
        "i3": record({ROOT: {"VCPU": 2, "VGPU": 1}}),
        "migration": record({ROOT: {"VCPU": 2, "VGPU": 2}}),
        "no-vgpu": record({ROOT: {"VCPU": 4}}),
    }
    before = copy.deepcopy(allocations)
    expected = {
        "i1": {"allocations": {a: {"resources": {"VGPU": 1}}}},
        "i2": {"allocations": {a: {"resources": {"VGPU": 1}}}},
        "i3": {"allocations": {b: {"resources": {"VGPU": 1}}}},
        # i4 moved off this host: its consumer holds nothing here, its migration record
        # (same project and user) its share; its domain's two mdevs are on GPU A
        "i4": {"allocations": {a: {"resources": {"VGPU": 2}}}, "project_id": "p", "user_id": "u"},
    }
    how = reshape_allocations(allocations, [move], tree, typed(expected))
    got = amounts(allocations)
    assert got["i1"] == {ROOT: {"VCPU": 2}, a: {"VGPU": 1}, SHARING: {"DISK_GB": 10}}
    assert got["i3"] == {ROOT: {"VCPU": 2}, b: {"VGPU": 1}}
    # the record's vGPUs follow the source domain's mdevs (A), not the most free GPU (B)
    assert got["migration"] == {ROOT: {"VCPU": 2}, a: {"VGPU": 2}}
    assert allocations["no-vgpu"] == before["no-vgpu"]  # untouched, generations too
    assert how == {"i1": "driver", "i2": "driver", "i3": "driver", "migration": "driver"}
    assert totals(allocations) == totals(before)


def test_a_vgpu_no_listed_domain_explains_refuses_the_reshape():
    """As nova's reshape (``_get_assigned_mdevs_for_reshape``): another owner's consumer."""
    tree = tree_for(FLAT)
    a, b = tree.data(GPU_A).uuid, tree.data(GPU_B).uuid
    move = ClassMove("VGPU", ((ROOT, "VGPU"),), (a, b))
    allocations = {"stray": record({ROOT: {"VCPU": 2, "VGPU": 2}})}
    expected = {"i4": {"allocations": {a: {"resources": {"VGPU": 2}}}, "project_id": "q"}}
    with pytest.raises(ReshapeFailed, match="consumer stray holds VGPU 2"):
        reshape_allocations(allocations, [move], tree, typed(expected))


def test_a_driver_answer_with_another_amount_is_not_trusted():
    tree = tree_for(FLAT)
    a, b = tree.data(GPU_A).uuid, tree.data(GPU_B).uuid
    move = ClassMove("VGPU", ((ROOT, "VGPU"),), (a, b))
    allocations = {"i1": record({ROOT: {"VGPU": 2}})}
    expected = {"i1": {"allocations": {a: {"resources": {"VGPU": 1}}}}}
    how = reshape_allocations(allocations, [move], tree, typed(expected))
    # conserved, by the rule: both GPUs have 4 free, the tie goes to the first in the tree
    assert amounts(allocations)["i1"] == {a: {"VGPU": 2}}
    assert how == {"i1": "rule"}


def test_unknown_consumer_keeps_what_stays_valid_and_spreads_when_nothing_fits_whole():
    tree = tree_for(FLAT)
    a, b = tree.data(GPU_A).uuid, tree.data(GPU_B).uuid
    # a mixed state: 1 VGPU already on GPU A, 6 on the root
    move = ClassMove("VGPU", ((ROOT, "VGPU"), (a, "VGPU")), (a, b))
    allocations = {"c": record({ROOT: {"VGPU": 6}, a: {"VGPU": 1}})}
    # an instance whose held amount is not the driver's answer: placed by the rule
    reshape_allocations(allocations, [move], tree, typed({"c": {"allocations": {}}}))
    # A keeps its 1 (3 free left), B has 4 free: 4 to B, then 2 to A
    assert amounts(allocations)["c"] == {a: {"VGPU": 3}, b: {"VGPU": 4}}


def test_what_does_not_fit_anywhere_is_kept_so_placement_refuses_it():
    tree = tree_for(FLAT)
    a, b = tree.data(GPU_A).uuid, tree.data(GPU_B).uuid
    move = ClassMove("VGPU", ((ROOT, "VGPU"),), (a, b))
    allocations = {"c": record({ROOT: {"VGPU": 10}})}
    reshape_allocations(allocations, [move], tree, typed({"c": {"allocations": {}}}))
    assert totals(allocations) == {"c": {"VGPU": 10}}  # over capacity, never dropped


def test_numa_unknown_consumer_goes_whole_to_one_cell():
    flat = tree_for(FLAT)
    tree = flat.copy()
    apply_layout(tree, HOST, NUMA)
    moves = find_moves(flat, tree, "cn")
    n0, n1 = tree.data("cn_NUMA0").uuid, tree.data("cn_NUMA1").uuid
    allocations = {
        "pinned": record({ROOT: {"VCPU": 4, "MEMORY_MB": 8192}}),
        "unknown": record({ROOT: {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}}),
    }
    expected = {
        "pinned": {
            "allocations": {
                n0: {"resources": {"VCPU": 2, "MEMORY_MB": 4096}},
                n1: {"resources": {"VCPU": 2, "MEMORY_MB": 4096}},
            }
        },
    }
    # more memory used on cell 1 by a consumer already there: the unknown one
    # should go to cell 0 (equal free VCPU, more free memory)
    allocations["other"] = record({n1: {"MEMORY_MB": 1024}})
    reshape_allocations(allocations, moves, tree, typed(expected))
    got = amounts(allocations)
    assert got["pinned"] == {n0: {"VCPU": 2, "MEMORY_MB": 4096}, n1: {"VCPU": 2, "MEMORY_MB": 4096}}
    assert got["unknown"] == {ROOT: {"DISK_GB": 20}, n0: {"VCPU": 2, "MEMORY_MB": 2048}}


# -- the driver hook ---------------------------------------------------------------


def test_update_provider_tree_raises_reshape_needed_and_leaves_the_tree_alone(tmp_path):
    instances = [inst(1, mdevs=(M1,)), inst(2, mdevs=(M3,))]
    driver = Driver(make_conf(tmp_path), HOST, instances, FLAT)
    tree = old_vgpu_tree()
    before = tree.copy()
    with pytest.raises(ReshapeNeeded) as err:
        DriverAdapter(driver, driver.policy).update_provider_tree(tree, "cn")
    assert "VGPU: cn -> " in str(err.value) and GPU_A in str(err.value)
    assert [p for p in tree.all_data()] == [p for p in before.all_data()]

    allocations = {
        inst(1).uuid: record({ROOT: {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 10, "VGPU": 1}}),
        inst(2).uuid: record({ROOT: {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 10, "VGPU": 1}}),
    }
    placed = DriverAdapter(driver, driver.policy).update_provider_tree(
        tree, "cn", allocations=allocations
    )
    assert "VGPU" not in tree.data("cn").inventory
    got = amounts(allocations)
    assert got[inst(1).uuid][tree.data(GPU_A).uuid] == {"VGPU": 1}
    assert got[inst(2).uuid][tree.data(GPU_B).uuid] == {"VGPU": 1}
    assert placed == {inst(1).uuid: "driver", inst(2).uuid: "driver"}
    # and the next ordinary cycle is quiet
    DriverAdapter(driver, driver.policy).update_provider_tree(tree, "cn")


def test_renames_reach_the_layout_from_the_configuration(tmp_path):
    conf = make_conf(
        tmp_path,
        compute={"resource_class_renames": ["CUSTOM_PCI_8086_0A54:PCI_DEVICE"]},
    )
    policy = policy_from_conf(conf)
    assert policy.resource_class_renames == (("CUSTOM_PCI_8086_0A54", "PCI_DEVICE"),)
    host = replace(HOST, gpus=(), pci_devices=(PciDevice("0000:86:00.0", "8086", "0a54"),))
    tree = tree_for(policy, host)
    assert dict(tree.data("cn_pci_0000_86_00_0").inventory).keys() == {"PCI_DEVICE"}


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (["CUSTOM_A"], "expected OLD:NEW"),
        (["VGPU:CUSTOM_B"], "VGPU is not a CUSTOM_"),
        (["CUSTOM_A:NOT_A_CLASS"], "neither a standard resource class"),
        (["CUSTOM_A:VGPU", "CUSTOM_A:PCI_DEVICE"], "renamed twice"),
        (["CUSTOM_A:CUSTOM_B", "CUSTOM_B:VGPU"], "both renamed and a new name"),
    ],
)
def test_bad_renames_are_refused_naming_the_option(value, named):
    with pytest.raises(ConfigError) as err:
        agent_config.load([], {"compute": {"resource_class_renames": value}})
    assert "[compute] resource_class_renames" in str(err.value) and named in str(err.value)


def test_renaming_onto_a_class_the_provider_already_reports_is_refused():
    policy = replace(FLAT, resource_class_renames=(("CUSTOM_X", "VCPU"),))
    host = replace(HOST, numa_cells=())
    specs = desired_providers(host, policy)
    specs[0].inventory["CUSTOM_X"] = specs[0].inventory["VCPU"]
    with pytest.raises(ConfigError) as err:
        _rename_classes(specs, {"CUSTOM_X": "VCPU"})
    assert "already reports VCPU" in str(err.value)


def test_the_host_driver_inherits_the_reshape(tmp_path):
    """Every driver gets detection and rewrite from ComputeDriver: the host driver on a
    sysfs fixture (two GPUs offering nvidia-35; it reports no instances, so every
    consumer is placed by the rule)."""
    driver = HostDriver(
        host_conf(tmp_path, "gpu-host", devices={"enabled_mdev_types": ["nvidia-35"]})
    )
    tree = ProviderTree()
    tree.new_root("cn1", ROOT)
    flat = HostDriver(host_conf(tmp_path, "gpu-host"))  # no vGPU types: no GPU providers
    adapt(flat, flat.conf).update_provider_tree(tree, "cn1")
    inv = dict(tree.data("cn1").inventory)
    inv["VGPU"] = {"total": 32, "max_unit": 32}
    tree.update_inventory("cn1", inv)
    with pytest.raises(ReshapeNeeded):
        adapt(driver, driver.conf).update_provider_tree(tree, "cn1")
    allocations = {"c1": record({ROOT: {"VCPU": 1, "VGPU": 3}}), "c2": record({ROOT: {"VGPU": 2}})}
    # no domain listed: a vGPU held is explained by none, refused as nova's reshape does
    with pytest.raises(ReshapeFailed, match="consumer c1 holds VGPU 3"):
        adapt(driver, driver.conf).update_provider_tree(tree, "cn1", allocations=allocations)
    allocations = {"c1": record({ROOT: {"VCPU": 3}})}
    adapt(driver, driver.conf).update_provider_tree(tree, "cn1", allocations=allocations)
    assert amounts(allocations) == {"c1": {ROOT: {"VCPU": 3}}}
