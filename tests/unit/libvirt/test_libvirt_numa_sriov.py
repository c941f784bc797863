"""The 2-cell NUMA host with SR-IOV VFs assigned to domains (fixtures/libvirt/numa-sriov).

Real libvirt (test driver) gives node info, node devices and domains. The
test driver cannot express host capabilities: for a host file it always
reports no NUMA cell and an i686 CPU with no model (libvirt 9.0
``testBuildCapabilities``; checked in ``test_test_driver_capabilities_are_fixed``).
The cells and CPU model come from ``capabilities.xml`` through
``[libvirt] capabilities_file``; the CPU features are then expanded by the
real libvirt CPU map (``virConnectBaselineCPU``, which the test driver runs).
The test driver also ignores ``<test:runstate>`` in a host file, so a shut-off
domain is made by ``virDomainDestroy`` on the driver's own connection.
"""

from __future__ import annotations

import psutil

from agent.cli.render import discover_record
from agent.conf import config
from agent.shape.adapter import adapt
from agent.shape.layout import desired_providers
from agent.shape.policy import policy_from_conf
from drivers.host import HostDriver
from tests.helpers.libvirt_fixtures import allocations_by_name, laid_out, libvirt_driver, tree_view
from tests.helpers.paths import SYSFS

NVME = '{"vendor_id": "8086", "product_id": "0a54"}'
PF = '{"devname": "ens2f0", "physical_network": "physnet1"}'
GROUPS = {
    "compute": {"cpu_dedicated_set": "8-15", "cpu_shared_set": "0-7,16-31"},
    "numa": {"model_in_placement": True},
    "pci": {"device_spec": [NVME, PF]},
}
SKYLAKE_TRAITS = {
    "HW_CPU_HYPERTHREADING",
    "HW_CPU_X86_AVX512F",
    "HW_CPU_X86_SSE41",
    "HW_CPU_X86_SSE42",
    "HW_CPU_X86_CLMUL",
    "HW_CPU_X86_FMA3",
    "HW_CPU_X86_AESNI",
    "HW_CPU_X86_TSX",
    "HW_CPU_X86_VMX",
    "HW_CPU_X86_INTEL_PCID",
    "HW_CPU_X86_INTEL_MD_CLEAR",
    "HW_CPU_X86_BMI",
    "HW_CPU_X86_PDPE1GB",
}


def disk_gb(tmp_path) -> int:
    return psutil.disk_usage(str(tmp_path)).total // 1024**3


def test_every_provider(tmp_path):
    driver = libvirt_driver(tmp_path, "numa-sriov", **GROUPS)
    tree = tree_view(laid_out(driver))
    assert set(tree) == {
        "cn1",
        "cn1_NUMA0",
        "cn1_NUMA1",
        "cn1_pci_0000_5e_00_0",
        "cn1_pci_0000_d8_00_0",
        "cn1_pci_0000_af_00_0",
    }
    root = tree["cn1"]
    assert root["parent"] is None
    assert root["inv"] == {"DISK_GB": (disk_gb(tmp_path), 0, disk_gb(tmp_path), 1.0)}
    assert SKYLAKE_TRAITS <= root["traits"]
    assert "HW_CPU_X86_SVM" not in root["traits"]  # an AMD feature
    hardware = {t for t in root["traits"] if not t.startswith("COMPUTE_")}
    assert all(t.startswith(("HW_CPU_", "HW_ARCH_")) for t in hardware)
    assert "HW_ARCH_X86_64" in hardware and "COMPUTE_ARCH_X86_64" in root["traits"]
    assert tree["cn1_NUMA0"] == {
        "parent": "cn1",
        "inv": {"VCPU": (16, 0, 16, 4.0), "MEMORY_MB": (95877, 0, 95877, 1.0)},
        "traits": {"HW_NUMA_ROOT"} | {t for t in root["traits"] if t.startswith("HW_CPU_")},
    }
    assert tree["cn1_NUMA1"] == {
        "parent": "cn1",
        "inv": {
            "VCPU": (8, 0, 8, 4.0),
            "PCPU": (8, 0, 8, 1.0),
            "MEMORY_MB": (96713, 0, 96713, 1.0),
        },
        "traits": {"HW_NUMA_ROOT"} | {t for t in root["traits"] if t.startswith("HW_CPU_")},
    }
    nvme = (("cn1_pci_0000_5e_00_0", "cn1_NUMA0"), ("cn1_pci_0000_d8_00_0", "cn1_NUMA1"))
    for name, cell in nvme:
        assert tree[name] == {
            "parent": cell,
            "inv": {"CUSTOM_PCI_8086_0A54": (1, 0, 1, 1.0)},
            "traits": set(),
        }
    assert tree["cn1_pci_0000_af_00_0"] == {
        "parent": "cn1_NUMA1",
        "inv": {"SRIOV_NET_VF": (4, 0, 4, 1.0)},
        "traits": {"CUSTOM_PHYSNET_PHYSNET1", "HW_NIC_SRIOV"},
    }


