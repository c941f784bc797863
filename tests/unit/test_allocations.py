"""Allocations per resource-providers-allocations.txt (NUMA rule: agent.shape.planning)."""

from __future__ import annotations

import logging
from dataclasses import replace

from agent.cli.render import discover_record
from agent.model.provider_tree import ProviderTree
from agent.shape.instance_amounts import disk_gb
from agent.shape.layout import apply_layout
from agent.shape.planning import plan_allocations
from agent.shape.policy import LayoutPolicy
from drivers.records import (
    Flavor,
    Gpu,
    GuestCellShare,
    HostResources,
    Instance,
    Mdev,
    MdevType,
    NumaCell,
    PciDevice,
    SriovPF,
    vf_addresses,
)

ROOT = "9b0c2d4e-6f8a-4b1c-9d2e-3f4a5b6c7d8e"
SHARING = "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"
MDEV = "0c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
VFS = vf_addresses("0000:3b:00.0", 8, 16, 1)

HOST = HostResources(
    nodename="cn",
    vcpus=16,
    pcpus=8,
    memory_mb=65536,
    disk_gb=500,
    numa_cells=(
        NumaCell(0, vcpus=8, pcpus=4, memory_mb=32768),
        NumaCell(1, vcpus=8, pcpus=4, memory_mb=32768),
    ),
    sriov_pfs=(SriovPF("0000:3b:00.0", total_vfs=8, vf_addresses=VFS, numa_node=1),),
    gpus=(
        Gpu(
            "0000:af:00.0",
            {"nvidia-35": MdevType("nvidia-35", "GRID", 3)},
            (Mdev(MDEV, "nvidia-35", "0000:af:00.0"),),
            numa_node=0,
        ),
    ),
    pci_devices=(PciDevice("0000:86:00.0", "8086", "0a54"),),
)
POLICY = LayoutPolicy(reserved_host_memory_mb=0, enabled_mdev_types=("nvidia-35",))


def inst(n: int, **kw) -> Instance:
    fields = dict(
        uuid=f"00000000-0000-4000-8000-{n:012d}",
        project_id="p",
        user_id="u",
        flavor=Flavor(vcpus=2, memory_mb=4096, root_gb=20),
    )
    fields.update(kw)
    return Instance(**fields)


def laid_out(host=HOST, policy=POLICY) -> ProviderTree:
    tree = ProviderTree()
    tree.new_root(host.nodename, ROOT)
    apply_layout(tree, host, policy)
    return tree


def plan(instances, host=HOST, policy=POLICY, sharing=None, held=None):
    tree = laid_out(host, policy)
    out = {
        c: discover_record(rec)
        for c, rec in plan_allocations(instances, host, tree, policy, sharing, held).items()
    }
    by_name = {
        c: {
            tree.data(rp).name if tree.exists(rp) else rp: a["resources"]
            for rp, a in rec["allocations"].items()
        }
        for c, rec in out.items()
    }
    return out, by_name


def test_record_shape_is_placements():
    out, _ = plan([inst(1)])
    rec = out[inst(1).uuid]
    assert rec == {
        "allocations": {ROOT: {"resources": {"DISK_GB": 20, "MEMORY_MB": 4096, "VCPU": 2}}},
        "project_id": "p",
        "user_id": "u",
        "consumer_type": "INSTANCE",
    }


def test_disk_is_root_ephemeral_and_swap_rounded_up():
    assert disk_gb(inst(1, flavor=Flavor(1, 512, root_gb=10, ephemeral_gb=5, swap_mb=1025))) == 17
    assert disk_gb(inst(1, flavor=Flavor(1, 512, root_gb=10, swap_mb=1024))) == 11
    bfv = inst(1, flavor=Flavor(1, 512, root_gb=10, ephemeral_gb=1), boot_from_volume=True)
    assert disk_gb(bfv) == 1


def test_boot_from_volume_with_no_other_disk_has_no_disk_allocation():
    _, by_name = plan([inst(1, boot_from_volume=True)])
    assert by_name[inst(1).uuid] == {"cn": {"MEMORY_MB": 4096, "VCPU": 2}}


def test_pinned_instance_takes_pcpu():
    _, by_name = plan([inst(1, pinned=True)])
    assert by_name[inst(1).uuid]["cn"]["PCPU"] == 2
    assert "VCPU" not in by_name[inst(1).uuid]["cn"]


def test_shared_storage_goes_to_the_sharing_provider():
    shared = replace(HOST, shared_storage=True)
    _, by_name = plan([inst(1)], host=shared, sharing=SHARING)
    assert by_name[inst(1).uuid][SHARING] == {"DISK_GB": 20}
    assert "DISK_GB" not in by_name[inst(1).uuid]["cn"]


