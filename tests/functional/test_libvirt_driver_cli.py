"""``compute-agent discover --driver libvirt`` as an operator runs it (libvirt test driver)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "libvirt"


def run(tmp_path: Path, *args: str, extra: str = "") -> subprocess.CompletedProcess[str]:
    conf = tmp_path / "agent.conf"
    conf.write_text(
        f"[DEFAULT]\nhost = cn1\nstate_path = {tmp_path}\nreserved_host_memory_mb = 0\n"
        f"[compute]\ninstances_path = {tmp_path}/instances\n"
        "[libvirt]\nreconnect_attempts = 1\n" + extra
    )
    return subprocess.run(
        [sys.executable, "-m", "agent.cli.main", "discover", "--config", str(conf), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )


def test_discover_json_host_and_instances(tmp_path):
    host = FIXTURES / "gpu-host"
    r = run(
        tmp_path,
        "--driver",
        "libvirt",
        "--libvirt-uri",
        f"test://{host / 'host.xml'}",
        "--format",
        "json",
        extra=f"capabilities_file = {host / 'capabilities.xml'}\n"
        "[numa]\nmodel_in_placement = true\n[devices]\nenabled_mdev_types = nvidia-35\n",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["driver"] == "libvirt"
    (node,) = doc["nodes"]
    providers = {p["name"]: p for p in node["providers"]}
    assert set(providers) == {
        "cn1",
        "cn1_NUMA0",
        "cn1_NUMA1",
        "cn1_pci_0000_86_00_0",
        "cn1_pci_0000_87_00_0",
    }
    assert providers["cn1_pci_0000_86_00_0"]["inventories"]["VGPU"]["total"] == 16
    gpu = providers["cn1_pci_0000_86_00_0"]["uuid"]
    allocations = node["allocations"]
    assert set(allocations) == {
        "bbbbbbbb-0000-4000-8000-00000000000a",
        "bbbbbbbb-0000-4000-8000-00000000000b",
    }
    for record in allocations.values():
        assert record["allocations"][gpu]["resources"] == {"VGPU": 1}


def test_discover_tree_output_and_warnings(tmp_path):
    r = run(
        tmp_path,
        "--driver",
        "libvirt",
        "--libvirt-uri",
        f"test://{FIXTURES / 'small-host' / 'host.xml'}",
    )
    assert r.returncode == 0, r.stderr
    assert "node cn1" in r.stdout and "cccccccc-0000-4000-8000-000000000004" in r.stdout
    assert "domain vm-odd-hostdevs (cccccccc-0000-4000-8000-000000000005)" in r.stderr


def test_unreachable_libvirt_exits_1_with_one_line(tmp_path):
    missing = tmp_path / "nowhere.xml"
    r = run(tmp_path, "--driver", "libvirt", "--libvirt-uri", f"test://{missing}")
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"compute-agent discover: libvirt test://{missing}: virConnectOpen")
