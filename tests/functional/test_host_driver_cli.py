"""``compute-agent discover --driver host`` and ``capture`` as an operator runs them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil

from agent.shape.layout import OWNER_TRAIT

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    conf = tmp_path / "agent.conf"
    if not conf.exists():
        conf.write_text(
            f"[DEFAULT]\nhost = cn1\nstate_path = {tmp_path}\n"
            f"[compute]\ninstances_path = {tmp_path}/instances\n"
        )
    return subprocess.run(
        [sys.executable, "-m", "agent.cli.main", *args[:1], "--config", str(conf), *args[1:]],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )


def providers(out: str) -> dict[str, dict]:
    (node,) = json.loads(out)["nodes"]
    return {p["name"]: p for p in node["providers"]}


def test_discover_this_machine_matches_psutil(tmp_path):
    r = run("discover", "--driver", "host", "--format", "json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["driver"] == "host"
    root = providers(r.stdout)["cn1"]
    inv = root["inventories"]
    assert inv["VCPU"]["total"] == psutil.cpu_count(logical=True)
    assert inv["MEMORY_MB"]["total"] == psutil.virtual_memory().total // 2**20
    assert inv["MEMORY_MB"]["reserved"] == 512
    assert inv["DISK_GB"]["total"] == psutil.disk_usage(str(tmp_path)).total // 2**30
    hardware = set(root["traits"]) - {OWNER_TRAIT, "COMPUTE_NODE"}
    assert all(t.startswith(("HW_CPU_", "HW_ARCH_")) for t in hardware)
    assert doc["nodes"][0]["allocations"] == {}


def test_discover_fixture_tree_output(tmp_path):
    r = run(
        "discover",
        "--driver",
        "host",
        "--sysfs-root",
        str(FIXTURES / "sriov-nic"),
        tmp_path=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "node cn1" in r.stdout
    assert re.search(r"VCPU\b.*\btotal 16\b", r.stdout)


def test_capture_then_replay(tmp_path):
    conf = tmp_path / "agent.conf"
    conf.write_text(
        f"[DEFAULT]\nhost = cn1\nstate_path = {tmp_path}\n"
        f"[compute]\ninstances_path = {tmp_path}/instances\n"
        "[devices]\nenabled_mdev_types = nvidia-35\n"
        '[pci]\ndevice_spec = {"vendor_id": "8086", "physical_network": "physnet1"}\n'
    )
    cap = tmp_path / "cap"
    r = run("capture", "--sysfs-root", str(FIXTURES / "gpu-host"), str(cap), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("captured ") and str(cap) in r.stdout
    outs = [
        run(
            "discover",
            "--driver",
            "host",
            "--format",
            "json",
            "--sysfs-root",
            str(root),
            tmp_path=tmp_path,
        )
        for root in (FIXTURES / "gpu-host", cap)
    ]
    assert all(o.returncode == 0 for o in outs)
    assert outs[0].stdout == outs[1].stdout
    assert providers(outs[1].stdout)["cn1_pci_0000_87_00_0"]["inventories"]["VGPU"]["total"] == 16
    this = run("capture", str(tmp_path / "live"), tmp_path=tmp_path)
    assert this.returncode == 0, this.stderr
    assert os.path.exists(tmp_path / "live/proc/meminfo")


def test_bad_device_spec_exits_2_with_one_line(tmp_path):
    conf = tmp_path / "agent.conf"
    conf.write_text(
        f'[DEFAULT]\nstate_path = {tmp_path}\n[pci]\ndevice_spec = {{"vendor": "8086"}}\n'
    )
    r = run("discover", "--driver", "host", tmp_path=tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert '[pci] device_spec {"vendor": "8086"}: unknown key(s)' in lines[0]