def test_shared_storage_without_sharing_provider_warns(caplog):
    shared = replace(HOST, shared_storage=True)
    with caplog.at_level(logging.WARNING):
        _, by_name = plan([inst(1)], host=shared)
    assert by_name[inst(1).uuid] == {"cn": {"MEMORY_MB": 4096, "VCPU": 2}}
    assert "no sharing provider" in caplog.text


def test_devices_land_on_their_providers():
    i = inst(1, pci_devices=(VFS[0], VFS[5], "0000:86:00.0"), mdevs=(MDEV,))
    _, by_name = plan([i])
    assert by_name[i.uuid] == {
        "cn": {"DISK_GB": 20, "MEMORY_MB": 4096, "VCPU": 2},
        "cn_pci_0000_3b_00_0": {"SRIOV_NET_VF": 2},
        "cn_pci_0000_86_00_0": {"CUSTOM_PCI_8086_0A54": 1},
        "cn_pci_0000_af_00_0": {"VGPU": 1},
    }


def test_unknown_device_is_warned_and_skipped(caplog):
    i = inst(1, pci_devices=("0000:99:00.0",), mdevs=("11111111-2222-4333-8444-555555555555",))
    with caplog.at_level(logging.WARNING):
        _, by_name = plan([i])
    assert set(by_name[i.uuid]) == {"cn"}
    assert "0000:99:00.0" in caplog.text and "11111111-2222" in caplog.text


def test_numa_pinned_instance_is_split_over_its_cells():
    numa = replace(POLICY, model_numa=True)
    i = inst(1, flavor=Flavor(vcpus=5, memory_mb=3001), numa_cells=(0, 1))
    _, by_name = plan([i], policy=numa)
    assert by_name[i.uuid] == {
        "cn_NUMA0": {"MEMORY_MB": 1501, "VCPU": 3},
        "cn_NUMA1": {"MEMORY_MB": 1500, "VCPU": 2},
    }


def test_numa_unpinned_instances_go_to_the_freest_cell_in_uuid_order():
    numa = replace(POLICY, model_numa=True)
    pinned = inst(9, flavor=Flavor(vcpus=8, memory_mb=1024), numa_cells=(0,))
    a = inst(1, flavor=Flavor(vcpus=4, memory_mb=1024))
    b = inst(2, flavor=Flavor(vcpus=4, memory_mb=1024))
    c = inst(3, flavor=Flavor(vcpus=30, memory_mb=1024))
    # listed in a scrambled order: the result must not depend on it
    _, by_name = plan([c, b, pinned, a], policy=numa)
    # cell 0 capacity 32 VCPU (ratio 4) - 8 pinned = 24 free; cell 1: 32 free
    assert set(by_name[a.uuid]) == {"cn_NUMA1"}  # 32 > 24
    assert set(by_name[b.uuid]) == {"cn_NUMA1"}  # 28 > 24
    assert set(by_name[c.uuid]) == {"cn_NUMA0"}  # 24 > 24-? no: 24 vs 24 -> lower id
    _, again = plan([a, b, c, pinned], policy=numa)
    assert again == by_name


def test_instance_pinned_to_missing_cell_falls_back(caplog):
    numa = replace(POLICY, model_numa=True)
    i = inst(1, numa_cells=(7,))
    with caplog.at_level(logging.WARNING):
        _, by_name = plan([i], policy=numa)
    assert "cn_NUMA0" in by_name[i.uuid] or "cn_NUMA1" in by_name[i.uuid]
    assert "NUMA cells [7]" in caplog.text


def test_instance_using_nothing_has_no_entry():
    out, _ = plan([inst(1, flavor=Flavor(vcpus=0, memory_mb=0))])
    assert out == {}


def test_boot_from_volume_on_shared_storage_puts_ephemeral_and_swap_on_the_share():
    """docs/tree-shape.md: the compute node has no DISK_GB with shared storage."""
    shared = replace(HOST, shared_storage=True)
    bfv = inst(
        1,
        flavor=Flavor(vcpus=2, memory_mb=1024, root_gb=20, ephemeral_gb=5, swap_mb=1024),
        boot_from_volume=True,
    )
    _, by_name = plan([bfv], host=shared, sharing=SHARING)
    assert by_name[bfv.uuid][SHARING] == {"DISK_GB": 6}  # root 0 + 5 + 1
    assert "DISK_GB" not in by_name[bfv.uuid]["cn"]
    only_root = inst(2, flavor=Flavor(vcpus=1, memory_mb=512, root_gb=20), boot_from_volume=True)
    _, by_name = plan([only_root], host=shared, sharing=SHARING)
    assert SHARING not in by_name[only_root.uuid]
    assert by_name[only_root.uuid] == {"cn": {"MEMORY_MB": 512, "VCPU": 1}}


