"""diff_trees: what the report client will write."""

from __future__ import annotations

from agent.model.provider_tree import ProviderTree
from agent.model.tree_diff import diff_trees

ROOT = "2c4a7f5e-1b2d-4e6f-8a9b-0c1d2e3f4a5b"


def base() -> ProviderTree:
    t = ProviderTree()
    t.new_root("cn", ROOT)
    t.update_inventory("cn", {"VCPU": {"total": 8}})
    t.new_child("cn_NUMA0", "cn")
    t.new_child("cn_gpu", "cn_NUMA0")
    t.update_inventory("cn_gpu", {"VGPU": {"total": 4}})
    t.update_traits("cn_gpu", ["CUSTOM_NVIDIA_35"])
    return t


def test_identical_trees_have_no_diff():
    old = base()
    new = old.copy()
    new.update_generation("cn", 42)  # generations alone are not a change
    assert not diff_trees(old, new)


def test_each_kind_of_change():
    old = base()
    new = old.copy()
    new.update_inventory("cn", {"VCPU": {"total": 16}})
    new.update_traits("cn_gpu", ["CUSTOM_NVIDIA_36"])
    new.update_aggregates("cn", ["0b7e4c2a-8d1f-4e3b-9a6c-5d2e1f0a9b8c"])
    new.remove("cn_NUMA0")
    new.new_child("cn_NUMA1", "cn")
    new.new_child("cn_pf", "cn_NUMA1")
    new.update_inventory("cn_pf", {"SRIOV_NET_VF": {"total": 8}})
    d = diff_trees(old, new)
    name = {u: n for t in (old, new) for u, n in ((p.uuid, p.name) for p in t.all_data())}
    assert [name[u] for u in d.created] == ["cn_NUMA1", "cn_pf"]
    assert [name[u] for u in d.removed] == ["cn_gpu", "cn_NUMA0"]  # children first
    assert [name[u] for u in d.inventory] == ["cn", "cn_pf"]
    assert d.traits == []  # the gpu with changed traits went away
    assert [name[u] for u in d.aggregates] == ["cn"]


def test_reparent_and_rename():
    old = base()
    new = old.copy()
    gpu = new.data("cn_gpu")
    new.remove("cn_gpu")
    new.new_child("cn_gpu", "cn", uuid=gpu.uuid)
    new.populate_from_iterable(
        [{"uuid": new.data("cn_NUMA0").uuid, "name": "cn_NUMA_0", "parent_provider_uuid": ROOT}]
    )
    d = diff_trees(old, new)
    assert d.reparented == [gpu.uuid]
    assert d.renamed == [new.data("cn_NUMA_0").uuid]
    assert d.inventory == [gpu.uuid]  # re-created empty
