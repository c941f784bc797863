"""Each checked-in fixture, provider by provider, inventory by inventory."""

from __future__ import annotations

import psutil
import pytest

from drivers.host import HostDriver
from drivers.host.discovery import discover_host
from drivers.host.settings import settings_from_conf
from tests.helpers.sysfs_fixtures import tree_of


def disk_gb(tmp_path) -> int:
    return psutil.disk_usage(str(tmp_path)).total // 1024**3


def test_two_socket_flat(conf_for, tmp_path):
    spec = (
        '{"vendor_id": "8086", "product_id": "0a54", "resource_class": "CUSTOM_NVME", '
        '"traits": "CUSTOM_FAST,HW_GPU_API_VULKAN"}'
    )
    tree = tree_of(conf_for("two-socket", pci={"device_spec": [spec]}))
    assert set(tree) == {"cn1", "cn1_pci_0000_5e_00_0", "cn1_pci_0000_d8_00_0"}
    root = tree["cn1"]
    assert root["inv"] == {
        "VCPU": 32,
        "MEMORY_MB": 196_703_612 // 1024,
        "DISK_GB": disk_gb(tmp_path),
    }
    assert "HW_CPU_HYPERTHREADING" in root["traits"]
    assert {
        "HW_CPU_X86_AVX512F",
        "HW_CPU_X86_CLMUL",
        "HW_CPU_X86_FMA3",
        "HW_CPU_X86_AESNI",
        "HW_CPU_X86_TSX",
        "HW_CPU_X86_VMX",
        "HW_CPU_X86_INTEL_PCID",
        "HW_CPU_X86_INTEL_MD_CLEAR",
        "HW_CPU_X86_BMI",
    } <= root["traits"]
    assert "HW_CPU_X86_SVM" not in root["traits"]
    # pni is SSE3, but nova's map looks for "sse3" and clears the trait (issue 32).
    assert "HW_CPU_X86_SSE3" not in root["traits"]
    for addr in ("0000_5e_00_0", "0000_d8_00_0"):
        dev = tree[f"cn1_pci_{addr}"]
        assert dev == {
            "parent": "cn1",
            "inv": {"CUSTOM_NVME": 1},
            "traits": {"CUSTOM_FAST", "HW_GPU_API_VULKAN"},
        }


