"""The tree's shape: DESIGN.md "Tree shape" and compute-node-inventory.rst."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from agent.model import ownership
from agent.model.exceptions import ConfigError
from agent.model.provider_tree import ProviderTree, child_uuid
from agent.shape.layout import OWNER_TRAIT, apply_layout
from agent.shape.pci import physnet_trait
from agent.shape.policy import LayoutPolicy
from drivers.records import (
    Gpu,
    HostResources,
    Mdev,
    MdevType,
    MemEncryption,
    NumaCell,
    PciDevice,
    SriovPF,
    vf_addresses,
)

ROOT = "9b0c2d4e-6f8a-4b1c-9d2e-3f4a5b6c7d8e"
MDEV = "0c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


def host(**changes) -> HostResources:
    base = dict(
        nodename="cn",
        vcpus=16,
        pcpus=4,
        memory_mb=65536,
        disk_gb=500,
        traits=frozenset({"HW_CPU_X86_AVX2", "COMPUTE_ARCH_X86_64"}),
        numa_cells=(
            NumaCell(0, vcpus=8, pcpus=2, memory_mb=32768),
            NumaCell(1, vcpus=8, pcpus=2, memory_mb=32768),
        ),
        sriov_pfs=(
            SriovPF(
                "0000:3b:00.0",
                total_vfs=8,
                vf_addresses=vf_addresses("0000:3b:00.0", 4, 16, 1),
                numa_node=1,
                physnet="physnet-1",
                traits=frozenset({"HW_NIC_SRIOV"}),
            ),
        ),
        gpus=(
            Gpu(
                "0000:af:00.0",
                mdev_types={
                    "nvidia-35": MdevType("nvidia-35", "GRID M60-2Q", 6),
                    "nvidia-36": MdevType("nvidia-36", "GRID M60-4Q", 2),
                },
                mdevs=(Mdev(MDEV, "nvidia-36", "0000:af:00.0"),),
                numa_node=0,
            ),
        ),
        pci_devices=(PciDevice("0000:86:00.0", "8086", "0a54", numa_node=None),),
    )
    base.update(changes)
    return HostResources(**base)


POLICY = LayoutPolicy(
    reserved_host_cpus=1,
    reserved_host_memory_mb=1024,
    reserved_host_disk_mb=1500,
    enabled_mdev_types=("nvidia-35", "nvidia-36"),
)


def build(h: HostResources, policy: LayoutPolicy = POLICY, tree: ProviderTree | None = None):
    tree = tree or ProviderTree()
    if not tree.exists(h.nodename):
        tree.new_root(h.nodename, ROOT)
    apply_layout(tree, h, policy)
    return tree


def shape(tree: ProviderTree) -> dict[str, tuple[str | None, dict, set]]:
    out = {}
    for p in tree.all_data():
        parent = tree.data(p.parent_uuid).name if p.parent_uuid else None
        inv = {
            rc: (i.total, i.reserved, i.max_unit, i.allocation_ratio)
            for rc, i in p.inventory.items()
        }
        out[p.name] = (parent, inv, set(p.traits) - {OWNER_TRAIT, "COMPUTE_NODE"})
    return out


def test_flat_tree():
    s = shape(build(host()))
    assert s == {
        "cn": (
            None,
            {
                "VCPU": (16, 1, 16, 4.0),
                "PCPU": (4, 0, 4, 1.0),
                "MEMORY_MB": (65536, 1024, 65536, 1.0),
                "DISK_GB": (500, 2, 500, 1.0),  # 1500 MiB reserved -> 2 GiB
            },
            {"HW_CPU_X86_AVX2", "COMPUTE_ARCH_X86_64"},
        ),
        "cn_pci_0000_3b_00_0": (
            "cn",
            {"SRIOV_NET_VF": (4, 0, 4, 1.0)},
            {"HW_NIC_SRIOV", "CUSTOM_PHYSNET_PHYSNET_1"},
        ),
        # the GPU offers the type of its existing mdev: 1 mdev + 2 available
        "cn_pci_0000_af_00_0": ("cn", {"VGPU": (3, 0, 3, 1.0)}, {"CUSTOM_NVIDIA_36"}),
        "cn_pci_0000_86_00_0": ("cn", {"CUSTOM_PCI_8086_0A54": (1, 0, 1, 1.0)}, set()),
    }


def test_child_uuids_derive_from_root():
    t = build(host())
    assert t.data("cn_pci_0000_af_00_0").uuid == child_uuid(ROOT, "cn_pci_0000_af_00_0")


def test_numa_tree_moves_cpu_memory_and_devices_under_cells():
    s = shape(build(host(), replace(POLICY, model_numa=True)))
    assert s["cn"][1] == {"DISK_GB": (500, 2, 500, 1.0)}
    assert s["cn_NUMA0"] == (
        "cn",
        {"VCPU": (8, 1, 8, 4.0), "PCPU": (2, 0, 2, 1.0), "MEMORY_MB": (32768, 1024, 32768, 1.0)},
        {"HW_NUMA_ROOT", "HW_CPU_X86_AVX2"},  # the host's CPU traits too (node_traits)
    )
    assert s["cn_NUMA1"][1]["VCPU"] == (8, 0, 8, 4.0)  # reserved taken from cell 0 first
    assert s["cn_pci_0000_3b_00_0"][0] == "cn_NUMA1"
    assert s["cn_pci_0000_af_00_0"][0] == "cn_NUMA0"
    assert s["cn_pci_0000_86_00_0"][0] == "cn"  # no NUMA node: stays under the root


def test_reserved_spills_over_cells():
    p = replace(POLICY, model_numa=True, reserved_host_cpus=10)
    s = shape(build(host(), p))
    assert s["cn_NUMA0"][1]["VCPU"][1] == 8
    assert s["cn_NUMA1"][1]["VCPU"][1] == 2


def test_toggling_numa_moves_providers_and_back():
    t = build(host())
    gpu_uuid = t.data("cn_pci_0000_af_00_0").uuid
    build(host(), replace(POLICY, model_numa=True), t)
    assert t.data("cn_pci_0000_af_00_0").uuid == gpu_uuid
    assert t.data(t.data(gpu_uuid).parent_uuid).name == "cn_NUMA0"
    build(host(), POLICY, t)
    assert not t.exists("cn_NUMA0")
    assert t.data(gpu_uuid).parent_uuid == ROOT
    assert shape(t) == shape(build(host()))


def test_shared_storage_reports_no_disk():
    s = shape(build(host(shared_storage=True)))
    assert "DISK_GB" not in s["cn"][1]


def test_removed_hardware_removes_its_provider():
    t = build(host())
    build(host(gpus=(), sriov_pfs=()), POLICY, t)
    assert set(shape(t)) == {"cn", "cn_pci_0000_86_00_0"}


def test_gpu_without_enabled_type_or_capacity_is_left_out():
    assert "cn_pci_0000_af_00_0" not in shape(build(host(), LayoutPolicy()))
    empty = Gpu("0000:af:00.0", {"nvidia-35": MdevType("nvidia-35", "x", 0)})
    assert "cn_pci_0000_af_00_0" not in shape(build(host(gpus=(empty,))))


def test_gpu_without_mdevs_takes_first_enabled_type_it_supports():
    gpu = Gpu(
        "0000:af:00.0",
        {"nvidia-36": MdevType("nvidia-36", "x", 2), "nvidia-35": MdevType("nvidia-35", "x", 8)},
    )
    s = shape(build(host(gpus=(gpu,))))
    assert s["cn_pci_0000_af_00_0"][1:] == ({"VGPU": (8, 0, 8, 1.0)}, {"CUSTOM_NVIDIA_35"})


def test_pf_without_vfs_is_left_out():
    pf = SriovPF("0000:3b:00.0", total_vfs=8, vf_addresses=())
    assert "cn_pci_0000_3b_00_0" not in shape(build(host(sriov_pfs=(pf,))))


def test_pci_resource_class_override():
    dev = PciDevice(
        "0000:86:00.0", "10de", "1db4", resource_class="gpu-v100", traits=frozenset({"gold"})
    )
    s = shape(build(host(pci_devices=(dev,))))
    assert s["cn_pci_0000_86_00_0"][1:] == ({"CUSTOM_GPU_V100": (1, 0, 1, 1.0)}, {"CUSTOM_GOLD"})


def test_operator_traits_on_root_are_kept_and_managed_ones_replaced():
    t = build(host())
    t.add_traits("cn", "CUSTOM_GOLD", "HW_CPU_X86_SSE42")
    build(host(), POLICY, t)
    assert t.data("cn").traits == {
        "CUSTOM_GOLD",
        "HW_CPU_X86_AVX2",
        "COMPUTE_ARCH_X86_64",
        "COMPUTE_NODE",
        OWNER_TRAIT,
    }


def test_aggregates_are_never_touched():
    t = build(host())
    agg = str(uuid.uuid4())
    t.update_aggregates("cn", [agg])
    build(host(), POLICY, t)
    assert t.data("cn").aggregates == {agg}


def test_unset_ratio_keeps_placements_value_else_initial():
    t = ProviderTree()
    t.new_root("cn", ROOT)
    t.update_inventory("cn", {"VCPU": {"total": 16, "allocation_ratio": 8.0}})
    build(host(), POLICY, t)
    assert t.data("cn").inventory["VCPU"].allocation_ratio == 8.0  # kept
    assert t.data("cn").inventory["MEMORY_MB"].allocation_ratio == 1.0  # initial
    fixed = replace(POLICY, cpu_allocation_ratio=2.0)
    build(host(), fixed, t)
    assert t.data("cn").inventory["VCPU"].allocation_ratio == 2.0  # configured wins


@pytest.mark.parametrize(
    ("field", "value", "option"),
    [
        ("reserved_host_memory_mb", 70000, "reserved_host_memory_mb"),
        ("reserved_host_cpus", 17, "reserved_host_cpus"),
        ("reserved_host_disk_mb", 600 * 1024, "reserved_host_disk_mb"),
    ],
)
def test_reserved_beyond_total_names_the_option(field, value, option):
    with pytest.raises(ConfigError) as err:
        build(host(), replace(POLICY, **{field: value}))
    assert option in str(err.value)


def test_physnet_trait():
    assert physnet_trait("physnet1") == "CUSTOM_PHYSNET_PHYSNET1"
    assert physnet_trait("prov.net-2") == "CUSTOM_PHYSNET_PROV_NET_2"


def test_every_laid_out_provider_carries_the_owner_trait():
    tree = build(host(), replace(POLICY, model_numa=True))
    assert len(tree) == 6
    assert all(OWNER_TRAIT in p.traits for p in tree.all_data())


def test_foreign_child_is_never_changed_or_removed_nor_its_parent():
    """A network agent's provider under a NUMA cell, and one holding a name we want."""
    numa = replace(POLICY, model_numa=True)
    tree = build(host(), numa)
    bw = str(uuid.uuid4())
    tree.new_child("cn:ovs-agent", "cn_NUMA1", uuid=bw)
    tree.update_inventory("cn:ovs-agent", {"NET_BW_EGR_KILOBIT_PER_SEC": {"total": 10_000}})
    # Someone else's provider under the name of the GPU's, with other inventory.
    gpu = tree.data("cn_pci_0000_af_00_0").uuid
    tree.remove(gpu)
    # (A UUID of its own: the one the agent derives for this name would make it ours.)
    squatter = tree.new_child("cn_pci_0000_af_00_0", "cn_NUMA0", uuid=str(uuid.uuid4()))
    tree.update_inventory("cn_pci_0000_af_00_0", {"CUSTOM_X": {"total": 1}})
    # NUMA off: cells go away, except the one above the foreign provider.
    apply_layout(tree, host(), POLICY)
    assert tree.data(bw).parent_uuid == tree.data("cn_NUMA1").uuid
    assert set(tree.data(bw).inventory) == {"NET_BW_EGR_KILOBIT_PER_SEC"}
    assert OWNER_TRAIT not in tree.data(bw).traits
    assert tree.data("cn_pci_0000_af_00_0").uuid == squatter
    assert set(tree.data(squatter).inventory) == {"CUSTOM_X"}
    assert (
        not tree.exists("cn_NUMA0") or tree.data("cn_NUMA0").uuid == tree.data(squatter).parent_uuid
    )
    # Our own providers did move: the PF is under the compute node now.
    assert tree.data("cn_pci_0000_3b_00_0").parent_uuid == ROOT


