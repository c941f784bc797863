"""The GPU host with mdevs assigned to domains (fixtures/libvirt/gpu-host).

The test driver expresses ``mdev_types`` with ``availableInstances`` and mdev
node devices as real libvirt formats them (``virNodeDeviceGetXMLDesc`` returns
them unchanged). It cannot make a node device go away: ``virNodeDeviceDestroy``
on an mdev returns success and leaves it listed and readable, and it does not
implement ``virNodeDeviceIsActive``; the vanished-object path is tested with a
domain instead (test_libvirt_small_host.py).
Capabilities come from ``capabilities.xml`` (see test_libvirt_numa_sriov.py).
"""

from __future__ import annotations

from agent.conf import config
from agent.shape.adapter import adapt
from agent.tracker.discovery import discover_node
from drivers.host import HostDriver
from tests.helpers.libvirt_fixtures import (
    allocations_by_name,
    hardware_view,
    laid_out,
    libvirt_driver,
    tree_view,
)
from tests.helpers.paths import SYSFS

GROUPS = {
    "devices": {"enabled_mdev_types": ["nvidia-35", "nvidia-36"]},
    "numa": {"model_in_placement": True},
}


def test_every_provider(tmp_path):
    tree = tree_view(laid_out(libvirt_driver(tmp_path, "gpu-host", **GROUPS)))
    assert set(tree) == {
        "cn1",
        "cn1_NUMA0",
        "cn1_NUMA1",
        "cn1_pci_0000_86_00_0",
        "cn1_pci_0000_87_00_0",
    }
    assert set(tree["cn1"]["inv"]) == {"DISK_GB"}
    for cell, mem in (("cn1_NUMA0", 131891004 // 1024), ("cn1_NUMA1", 132088844 // 1024)):
        assert tree[cell] == {
            "parent": "cn1",
            "inv": {"VCPU": (20, 0, 20, 4.0), "MEMORY_MB": (mem, 0, mem, 1.0)},
            # the host's CPU traits on the cells too (agent.shape.node_traits)
            "traits": {"HW_NUMA_ROOT"} | {t for t in tree["cn1"]["traits"] if "_CPU_" in t},
        }
    # 86: two nvidia-35 mdevs + 14 available; 87: nvidia-35 is the first enabled type it has.
    for gpu in ("cn1_pci_0000_86_00_0", "cn1_pci_0000_87_00_0"):
        assert tree[gpu] == {
            "parent": "cn1_NUMA1",
            "inv": {"VGPU": (16, 0, 16, 1.0)},
            "traits": {"CUSTOM_NVIDIA_35"},
        }


def test_every_instance_allocation(tmp_path):
    driver = libvirt_driver(tmp_path, "gpu-host", **GROUPS)
    tree = laid_out(driver)
    assert allocations_by_name(driver, tree) == {
        # nova metadata (namespace 1.2), image-booted: root 80 GiB. No NUMA affinity:
        # equal free VCPU, cell 1 has more free memory.
        "bbbbbbbb-0000-4000-8000-00000000000a": {
            "allocations": {
                "cn1_NUMA1": {"MEMORY_MB": 16384, "VCPU": 4},
                "cn1": {"DISK_GB": 80},
                "cn1_pci_0000_86_00_0": {"VGPU": 1},
            },
            "project_id": "p-nova-2",
            "user_id": "u-nova-2",
        },
        # agent metadata, <ca:root type="volume">: root_gb 80 counts 0, so no DISK_GB
        "bbbbbbbb-0000-4000-8000-00000000000b": {
            "allocations": {
                "cn1_NUMA0": {"MEMORY_MB": 8192, "VCPU": 2},
                "cn1_pci_0000_86_00_0": {"VGPU": 1},
            },
            "project_id": "p-agent-3",
            "user_id": "u-agent-4",
        },
    }


def test_same_tree_as_host_driver(tmp_path):
    """gpu-host is the sysfs gpu-host fixture's hardware: the discover trees match."""
    lv = libvirt_driver(tmp_path, "gpu-host", **GROUPS)
    hd = HostDriver(
        config.load(
            [],
            {
                "DEFAULT": {
                    "host": "cn1",
                    "state_path": str(tmp_path),
                    "reserved_host_memory_mb": 0,
                    "instances_path": str(tmp_path / "instances"),
                },
                "host_driver": {"sysfs_root": str(SYSFS / "gpu-host")},
                **GROUPS,
            },
        )
    )
    a = tree_view(
        discover_node(adapt(lv, lv.conf), "cn1", "00000000-0000-0000-0000-0000000000c1").tree
    )
    b = tree_view(
        discover_node(adapt(hd, hd.conf), "cn1", "00000000-0000-0000-0000-0000000000c1").tree
    )
    assert hardware_view(a) == hardware_view(b)
    assert "COMPUTE_VOLUME_EXTEND" in a["cn1"]["traits"]  # libvirt's capability traits


def test_type_preference_and_records(tmp_path):
    driver = libvirt_driver(tmp_path, "gpu-host", devices={"enabled_mdev_types": ["nvidia-37"]})
    tree = tree_view(laid_out(driver))
    assert "cn1_pci_0000_86_00_0" not in tree  # its mdevs are nvidia-35, not enabled
    assert tree["cn1_pci_0000_87_00_0"]["inv"] == {"VGPU": (8, 0, 8, 1.0)}
    res = driver.host.last.resources
    assert res.gpu_of_mdev() == {
        "4b20d080-1b54-4048-85b3-a6a62d165c01": "0000:86:00.0",
        "a8a1b1a4-3d4a-4d5c-9c0e-bb3b7e5a5e02": "0000:86:00.0",
    }
    g87 = next(g for g in res.gpus if g.address == "0000:87:00.0")
    assert g87.mdev_types["nvidia-37"].name == "GRID M60-1A"
    assert g87.numa_node == 1