def test_two_socket_numa_and_cpu_sets(conf_for):
    conf = conf_for(
        "two-socket",
        compute={"cpu_dedicated_set": "2-7,10-15,^12", "cpu_shared_set": "0-1,8-9,16-31"},
        numa={"model_in_placement": True},
        pci={"device_spec": ['{"address": "*:d8:00.*"}']},
    )
    tree = tree_of(conf)
    assert tree["cn1"]["inv"] == {"DISK_GB": tree["cn1"]["inv"]["DISK_GB"]}
    # node0: cpus 0-7,16-23 ; node1: 8-15,24-31; cells carry the host's CPU traits too.
    cpu = {t for t in tree["cn1"]["traits"] if t.startswith("HW_CPU_")}
    assert "HW_CPU_X86_AVX2" in cpu
    assert tree["cn1_NUMA0"] == {
        "parent": "cn1",
        "traits": {"HW_NUMA_ROOT"} | cpu,
        "inv": {"VCPU": 10, "PCPU": 6, "MEMORY_MB": 98_178_264 // 1024},
    }
    assert tree["cn1_NUMA1"] == {
        "parent": "cn1",
        "traits": {"HW_NUMA_ROOT"} | cpu,
        "inv": {"VCPU": 10, "PCPU": 5, "MEMORY_MB": 99_034_556 // 1024},
    }
    assert tree["cn1_pci_0000_d8_00_0"] == {
        "parent": "cn1_NUMA1",
        "traits": set(),
        "inv": {"CUSTOM_PCI_8086_0A54": 1},
    }
    assert len(tree) == 4


def test_two_socket_raw_records(conf_for):
    d = discover_host(settings_from_conf(conf_for("two-socket")))
    assert (d.cpu.topology.sockets, d.cpu.topology.cores, d.cpu.topology.threads_per_core) == (
        2,
        16,
        2,
    )
    assert dict(d.memory.hugepages) == {2048: 2048, 1048576: 8}
    assert [dict(c.hugepages) for c in d.resources.numa_cells] == [{2048: 1024, 1048576: 4}] * 2
    nvme = d.functions["0000:5e:00.0"]
    assert (nvme.class_code, nvme.driver, nvme.numa_node, nvme.iommu_group) == (
        "010802",
        "vfio-pci",
        0,
        40,
    )
    assert d.functions["0000:00:00.0"].driver is None
    assert d.resources.pci_devices == ()  # nothing offered without a device_spec
    assert d.disk.fstype and not d.disk.shared


def test_sriov_nic(conf_for):
    spec = '{"devname": "ens1f0", "physical_network": "physnet1", "trusted": "true"}'
    spec2 = (
        '{"vendor_id": "8086", "product_id": "154c", "address": "0000:3b:*.*", '
        '"physical_network": "physnet-2"}'
    )
    tree = tree_of(conf_for("sriov-nic", pci={"device_spec": [spec, spec2]}))
    assert set(tree) == {"cn1", "cn1_pci_0000_3b_00_0", "cn1_pci_0000_3b_00_1"}
    assert tree["cn1"]["inv"]["VCPU"] == 16
    assert tree["cn1_pci_0000_3b_00_0"] == {
        "parent": "cn1",
        "inv": {"SRIOV_NET_VF": 64},
        "traits": {"CUSTOM_PHYSNET_PHYSNET1", "HW_NIC_SRIOV", "HW_NIC_SRIOV_TRUSTED"},
    }
    assert tree["cn1_pci_0000_3b_00_1"] == {
        "parent": "cn1",
        "inv": {"SRIOV_NET_VF": 64},
        "traits": {"CUSTOM_PHYSNET_PHYSNET_2", "HW_NIC_SRIOV"},
    }


def test_sriov_records_and_vf_addresses(conf_for):
    conf = conf_for("sriov-nic", pci={"device_spec": ['{"vendor_id": "8086"}']})
    res = HostDriver(conf).get_host_resources("cn1")
    pf0, pf1 = res.sriov_pfs
    assert (pf0.total_vfs, pf0.num_vfs, pf0.netdev, pf0.numa_node) == (64, 64, "ens1f0", 0)
    assert pf0.vf_addresses[0] == "0000:3b:02.0" and pf0.vf_addresses[-1] == "0000:3b:09.7"
    assert pf1.vf_addresses[0] == "0000:3b:0a.0" and pf1.vf_addresses[-1] == "0000:3b:11.7"
    assert res.pci_devices == ()  # VFs are never whole PCI devices
    assert len(res.pf_of_vf()) == 128


def test_gpu_host_mdev(conf_for):
    conf = conf_for(
        "gpu-host",
        devices={"enabled_mdev_types": ["nvidia-35", "nvidia-36"]},
        numa={"model_in_placement": True},
    )
    tree = tree_of(conf)
    assert tree["cn1_pci_0000_86_00_0"] == {
        "parent": "cn1_NUMA1",
        "inv": {"VGPU": 16},
        "traits": {"CUSTOM_NVIDIA_35"},
    }
    assert tree["cn1_pci_0000_87_00_0"] == {
        "parent": "cn1_NUMA1",
        "inv": {"VGPU": 16},
        "traits": {"CUSTOM_NVIDIA_35"},
    }
    assert tree["cn1_NUMA0"]["inv"]["VCPU"] == 20
    res = HostDriver(conf).get_host_resources("cn1")
    g0 = res.gpus[0]
    assert set(g0.mdev_types) == {"nvidia-35", "nvidia-36"}
    assert g0.mdev_types["nvidia-35"].name == "GRID M60-0B"
    assert g0.mdev_types["nvidia-35"].available_instances == 14
    assert res.gpu_of_mdev() == {
        "4b20d080-1b54-4048-85b3-a6a62d165c01": "0000:86:00.0",
        "a8a1b1a4-3d4a-4d5c-9c0e-bb3b7e5a5e02": "0000:86:00.0",
    }


def test_gpu_host_type_preference(conf_for):
    tree = tree_of(conf_for("gpu-host", devices={"enabled_mdev_types": ["nvidia-37"]}))
    # GPU 0 has nvidia-35 mdevs but nvidia-35 is not enabled: nvidia-37 with 0 left.
    assert "cn1_pci_0000_86_00_0" not in tree
    assert tree["cn1_pci_0000_87_00_0"] == {
        "parent": "cn1",
        "inv": {"VGPU": 8},
        "traits": {"CUSTOM_NVIDIA_37"},
    }
    assert "cn1_pci_0000_87_00_0" not in tree_of(conf_for("gpu-host"))  # no types enabled


def test_nvidia_sriov_vgpu_and_shared_storage(conf_for):
    """A vendor-VFIO GPU: by default no VGPU (nova 34 cannot use it), said once; a spec
    naming the GPU itself offers nothing (nova refuses a PF beside its VFs)."""
    conf = conf_for(
        "nvidia-vgpu",
        devices={"enabled_mdev_types": ["nvidia-470"]},
        DEFAULT={"instances_path": "/var/lib/nova/instances"},
        pci={"device_spec": ['{"vendor_id": "10de"}']},
    )
    assert set(tree_of(conf)) == {"cn1"}
    d = HostDriver(conf).discover()
    assert d.resources.gpus == () and d.resources.sriov_pfs == ()
    assert d.resources.pci_devices == ()
    assert sum("cannot consume VGPU" in w for w in d.warnings) == 1
    assert any("matches GPU 0000:41:00.0 itself" in w for w in d.warnings)
    assert d.disk.fstype == "nfs4" and d.disk.mountpoint == "/var/lib/nova/instances"
    assert "DISK_GB" not in tree_of(conf)["cn1"]["inv"]  # nfs4: shared storage (spec 4b)


def test_nvidia_vendor_vgpu_inventory_is_bounded_by_the_max_per_gpu(conf_for):
    """With the agent's own option, VGPU = VFs holding the type + what can still be
    created, bounded by the type's maximum per GPU: 2 here, not the 4 VFs listing it."""
    conf = conf_for(
        "nvidia-vgpu",
        devices={
            "enabled_mdev_types": ["nvidia-470"],
            "vendor_vgpu_inventory": True,
            "vendor_vgpu_max_instances": {"nvidia-470": "2"},
        },
    )
    tree = tree_of(conf)
    assert tree["cn1_pci_0000_41_00_0"]["inv"] == {"VGPU": 2}
    (gpu,) = HostDriver(conf).discover().resources.gpus
    assert gpu.mdev_types["nvidia-470"].available_instances == 1
    assert gpu.mdev_types["nvidia-470"].name == "NVIDIA A100-8C"
    assert [(m.uuid, m.type_id) for m in gpu.mdevs] == [("0000:41:00.4", "nvidia-470")]


def test_shared_storage_forced(conf_for):
    tree = tree_of(conf_for("no-numa", compute={"shared_storage": True}))
    assert set(tree["cn1"]["inv"]) == {"VCPU", "MEMORY_MB"}


def test_no_numa(conf_for, tmp_path):
    tree = tree_of(
        conf_for("no-numa", numa={"model_in_placement": True}, DEFAULT={"reserved_host_cpus": 1})
    )
    assert set(tree) == {"cn1"}
    assert tree["cn1"]["inv"] == {
        "VCPU": 4,
        "MEMORY_MB": 8_148_440 // 1024,
        "DISK_GB": disk_gb(tmp_path),
    }
    traits = tree["cn1"]["traits"]
    assert {
        "HW_CPU_X86_SVM",
        "HW_CPU_X86_AMD_SSBD",
        "HW_CPU_X86_AMD_VIRT_SSBD",
        "HW_CPU_X86_SHA",
    } <= traits
    assert "HW_CPU_HYPERTHREADING" not in traits and "HW_CPU_X86_INTEL_SSBD" not in traits


def test_broken(conf_for, caplog):
    conf = conf_for(
        "broken",
        pci={"device_spec": ['{"vendor_id": "8086"}']},
        devices={"enabled_mdev_types": ["nvidia-35"]},
        numa={"model_in_placement": True},
    )
    d = HostDriver(conf).discover()
    base = str(conf.host_driver.sysfs_root)
    expected = {
        "sys/devices/system/cpu/cpu7/topology/core_id": "CPU 7 left out",
        "sys/devices/system/node/node1/meminfo": "NUMA node 1 left out",
        "sys/bus/pci/devices/0000:02:00.0/vendor": "PCI device 0000:02:00.0 left out",
        "sys/bus/pci/devices/0000:03:00.0/device": "PCI device 0000:03:00.0 left out",
        "sys/bus/pci/devices/0000:04:00.0/class": "PCI device 0000:04:00.0 left out",
        "sys/bus/pci/devices/0000:06:00.0/sriov_numvfs": "PCI device 0000:06:00.0 left out",
        "sys/bus/pci/devices/not-a-device": "PCI device not-a-device left out",
        "sys/class/mdev_bus/0000:82:00.0/mdev_supported_types/nvidia-35/available_instances": (
            "GPU 0000:82:00.0 left out"
        ),
    }
    assert len(d.warnings) == len(expected)
    for rel, tail in expected.items():
        assert any(w.startswith(f"{base}/{rel}: ") and w.endswith(tail) for w in d.warnings), rel
    assert any(r.levelname == "WARNING" and "cpu7" in r.getMessage() for r in caplog.records)
    res = d.resources
    assert res.vcpus == 7
    assert [c.id for c in res.numa_cells] == [0]
    assert [p.address for p in res.pci_devices] == ["0000:01:00.0"]
    assert [(p.address, p.num_vfs) for p in res.sriov_pfs] == [("0000:05:00.0", 4)]
    assert not any(a.startswith("0000:06:") for a in d.functions)  # VFs of the lost PF too
    assert [g.address for g in res.gpus] == ["0000:81:00.0"]
    tree = tree_of(conf)
    assert tree["cn1_pci_0000_81_00_0"]["parent"] == "cn1"  # its NUMA cell 1 was left out
    assert tree["cn1_NUMA0"]["inv"]["VCPU"] == 4


def test_unknown_node_and_no_instances(conf_for):
    driver = HostDriver(conf_for("no-numa"))
    assert driver.get_nodenames() == ["cn1"]
    assert driver.list_instances("cn1") == []
    with pytest.raises(KeyError):
        driver.get_host_resources("other")
