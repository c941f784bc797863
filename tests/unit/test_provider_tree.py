"""ProviderTree semantics (DESIGN.md contract)."""

from __future__ import annotations

import threading
import uuid

import pytest

from agent.model.exceptions import InvalidInventory, ProviderConflict, ProviderNotFound
from agent.model.provider_tree import ProviderTree, child_uuid, default_root_uuid
from agent.model.resources import Inventory

ROOT = "2c4a7f5e-1b2d-4e6f-8a9b-0c1d2e3f4a5b"


@pytest.fixture
def tree() -> ProviderTree:
    t = ProviderTree()
    t.new_root("cn1", ROOT, generation=3)
    t.new_child("cn1_NUMA0", "cn1")
    t.new_child("cn1_NUMA1", ROOT)
    t.new_child("cn1_pci_0000_3b_00_0", "cn1_NUMA0")
    return t


def test_child_uuid_is_uuid5_of_root_and_name(tree):
    expected = str(uuid.uuid5(uuid.UUID(ROOT), "cn1_NUMA0"))
    assert tree.data("cn1_NUMA0").uuid == expected == child_uuid(ROOT, "cn1_NUMA0")


def test_child_uuid_is_stable_across_trees():
    a, b = ProviderTree(), ProviderTree()
    for t in (a, b):
        t.new_root("cn1", ROOT)
        t.new_child("gpu", "cn1")
    assert a.data("gpu").uuid == b.data("gpu").uuid


def test_default_root_uuid_is_stable_and_per_name():
    assert default_root_uuid("cn1") == default_root_uuid("cn1")
    assert default_root_uuid("cn1") != default_root_uuid("cn2")
    uuid.UUID(default_root_uuid("cn1"))


def test_lookup_by_name_and_uuid(tree):
    gpu = tree.data("cn1_pci_0000_3b_00_0")
    assert tree.data(gpu.uuid) is gpu
    assert gpu.parent_uuid == tree.data("cn1_NUMA0").uuid
    assert gpu.root_uuid == ROOT
    assert tree.exists("cn1_NUMA1") and tree.exists(gpu.uuid)
    assert not tree.exists("nope")
    with pytest.raises(ProviderNotFound) as err:
        tree.data("nope")
    assert "nope" in str(err.value)


def test_root_data(tree):
    root = tree.data("cn1")
    assert root.parent_uuid is None
    assert root.root_uuid == ROOT
    assert root.generation == 3


def test_uuids_parents_before_children(tree):
    uuids = tree.get_provider_uuids()
    names = [tree.data(u).name for u in uuids]
    assert names == ["cn1", "cn1_NUMA0", "cn1_pci_0000_3b_00_0", "cn1_NUMA1"]
    sub = [tree.data(u).name for u in tree.get_provider_uuids("cn1_NUMA0")]
    assert sub == ["cn1_NUMA0", "cn1_pci_0000_3b_00_0"]
    whole = tree.get_provider_uuids_in_tree("cn1_pci_0000_3b_00_0")
    assert whole == uuids


def test_names_and_uuids_are_unique(tree):
    with pytest.raises(ProviderConflict):
        tree.new_child("cn1_NUMA0", "cn1_NUMA1")
    with pytest.raises(ProviderConflict):
        tree.new_root("other", ROOT)
    with pytest.raises(ProviderConflict):
        tree.new_root("cn1", str(uuid.uuid4()))
    with pytest.raises(ProviderNotFound):
        tree.new_child("x", "missing-parent")
    with pytest.raises(ValueError):
        tree.new_root("bad", "not-a-uuid")


def test_remove_takes_the_subtree(tree):
    gpu_uuid = tree.data("cn1_pci_0000_3b_00_0").uuid
    tree.remove("cn1_NUMA0")
    assert not tree.exists("cn1_NUMA0")
    assert not tree.exists(gpu_uuid)
    assert tree.children("cn1") == [tree.data("cn1_NUMA1").uuid]
    assert len(tree) == 2
    tree.remove(ROOT)
    assert len(tree) == 0 and tree.root_uuids == []
    with pytest.raises(ProviderNotFound):
        tree.remove("cn1")