def test_a_provider_with_the_derived_uuid_but_no_owner_trait_is_repaired():
    """The agent died between POST /resource_providers and the trait write."""
    tree = build(host(), POLICY)
    gpu = tree.data("cn_pci_0000_af_00_0").uuid
    tree.update_traits(gpu, [])
    tree.update_inventory(gpu, {})
    assert ownership.foreign(tree, "cn", POLICY.owner_trait) == []
    apply_layout(tree, host(), POLICY)
    assert POLICY.owner_trait in tree.data(gpu).traits
    assert "VGPU" in tree.data(gpu).inventory


def test_compute_node_carries_compute_node_and_a_configured_owner_trait():
    tree = build(host(), replace(POLICY, owner_trait="CUSTOM_MY_AGENT"))
    assert {"COMPUTE_NODE", "CUSTOM_MY_AGENT"} <= tree.data("cn").traits
    assert all("CUSTOM_MY_AGENT" in p.traits for p in tree.all_data())
    assert OWNER_TRAIT not in tree.data("cn_pci_0000_86_00_0").traits


def test_status_disabled_and_operator_traits_on_root_are_never_touched():
    t = build(host())
    t.add_traits("cn", "COMPUTE_STATUS_DISABLED", "CUSTOM_GOLD", "COMPUTE_VOLUME_EXTEND")
    build(host(), POLICY, t)
    # A driver that reports no capability trait (host, fake) leaves them alone.
    kept = {"COMPUTE_STATUS_DISABLED", "CUSTOM_GOLD", "COMPUTE_VOLUME_EXTEND"}
    assert kept <= t.data("cn").traits
    # One that does decides them all: one it no longer reports goes (nova's _get_traits).
    libvirt_like = host(traits=host().traits | {"COMPUTE_NET_ATTACH_INTERFACE"})
    build(libvirt_like, POLICY, t)
    assert "COMPUTE_VOLUME_EXTEND" not in t.data("cn").traits
    assert {"COMPUTE_STATUS_DISABLED", "COMPUTE_NET_ATTACH_INTERFACE"} <= t.data("cn").traits