def numa_held(tree: ProviderTree, where: dict[str, dict[str, dict[str, int]]]):
    """``{consumer: {cell name: amounts}}`` -> the audit's held view by provider UUID."""
    return {
        c: {tree.data(name).uuid: dict(a) for name, a in per.items()} for c, per in where.items()
    }


def test_numa_unpinned_instance_stays_where_placement_holds_it():
    numa = replace(POLICY, model_numa=True)
    tree = laid_out(policy=numa)
    a = inst(1, flavor=Flavor(vcpus=4, memory_mb=1024))
    newcomer = inst(0, flavor=Flavor(vcpus=4, memory_mb=1024))  # sorts first
    # By the rule alone `a` goes to cell 0 (a tie, lower id); Placement holds it on cell 1.
    held = numa_held(tree, {a.uuid: {"cn_NUMA1": {"VCPU": 4, "MEMORY_MB": 1024}}})
    _, by_name = plan([newcomer, a], policy=numa, held=held)
    assert by_name[a.uuid] == {"cn_NUMA1": {"MEMORY_MB": 1024, "VCPU": 4}}
    assert set(by_name[newcomer.uuid]) == {"cn_NUMA0"}  # the freer cell now


def test_numa_held_allocation_that_no_longer_fits_or_differs_is_placed_by_the_rule():
    numa = replace(POLICY, model_numa=True)
    tree = laid_out(policy=numa)
    big = inst(1, flavor=Flavor(vcpus=40, memory_mb=1024))  # cell capacity is 32 VCPU
    resized = inst(2, flavor=Flavor(vcpus=2, memory_mb=1024))  # held with 4 VCPU
    held = numa_held(
        tree,
        {
            big.uuid: {"cn_NUMA1": {"VCPU": 40, "MEMORY_MB": 1024}},
            resized.uuid: {"cn_NUMA1": {"VCPU": 4, "MEMORY_MB": 1024}},
        },
    )
    _, by_name = plan([big, resized], policy=numa, held=held)
    assert by_name[big.uuid]["cn_NUMA0"] == {"MEMORY_MB": 1024, "VCPU": 40}
    assert by_name[resized.uuid]["cn_NUMA1"] == {"MEMORY_MB": 1024, "VCPU": 2}


def test_numa_consumers_that_are_not_instances_take_room_on_their_cell():
    numa = replace(POLICY, model_numa=True)
    tree = laid_out(policy=numa)
    a = inst(1, flavor=Flavor(vcpus=4, memory_mb=1024))
    migration = {"cn_NUMA0": {"VCPU": 30, "MEMORY_MB": 1024}}
    held = numa_held(tree, {"migration-uuid": migration})
    _, by_name = plan([a], policy=numa, held=held)
    assert set(by_name[a.uuid]) == {"cn_NUMA1"}  # 32 - 30 free on cell 0


def test_pci_in_placement_devices_and_vfs_land_on_novas_providers():
    """[pci] report_in_placement: the whole device and the VFs of a PF without physnet."""
    pf = replace(HOST.sriov_pfs[0], vf_vendor_id="8086", vf_product_id="154c")
    host = replace(HOST, sriov_pfs=(pf,))
    policy = replace(POLICY, pci_in_placement=True)
    _, got = plan([inst(1, pci_devices=("0000:86:00.0", VFS[0], VFS[1]))], host=host, policy=policy)
    held = got[inst(1).uuid]
    assert held["cn_0000:86:00.0"] == {"CUSTOM_PCI_8086_0A54": 1}
    assert held["cn_0000:3B:00.0"] == {"CUSTOM_PCI_8086_154C": 2}
    # With a physnet the PF keeps SRIOV_NET_VF (neutron ports), named as before.
    with_physnet = replace(host, sriov_pfs=(replace(pf, physnet="physnet1"),))
    _, got = plan([inst(1, pci_devices=(VFS[0],))], host=with_physnet, policy=policy)
    assert got[inst(1).uuid]["cn_pci_0000_3b_00_0"] == {"SRIOV_NET_VF": 1}


def test_vgpus_land_as_the_mdev_class_of_their_type():
    policy = replace(
        POLICY,
        mdev_addresses=(("nvidia-35", ("0000:af:00.0",)),),
        mdev_classes=(("nvidia-35", "CUSTOM_M60"),),
    )
    _, got = plan([inst(1, mdevs=(MDEV,))], policy=policy)
    assert got[inst(1).uuid]["cn_pci_0000_af_00_0"] == {"CUSTOM_M60": 1}