def test_raw_records_cells_pages_distances(tmp_path):
    driver = libvirt_driver(tmp_path, "numa-sriov", **GROUPS)
    host = driver.discover()
    assert [dict(c.hugepages) for c in host.resources.numa_cells] == [{2048: 1024, 1048576: 4}] * 2
    assert [dict(c.distances) for c in host.capabilities.cells] == [
        {0: 10, 1: 21},
        {0: 21, 1: 10},
    ]
    assert host.resources.memory_mb == 196703612 // 1024  # virNodeGetInfo
    pf = host.resources.sriov_pfs[0]
    assert (pf.address, pf.total_vfs, pf.netdev, pf.numa_node) == ("0000:af:00.0", 64, "ens2f0", 1)
    assert pf.vf_addresses == ("0000:af:02.0", "0000:af:02.1", "0000:af:02.2", "0000:af:02.3")
    # Features named in the model only (not listed in capabilities) come from baselineCPU.
    assert {"avx512f", "sse4.2", "pclmuldq"} <= host.cpu_features
    assert not {"avx512f", "sse4.2"} & host.capabilities.features
    assert driver.warnings == []


def test_every_instance_allocation(tmp_path):
    driver = libvirt_driver(tmp_path, "numa-sriov", **GROUPS)
    tree = laid_out(driver)
    got = allocations_by_name(driver, tree)
    disk = 1024  # the test driver's virDomainGetBlockInfo capacity of any disk, GiB
    assert got == {
        # nova metadata, pinned to cell 1 (vcpupin on one CPU each): PCPU; 2 VFs by hostdev
        "aaaaaaaa-0000-4000-8000-000000000001": {
            "allocations": {
                "cn1_NUMA1": {"MEMORY_MB": 8192, "PCPU": 4},
                "cn1": {"DISK_GB": 40},
                "cn1_pci_0000_af_00_0": {"SRIOV_NET_VF": 2},
            },
            "project_id": "p-nova-1",
            "user_id": "u-nova-1",
        },
        # agent metadata with flavor: 20 + 10 + 1 GiB swap; a VF by <interface type='hostdev'>
        "aaaaaaaa-0000-4000-8000-000000000002": {
            "allocations": {
                "cn1_NUMA0": {"MEMORY_MB": 4096, "VCPU": 2},
                "cn1": {"DISK_GB": 31},
                "cn1_pci_0000_af_00_0": {"SRIOV_NET_VF": 1},
            },
            "project_id": "p-agent-1",
            "user_id": "u-agent-1",
        },
        # owner only: disks measured (two local disks); whole NVMe; bound to cell 1
        "aaaaaaaa-0000-4000-8000-000000000003": {
            "allocations": {
                "cn1_NUMA1": {"MEMORY_MB": 2048, "VCPU": 2},
                "cn1": {"DISK_GB": 2 * disk},
                "cn1_pci_0000_d8_00_0": {"CUSTOM_PCI_8086_0A54": 1},
            },
            "project_id": "p-agent-1",
            "user_id": "u-agent-2",
        },
        # macvtap on VF ens2f0v3 holds that VF; macvtap on eno1 (not a VF) holds nothing
        "aaaaaaaa-0000-4000-8000-000000000004": {
            "allocations": {
                "cn1_NUMA0": {"MEMORY_MB": 1024, "VCPU": 1},
                "cn1": {"DISK_GB": 10},
                "cn1_pci_0000_af_00_0": {"SRIOV_NET_VF": 1},
            },
            "project_id": "p-agent-2",
            "user_id": "u-agent-3",
        },
    }
    conn = driver.connection.get()
    disk_bytes = conn.lookupByName("vm-nvme").blockInfo("vda")[0]
    assert disk == -(-disk_bytes // 1024**3)


def test_flat_tree_and_records(tmp_path):
    driver = libvirt_driver(tmp_path, "numa-sriov", pci={"device_spec": [PF]})
    tree = tree_view(laid_out(driver))
    assert set(tree) == {"cn1", "cn1_pci_0000_af_00_0"}
    assert tree["cn1"]["inv"]["VCPU"] == (32, 0, 32, 4.0)
    assert tree["cn1"]["inv"]["MEMORY_MB"] == (192093, 0, 192093, 1.0)
    assert tree["cn1_pci_0000_af_00_0"]["parent"] == "cn1"
    inst = {i.name: i for i in driver.list_instances("cn1")}
    assert set(inst) == {"sriov-pinned", "vm-vf-iface", "vm-nvme", "vm-macvtap"}
    pinned = inst["sriov-pinned"]
    assert pinned.pinned and pinned.numa_cells == (1,) and not pinned.boot_from_volume
    assert pinned.pci_devices == ("0000:af:02.0", "0000:af:02.1")
    assert pinned.flavor.name == "m1.sriov"
    assert inst["vm-macvtap"].pci_devices == ("0000:af:02.3",)
    assert not inst["vm-vf-iface"].pinned and inst["vm-vf-iface"].numa_cells == ()


def test_shut_off_domain_still_counted(tmp_path):
    driver = libvirt_driver(tmp_path, "numa-sriov", **GROUPS)
    dom = driver.connection.get().lookupByName("vm-vf-iface")
    dom.destroy()
    assert dom.isActive() == 0
    tree = laid_out(driver)
    typed = adapt(driver, driver.conf).expected_allocations(tree, "cn1")[
        "aaaaaaaa-0000-4000-8000-000000000002"
    ]
    alloc = discover_record(typed)
    assert alloc["project_id"] == "p-agent-1"
    assert sum(r["resources"].get("DISK_GB", 0) for r in alloc["allocations"].values()) == 31


def test_same_tree_as_host_driver_for_the_same_hardware(tmp_path):
    """numa-sriov is the sysfs two-socket host plus one SR-IOV NIC; offering only the
    NVMe drives (the NIC is not offered), both drivers must give the same providers."""
    groups = {**GROUPS, "pci": {"device_spec": [NVME]}}
    lv = libvirt_driver(tmp_path, "numa-sriov", **groups)
    host_conf = config.load(
        [],
        {
            "DEFAULT": {
                "host": "cn1",
                "state_path": str(tmp_path),
                "reserved_host_memory_mb": 0,
                "instances_path": str(tmp_path / "instances"),
            },
            "compute": groups["compute"],
            "host_driver": {"sysfs_root": str(SYSFS / "two-socket")},
            "numa": groups["numa"],
            "pci": groups["pci"],
        },
    )
    hd = HostDriver(host_conf)
    a = desired_providers(lv.get_host_resources("cn1"), policy_from_conf(lv.conf))
    b = desired_providers(hd.get_host_resources("cn1"), policy_from_conf(hd.conf))
    assert [(s.name, s.parent, s.inventory) for s in a] == [
        (s.name, s.parent, s.inventory) for s in b
    ]
    assert [s.traits for s in a[1:]] == [s.traits for s in b[1:]]
    # The compute node's CPU traits, libvirt's Skylake-Server-IBRS spec-ctrl feature
    # included (the kernel shows it as "ibrs"; the host driver maps that name).
    # The host driver cannot know the hypervisor's COMPUTE_* capability traits.
    assert {t for t in a[0].traits if not t.startswith("COMPUTE_")} == b[0].traits
    assert "HW_CPU_X86_INTEL_SPEC_CTRL" in a[0].traits