def test_a_tree_of_an_earlier_agent_is_taken_over():
    """Upgrade path: CUSTOM_OWNER_COMPUTE_AGENT is recognised as ours and replaced."""
    t = build(host(), replace(POLICY, owner_trait="CUSTOM_OWNER_COMPUTE_AGENT"))
    uuids = {p.name: p.uuid for p in t.all_data()}
    build(host(), POLICY, t)
    assert {p.name: p.uuid for p in t.all_data()} == uuids
    for p in t.all_data():
        assert OWNER_TRAIT in p.traits and "CUSTOM_OWNER_COMPUTE_AGENT" not in p.traits


def test_other_owners_children_are_left_alone():
    t = build(host())
    cyborg = t.new_child("cn_FPGA_0000:05:00.0", "cn")
    t.update_inventory(cyborg, {"FPGA": {"total": 1}})
    t.update_traits(cyborg, ["OWNER_CYBORG"])
    build(host(), POLICY, t)
    assert t.data(cyborg).traits == {"OWNER_CYBORG"}
    assert set(t.data(cyborg).inventory) == {"FPGA"}


def test_pci_in_placement_shape_is_novas():
    """nova/compute/pci_placement_translator.py: {node}_{ADDRESS} under the root."""
    vfs = vf_addresses("0000:af:00.0", 4, 16, 1)
    nic = SriovPF(
        "0000:af:00.0",
        total_vfs=8,
        vf_addresses=vfs,
        numa_node=0,
        traits=frozenset({"HW_NIC_SRIOV", "CUSTOM_FAST"}),
        vf_vendor_id="15b3",
        vf_product_id="101e",
        spec_traits=frozenset({"CUSTOM_FAST"}),
    )
    h = host(sriov_pfs=(*host().sriov_pfs, nic), gpus=())
    dev = PciDevice("0000:86:00.0", "10de", "1db4", traits=frozenset({"gold"}))
    h = replace(h, pci_devices=(dev,))
    s = shape(build(h, replace(POLICY, pci_in_placement=True, model_numa=True)))
    assert s["cn_0000:86:00.0"] == (
        "cn",
        {"CUSTOM_PCI_10DE_1DB4": (1, 0, 1, 1.0)},
        {"COMPUTE_MANAGED_PCI_DEVICE", "CUSTOM_GOLD"},
    )
    # VFs without a physnet: one provider named after the PF, the VFs' class.
    assert s["cn_0000:AF:00.0"] == (
        "cn",
        {"CUSTOM_PCI_15B3_101E": (4, 0, 4, 1.0)},
        {"COMPUTE_MANAGED_PCI_DEVICE", "CUSTOM_FAST"},
    )
    # A PF with a physnet keeps SRIOV_NET_VF for neutron ports, under its cell.
    assert s["cn_pci_0000_3b_00_0"][0] == "cn_NUMA1"
    assert s["cn_pci_0000_3b_00_0"][1] == {"SRIOV_NET_VF": (4, 0, 4, 1.0)}
    assert "cn_pci_0000_86_00_0" not in s and "cn_pci_0000_af_00_0" not in s