def test_mixed_and_isolated_emulator_threads_on_a_flat_tree():
    mixed = inst(1, flavor=Flavor(4, 4096, 20), dedicated_vcpus=3, emulator_isolated=True)
    pinned = inst(2, pinned=True, emulator_isolated=True)
    # isolate on a shared guest adds nothing (nova honours it with dedicated CPUs only).
    shared = inst(3, emulator_isolated=True)
    _, by_name = plan([mixed, pinned, shared])
    assert by_name[mixed.uuid]["cn"] == {"DISK_GB": 20, "MEMORY_MB": 4096, "PCPU": 4, "VCPU": 1}
    assert by_name[pinned.uuid]["cn"] == {"DISK_GB": 20, "MEMORY_MB": 4096, "PCPU": 3}
    assert by_name[shared.uuid]["cn"] == {"DISK_GB": 20, "MEMORY_MB": 4096, "VCPU": 2}


def test_mixed_instance_on_numa_cells():
    numa = replace(POLICY, model_numa=True)
    mixed = inst(1, flavor=Flavor(4, 4096, 20), dedicated_vcpus=2, emulator_isolated=True)
    split = inst(2, flavor=Flavor(4, 4096, 20), dedicated_vcpus=2, numa_cells=(0, 1))
    _, by_name = plan([mixed, split], policy=numa)
    cells = {rp: r for rp, r in by_name[mixed.uuid].items() if "_NUMA" in rp}
    # Whole on one cell (the cell with the most free PCPU), both CPU classes together.
    assert list(cells.values()) == [{"MEMORY_MB": 4096, "PCPU": 3, "VCPU": 2}]
    assert by_name[split.uuid]["cn_NUMA0"] == {"MEMORY_MB": 2048, "PCPU": 1, "VCPU": 1}
    assert by_name[split.uuid]["cn_NUMA1"] == {"MEMORY_MB": 2048, "PCPU": 1, "VCPU": 1}
    # Placement holding it on the other cell keeps it there (sticky), both classes included.
    (chosen,) = cells
    other = "cn_NUMA1" if chosen == "cn_NUMA0" else "cn_NUMA0"
    held = {mixed.uuid: {laid_out(policy=numa).data(other).uuid: cells[chosen]}}
    _, again = plan([mixed, split], policy=numa, held=held)
    assert again[mixed.uuid][other] == cells[chosen] and chosen not in again[mixed.uuid]


def test_a_guest_over_two_cells_is_planned_as_its_own_cells_lie():
    """The guest's cells (the libvirt driver: <cpu><numa>, memnodes, pins), not an even
    split; the isolated emulator threads' PCPU on guest cell 0's host cell (nova's
    numa_fit_instance_to_host); cells that do not add up fall back to the even split."""
    numa = replace(POLICY, model_numa=True)
    flavor = Flavor(4, 2048, 20)
    shared = inst(
        1,
        flavor=flavor,
        numa_cells=(0, 1),
        guest_cells=(GuestCellShare(1, 1, 0, 512), GuestCellShare(0, 3, 0, 1536)),
    )
    mixed = inst(
        2,
        flavor=flavor,
        numa_cells=(0, 1),
        dedicated_vcpus=2,
        emulator_isolated=True,
        guest_cells=(GuestCellShare(0, 1, 0, 512), GuestCellShare(1, 3, 2, 1536)),
    )
    wrong = inst(
        3,
        flavor=flavor,
        numa_cells=(0, 1),
        guest_cells=(GuestCellShare(0, 1, 0, 512), GuestCellShare(1, 1, 0, 512)),
    )
    _, by_name = plan([shared, mixed, wrong], policy=numa)
    assert by_name[shared.uuid]["cn_NUMA1"] == {"MEMORY_MB": 512, "VCPU": 1}
    assert by_name[shared.uuid]["cn_NUMA0"] == {"MEMORY_MB": 1536, "VCPU": 3}
    assert by_name[mixed.uuid]["cn_NUMA0"] == {"MEMORY_MB": 512, "PCPU": 1, "VCPU": 1}
    assert by_name[mixed.uuid]["cn_NUMA1"] == {"MEMORY_MB": 1536, "PCPU": 2, "VCPU": 1}
    assert by_name[wrong.uuid]["cn_NUMA0"] == {"MEMORY_MB": 1024, "VCPU": 2}
    assert by_name[wrong.uuid]["cn_NUMA1"] == {"MEMORY_MB": 1024, "VCPU": 2}
