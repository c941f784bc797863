"""``compute-agent discover`` on the example hosts: JSON checked field by field."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from agent.cli.commands import common
from agent.cli.main import main
from agent.model.provider_tree import child_uuid, default_root_uuid
from agent.shape.layout import OWNER_TRAIT
from agent.state.store import StateStore
from tests.helpers.paths import EXAMPLES, REPO, SYSFS

GPU_HOST = SYSFS / "gpu-host"

SMALL_ROOT = default_root_uuid("small-host")
BIG_ROOT = default_root_uuid("big-host")


def discover_json(capsys, tmp_path: Path, *args: str) -> dict:
    state = tmp_path / "override.conf"
    state.write_text(f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\n")
    code = main(["discover", *args, "--config", str(state), "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)
    # Every provider is marked as the agent's; the checks below are about the rest.
    for node in doc["nodes"]:
        for provider in node["providers"]:
            provider["traits"].remove(OWNER_TRAIT)
            if provider["parent_provider_uuid"] is None:
                provider["traits"].remove("COMPUTE_NODE")
    return doc


def inv(total, reserved=0, ratio=1.0, capacity=None, max_unit=None):
    return {
        "total": total,
        "reserved": reserved,
        "min_unit": 1,
        "max_unit": total if max_unit is None else max_unit,
        "step_size": 1,
        "allocation_ratio": ratio,
        "capacity": int((total - reserved) * ratio) if capacity is None else capacity,
    }


def test_small_host(capsys, tmp_path):
    doc = discover_json(
        capsys, tmp_path, "--driver", "fake", "--fake-host", str(EXAMPLES / "small-host.yaml")
    )
    assert doc["format"] == "compute-agent.discover/1"
    assert doc["driver"] == "fake"
    (node,) = doc["nodes"]
    assert node["nodename"] == "small-host"
    assert node["providers"] == [
        {
            "uuid": SMALL_ROOT,
            "name": "small-host",
            "parent_provider_uuid": None,
            "root_provider_uuid": SMALL_ROOT,
            "inventories": {
                "DISK_GB": inv(200),
                "MEMORY_MB": inv(16384, reserved=512, capacity=15872),
                "VCPU": inv(8, ratio=4.0, capacity=32),
            },
            "traits": ["COMPUTE_ARCH_X86_64", "HW_CPU_X86_AVX2", "HW_CPU_X86_SSE42"],
            "aggregates": [],
        }
    ]

    def alloc(resources):
        return {
            "allocations": {SMALL_ROOT: {"resources": resources}},
            "project_id": "6b1f0e4e2e8a4c8f9b1d2a3c4d5e6f70",
            "user_id": "9d2a1b3c4d5e4f60a7b8c9d0e1f2a3b4",
            "consumer_type": "INSTANCE",
        }

    assert node["allocations"] == {
        "1a9c3c22-4a6e-4c8e-8f1e-2f0d6b1f9a01": alloc(
            {"DISK_GB": 20, "MEMORY_MB": 2048, "VCPU": 1}
        ),
        # 40 root + 10 ephemeral + 1536 MiB swap -> 2 GiB
        "1a9c3c22-4a6e-4c8e-8f1e-2f0d6b1f9a02": alloc(
            {"DISK_GB": 52, "MEMORY_MB": 8192, "VCPU": 4}
        ),
    }


def test_big_host(capsys, tmp_path):
    doc = discover_json(
        capsys,
        tmp_path,
        "--config",
        str(EXAMPLES / "compute-agent.conf"),
        "--fake-host",
        str(EXAMPLES / "big-host.yaml"),
    )
    (node,) = doc["nodes"]
    providers = {p["name"]: p for p in node["providers"]}
    assert [p["name"] for p in node["providers"]] == [
        "big-host",
        "big-host_NUMA0",
        "big-host_pci_0000_3b_00_0",
        "big-host_pci_0000_5e_00_0",
        "big-host_NUMA1",
        "big-host_pci_0000_d8_00_0",
        "big-host_pci_0000_af_00_0",
        "big-host_pci_0000_86_00_0",
    ]
    uid = {
        name: (BIG_ROOT if name == "big-host" else child_uuid(BIG_ROOT, name)) for name in providers
    }
    for name, p in providers.items():
        assert p["uuid"] == uid[name]
        assert p["root_provider_uuid"] == BIG_ROOT
        assert p["aggregates"] == []
    parent = {name: p["parent_provider_uuid"] for name, p in providers.items()}
    assert parent == {
        "big-host": None,
        "big-host_NUMA0": BIG_ROOT,
        "big-host_NUMA1": BIG_ROOT,
        "big-host_pci_0000_3b_00_0": uid["big-host_NUMA0"],
        "big-host_pci_0000_5e_00_0": uid["big-host_NUMA0"],
        "big-host_pci_0000_d8_00_0": uid["big-host_NUMA1"],
        "big-host_pci_0000_af_00_0": uid["big-host_NUMA1"],
        "big-host_pci_0000_86_00_0": uid["big-host_NUMA1"],
    }
    assert providers["big-host"]["inventories"] == {"DISK_GB": inv(3500)}
    assert "HW_CPU_X86_AVX512F" in providers["big-host"]["traits"]
    # reserved_host_cpus = 2 and reserved_host_memory_mb = 4096 come out of cell 0
    assert providers["big-host_NUMA0"]["inventories"] == {
        "MEMORY_MB": inv(393216, reserved=4096),
        "PCPU": inv(8),
        "VCPU": inv(40, reserved=2, ratio=4.0),
    }
    assert providers["big-host_NUMA1"]["inventories"] == {
        "MEMORY_MB": inv(393216),
        "PCPU": inv(8),
        "VCPU": inv(40, ratio=4.0),
    }
    cpu = [t for t in providers["big-host"]["traits"] if t.startswith("HW_CPU_")]
    assert cpu  # the cells supply the CPUs, so they carry the host's CPU traits too
    assert providers["big-host_NUMA0"]["traits"] == sorted(["HW_NUMA_ROOT", *cpu])
    assert providers["big-host_pci_0000_3b_00_0"]["inventories"] == {"SRIOV_NET_VF": inv(64)}
    assert providers["big-host_pci_0000_3b_00_0"]["traits"] == [
        "CUSTOM_PHYSNET_PHYSNET1",
        "HW_NIC_OFFLOAD_TSO",
        "HW_NIC_SRIOV",
    ]
    assert providers["big-host_pci_0000_d8_00_0"]["traits"] == [
        "CUSTOM_PHYSNET_PHYSNET2",
        "HW_NIC_SRIOV",
    ]
    # GPU 0: 2 nvidia-35 mdevs + 2 available; GPU 1: first enabled type, 4 available
    assert providers["big-host_pci_0000_5e_00_0"]["inventories"] == {"VGPU": inv(4)}
    assert providers["big-host_pci_0000_5e_00_0"]["traits"] == ["CUSTOM_NVIDIA_35"]
    assert providers["big-host_pci_0000_af_00_0"]["inventories"] == {"VGPU": inv(4)}
    assert providers["big-host_pci_0000_86_00_0"]["inventories"] == {"CUSTOM_PCI_8086_0A54": inv(1)}

    allocs = {
        c: {
            providers_by_uuid: a["resources"] for providers_by_uuid, a in rec["allocations"].items()
        }
        for c, rec in node["allocations"].items()
    }
    assert allocs == {
        "4f7d1e2a-5b6c-4d8e-9f01-a2b3c4d5e601": {
            uid["big-host_NUMA0"]: {"MEMORY_MB": 8192, "VCPU": 4},
            BIG_ROOT: {"DISK_GB": 40},
            uid["big-host_pci_0000_5e_00_0"]: {"VGPU": 1},
        },
        "4f7d1e2a-5b6c-4d8e-9f01-a2b3c4d5e602": {
            uid["big-host_NUMA0"]: {"MEMORY_MB": 8192, "VCPU": 4},
            BIG_ROOT: {"DISK_GB": 40},
            uid["big-host_pci_0000_5e_00_0"]: {"VGPU": 1},
        },
        # pinned over both cells, booted from volume: only swap on disk
        "4f7d1e2a-5b6c-4d8e-9f01-a2b3c4d5e603": {
            uid["big-host_NUMA0"]: {"MEMORY_MB": 8192, "PCPU": 4},
            uid["big-host_NUMA1"]: {"MEMORY_MB": 8192, "PCPU": 4},
            BIG_ROOT: {"DISK_GB": 2},
            uid["big-host_pci_0000_3b_00_0"]: {"SRIOV_NET_VF": 2},
            uid["big-host_pci_0000_d8_00_0"]: {"SRIOV_NET_VF": 1},
        },
        # no NUMA affinity: the freest cell is NUMA1 (cell 0 holds the others)
        "4f7d1e2a-5b6c-4d8e-9f01-a2b3c4d5e604": {
            uid["big-host_NUMA1"]: {"MEMORY_MB": 32768, "VCPU": 8},
            BIG_ROOT: {"DISK_GB": 180},
            uid["big-host_pci_0000_86_00_0"]: {"CUSTOM_PCI_8086_0A54": 1},
        },
    }
    for rec in node["allocations"].values():
        assert rec["consumer_type"] == "INSTANCE"


def test_root_uuid_comes_from_the_state_directory(capsys, tmp_path):
    recorded = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
    StateStore(tmp_path / "state").set_root_uuid("small-host", recorded)
    doc = discover_json(
        capsys, tmp_path, "--driver", "fake", "--fake-host", str(EXAMPLES / "small-host.yaml")
    )
    assert doc["nodes"][0]["providers"][0]["uuid"] == recorded


def test_discover_writes_nothing(capsys, tmp_path):
    discover_json(
        capsys, tmp_path, "--driver", "fake", "--fake-host", str(EXAMPLES / "small-host.yaml")
    )
    assert not (tmp_path / "state").exists()


def test_tree_format(capsys, tmp_path):
    state = tmp_path / "s.conf"
    state.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    code = main(
        [
            "discover",
            "--config",
            str(EXAMPLES / "compute-agent.conf"),
            "--config",
            str(state),
            "--fake-host",
            str(EXAMPLES / "big-host.yaml"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "big-host_NUMA1" in out and "SRIOV_NET_VF capacity 64  total 64" in out
    assert "allocations on big-host" in out and "VGPU=1" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--driver", "fake"], "[fake] host_file"),
        (
            ["--driver", "fake", "--fake-host", "/nonexistent.yaml"],
            "/nonexistent.yaml: cannot read",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, args, message):
    conf = tmp_path / "c.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    code = main(["discover", "--config", str(conf), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.count("\n") == 1


@pytest.fixture
def no_configuration(monkeypatch, tmp_path):
    """No configuration file or directory anywhere: the defaults point at nothing."""
    monkeypatch.setattr(common, "DEFAULT_CONFIG_FILES", (str(tmp_path / "absent.conf"),))
    monkeypatch.setattr(common, "DEFAULT_CONFIG_DIRS", (str(tmp_path / "absent.conf.d"),))


def test_no_configuration_at_all_reads_this_host(capsys, no_configuration):
    code = main(["discover", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["driver"] == "host"
    (node,) = doc["nodes"]
    assert node["nodename"] == socket.gethostname()
    root = next(p for p in node["providers"] if p["parent_provider_uuid"] is None)
    assert root["inventories"]["VCPU"]["total"] == psutil.cpu_count(logical=True)
    assert root["inventories"]["MEMORY_MB"]["total"] == psutil.virtual_memory().total // 2**20


def test_no_driver_named_reads_this_host_devices_too(capsys, no_configuration):
    code = main(["discover", "--devices", "--format", "json", "--sysfs-root", str(GPU_HOST)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["driver"] == "host"


def test_a_configured_driver_still_wins(capsys, monkeypatch, tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[compute]\ndriver = fake\n"
        f"[fake]\nhost_file = {EXAMPLES / 'small-host.yaml'}\n"
    )
    # the default file, as /etc/compute-agent would hold it
    monkeypatch.setattr(common, "DEFAULT_CONFIG_FILES", (str(conf),))
    monkeypatch.setattr(common, "DEFAULT_CONFIG_DIRS", (str(tmp_path / "absent.conf.d"),))
    code = main(["discover", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["driver"] == "fake"
    assert [n["nodename"] for n in doc["nodes"]] == ["small-host"]


def test_malformed_host_file_through_the_console_script(tmp_path):
    host = tmp_path / "host.yaml"
    host.write_text("nodes:\n  - nodename: h\n    memory_mb: plenty\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli.main",
            "discover",
            "--driver",
            "fake",
            "--fake-host",
            str(host),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (
        f"compute-agent discover: {host} at nodes[0].memory_mb: 'plenty' is not of type 'integer'\n"
    )
    assert "Traceback" not in proc.stderr