def test_mdev_max_instances_caps_a_type_over_all_gpus():
    """nova _get_gpu_inventories: existing mdevs first, then GPUs in order while within."""
    types = {"nvidia-35": MdevType("nvidia-35", "GRID M60-2Q", 4)}
    gpus = (
        Gpu("0000:5e:00.0", types, mdevs=(Mdev(MDEV, "nvidia-35", "0000:5e:00.0"),)),
        Gpu("0000:af:00.0", types),
        Gpu("0000:b0:00.0", types),
    )
    policy = replace(
        POLICY, enabled_mdev_types=("nvidia-35",), mdev_max_instances=(("nvidia-35", 9),)
    )
    s = shape(build(host(gpus=gpus), policy))
    assert s["cn_pci_0000_5e_00_0"][1] == {"VGPU": (5, 0, 5, 1.0)}  # 1 + 4: 5 of 9
    assert s["cn_pci_0000_af_00_0"][1] == {"VGPU": (4, 0, 4, 1.0)}  # 9 of 9
    assert "cn_pci_0000_b0_00_0" not in s  # 4 more would pass 9, and it has no mdev
    unlimited = shape(build(host(gpus=gpus), replace(policy, mdev_max_instances=())))
    assert unlimited["cn_pci_0000_b0_00_0"][1] == {"VGPU": (4, 0, 4, 1.0)}