def test_snapshot_is_immutable_and_cached(tree):
    tree.update_inventory("cn1", {"VCPU": {"total": 8}})
    snap = tree.data("cn1")
    assert tree.data("cn1") is snap  # no copy when nothing changed
    with pytest.raises(TypeError):
        snap.inventory["PCPU"] = Inventory(total=1)  # type: ignore[index]
    with pytest.raises(AttributeError):
        snap.name = "x"  # type: ignore[misc]
    tree.update_inventory("cn1", {"VCPU": {"total": 16}})
    assert snap.inventory["VCPU"].total == 8  # the old snapshot kept its values
    assert tree.data("cn1").inventory["VCPU"].total == 16


def test_update_inventory_reports_change_and_generation(tree):
    inv = {"VCPU": {"total": 8, "allocation_ratio": 4.0}, "MEMORY_MB": {"total": 4096}}
    assert tree.has_inventory_changed("cn1", inv)
    assert tree.update_inventory("cn1", inv) is True
    assert not tree.has_inventory_changed("cn1", inv)
    assert tree.update_inventory("cn1", inv) is False
    assert tree.data("cn1").generation == 3  # generations move only when Placement says
    assert tree.update_inventory("cn1", inv, generation=4) is False
    assert tree.data("cn1").generation == 4
    # a class left out is removed, as PUT .../inventories does
    assert tree.update_inventory("cn1", {"VCPU": inv["VCPU"]}) is True
    assert set(tree.data("cn1").inventory) == {"VCPU"}


def test_bad_inventory_changes_nothing(tree):
    tree.update_inventory("cn1", {"VCPU": {"total": 8}})
    with pytest.raises(InvalidInventory):
        tree.update_inventory("cn1", {"VCPU": {"total": 8}, "PCPU": {"total": 0}})
    assert set(tree.data("cn1").inventory) == {"VCPU"}


def test_traits(tree):
    assert tree.update_traits("cn1", ["HW_CPU_X86_AVX2", "COMPUTE_ARCH_X86_64"]) is True
    assert tree.has_traits("cn1", ["HW_CPU_X86_AVX2"])
    assert not tree.have_traits_changed("cn1", {"COMPUTE_ARCH_X86_64", "HW_CPU_X86_AVX2"})
    assert tree.add_traits("cn1", "CUSTOM_GOLD") is True
    assert tree.add_traits("cn1", "CUSTOM_GOLD") is False
    assert tree.remove_traits("cn1", "CUSTOM_GOLD", "NOT_THERE") is True
    assert tree.data("cn1").traits == {"HW_CPU_X86_AVX2", "COMPUTE_ARCH_X86_64"}
    tree.update_traits("cn1", [], generation=9)
    assert tree.data("cn1").traits == frozenset()
    assert tree.data("cn1").generation == 9


def test_aggregates(tree):
    agg1, agg2 = str(uuid.uuid4()), str(uuid.uuid4())
    assert tree.update_aggregates("cn1", [agg1]) is True
    assert tree.in_aggregates("cn1", [agg1])
    assert tree.add_aggregates("cn1", agg2) is True
    assert tree.have_aggregates_changed("cn1", [agg1])
    assert tree.remove_aggregates("cn1", agg1) is True
    assert tree.data("cn1").aggregates == {agg2}