def test_a_moved_provider_keeps_its_uuid_even_a_random_one():
    t = ProviderTree()
    t.new_root("cn", ROOT)
    nova_uuid = str(uuid.uuid4())  # nova chose it at random, not child_uuid()
    t.new_child("cn_pci_0000_af_00_0", "cn", uuid=nova_uuid)
    t.update_traits(nova_uuid, ["OWNER_NOVA"])
    apply_layout(t, host(), replace(POLICY, model_numa=True))
    assert t.data("cn_pci_0000_af_00_0").uuid == nova_uuid
    assert t.data(nova_uuid).parent_uuid == t.data("cn_NUMA0").uuid


SEV = MemEncryption("amd_sev", 59, "HW_CPU_X86_AMD_SEV")


def test_memory_encryption_children_are_novas_shape():
    sev_host = host(
        traits=host().traits | {"HW_CPU_X86_AMD_SEV"},  # a CPU flag: never on the root
        mem_encryption=(SEV, MemEncryption("amd_sev_es", 0, "HW_CPU_X86_AMD_SEV_ES")),
    )
    tree = build(sev_host)
    child = tree.data("cn_amd_sev")
    assert child.parent_uuid == ROOT
    inv = child.inventory["MEM_ENCRYPTION_CONTEXT"]
    assert (inv.total, inv.min_unit, inv.max_unit, inv.step_size, inv.reserved) == (59, 1, 1, 1, 0)
    assert child.traits == {"HW_CPU_X86_AMD_SEV", OWNER_TRAIT}
    assert not tree.exists("cn_amd_sev_es")  # no slots: no provider (nova removes it)
    assert "HW_CPU_X86_AMD_SEV" not in tree.data("cn").traits


@pytest.mark.parametrize("traits", [["OWNER_NOVA", "HW_CPU_X86_AMD_SEV"], []])
def test_novas_memory_encryption_child_is_taken_over(traits):
    """nova 2025.2's child (OWNER_NOVA), or one without it: kept with nova's UUID."""
    tree = ProviderTree()
    tree.new_root("cn", ROOT)
    novas = str(uuid.uuid4())
    tree.new_child("cn_amd_sev", "cn", uuid=novas)
    tree.update_inventory(novas, {"MEM_ENCRYPTION_CONTEXT": {"total": 59, "max_unit": 1}})
    tree.update_traits(novas, traits)
    assert ownership.foreign(tree, "cn", OWNER_TRAIT) == []
    build(host(mem_encryption=(SEV,)), POLICY, tree)
    assert tree.data("cn_amd_sev").uuid == novas
    assert tree.data(novas).traits == {"HW_CPU_X86_AMD_SEV", OWNER_TRAIT}