def test_populate_from_iterable_any_order_and_refresh():
    t = ProviderTree()
    child = str(uuid.uuid4())
    grandchild = str(uuid.uuid4())
    t.populate_from_iterable(
        [
            {"uuid": grandchild, "name": "gc", "generation": 1, "parent_provider_uuid": child},
            {"uuid": child, "name": "c", "generation": 2, "parent_provider_uuid": ROOT},
            {
                "uuid": ROOT,
                "name": "cn1",
                "generation": 5,
                "parent_provider_uuid": None,
                "inventories": {"VCPU": {"total": 4}},
                "traits": ["COMPUTE_ARCH_X86_64"],
                "aggregates": [],
            },
        ]
    )
    assert [t.data(u).name for u in t.get_provider_uuids()] == ["cn1", "c", "gc"]
    assert t.data("cn1").inventory["VCPU"].total == 4
    # a second read refreshes names and generations in place
    t.populate_from_iterable(
        [{"uuid": child, "name": "c-renamed", "generation": 7, "parent_provider_uuid": ROOT}]
    )
    assert t.data(child).name == "c-renamed" and t.data(child).generation == 7
    assert not t.exists("c")


def test_populate_from_iterable_missing_parent():
    t = ProviderTree()
    orphan_parent = str(uuid.uuid4())
    with pytest.raises(ProviderNotFound) as err:
        t.populate_from_iterable(
            [{"uuid": str(uuid.uuid4()), "name": "x", "parent_provider_uuid": orphan_parent}]
        )
    assert orphan_parent in str(err.value)


def test_copy_is_independent(tree):
    tree.update_inventory("cn1", {"VCPU": {"total": 8}})
    other = tree.copy()
    other.update_inventory("cn1", {"VCPU": {"total": 1}})
    other.remove("cn1_NUMA1")
    assert tree.data("cn1").inventory["VCPU"].total == 8
    assert tree.exists("cn1_NUMA1")
    assert [tree.data(u).name for u in tree.get_provider_uuids()] == [
        other.data(u).name for u in other.get_provider_uuids()
    ] + ["cn1_NUMA1"]


def test_ten_thousand_providers_by_name_and_uuid():
    t = ProviderTree()
    t.new_root("big", ROOT)
    for cell in range(10):
        t.new_child(f"big_NUMA{cell}", "big")
    for i in range(10_000 - 11):
        t.new_child(f"big_dev{i}", f"big_NUMA{i % 10}")
    assert len(t) == 10_000
    uuids = t.get_provider_uuids()
    assert len(uuids) == len(set(uuids)) == 10_000
    for i in range(0, 10_000 - 11, 997):
        name = f"big_dev{i}"
        p = t.data(name)
        assert p.uuid == child_uuid(ROOT, name)
        assert t.data(p.uuid).name == name
        assert t.data(p.parent_uuid).name == f"big_NUMA{i % 10}"
    # parents always before children
    position = {u: n for n, u in enumerate(uuids)}
    for p in t.all_data():
        if p.parent_uuid:
            assert position[p.parent_uuid] < position[p.uuid]


def test_concurrent_writers_keep_the_indexes_consistent():
    t = ProviderTree()
    t.new_root("cn", ROOT)

    def worker(k: int) -> None:
        for i in range(200):
            name = f"cn_w{k}_{i}"
            t.new_child(name, "cn")
            t.update_inventory(name, {"VGPU": {"total": 1 + i % 4}})
            if i % 2:
                t.remove(name)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(t) == 1 + 4 * 100
    assert len(t.get_provider_uuids()) == len(t)


def test_a_name_that_is_another_providers_uuid_is_refused():
    tree = ProviderTree()
    root = tree.new_root("cn", "9b0c2d4e-6f8a-4b1c-9d2e-3f4a5b6c7d8e")
    child = tree.new_child("cn_NUMA0", "cn")
    with pytest.raises(ProviderConflict, match="is the UUID of resource provider 'cn_NUMA0'"):
        tree.new_child(child, "cn")
    with pytest.raises(ProviderConflict, match="is the UUID of resource provider 'cn'"):
        tree.new_root(root, "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b")
    name_as_uuid = "0c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
    tree.new_child(name_as_uuid, "cn", uuid="1c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f")
    with pytest.raises(ProviderConflict, match="is the name of another resource provider"):
        tree.new_child("gpu", "cn", uuid=name_as_uuid)
    assert tree.data(name_as_uuid).name == name_as_uuid  # lookups stay unambiguous
