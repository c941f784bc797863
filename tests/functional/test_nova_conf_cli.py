"""A devstack nova.conf, unchanged, runs ``discover`` and ``run --once`` (libvirt test driver).

tests/fixtures/nova/devstack-nova.conf is given as it is, with a second file
for what only this machine can say: the libvirt test driver's URI (the
numa-sriov host), a state directory, and Placement embedded (its
``[placement]`` password block names a keystone this test has not got).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOVA_CONF = REPO / "tests" / "fixtures" / "nova" / "devstack-nova.conf"
HOST = REPO / "tests" / "fixtures" / "libvirt" / "numa-sriov"


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    local = tmp_path / "local.conf"
    local.write_text(
        f"[DEFAULT]\nhost = cn1\nstate_path = {tmp_path}\ninstances_path = {tmp_path}/i\n"
        f"[libvirt]\nconnection_uri = test://{HOST / 'host.xml'}\n"
        f"capabilities_file = {HOST / 'capabilities.xml'}\nreconnect_attempts = 1\n"
        "[placement]\nembedded = true\n"
    )
    command = [sys.executable, "-m", "agent.cli.main", *args]
    command += ["--config", str(NOVA_CONF), "--config", str(local)]
    return subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)


def test_devstack_nova_conf_discover_and_run_once(tmp_path):
    r = cli(tmp_path, "discover", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "neither an option of this agent nor of nova" not in r.stderr
    doc = json.loads(r.stdout)
    assert doc["driver"] == "libvirt"  # [DEFAULT] compute_driver = libvirt.LibvirtDriver
    (node,) = doc["nodes"]
    providers = {p["name"]: p for p in node["providers"]}
    root = providers["cn1"]
    assert {"COMPUTE_NODE", "OWNER_NOVA", "COMPUTE_VOLUME_EXTEND"} <= set(root["traits"])
    # virt_type = qemu: the qemu VIF models (lan9118 is qemu's, not kvm's).
    assert "COMPUTE_NET_VIF_MODEL_LAN9118" in root["traits"]
    # cpu_allocation_ratio = 0.0 is unset: a new inventory gets initial 4.0.
    assert root["inventories"]["VCPU"]["allocation_ratio"] == 4.0
    # passthrough_whitelist (device_spec's old name) + report_in_placement: nova's shape.
    nvme = {n: p for n, p in providers.items() if n.startswith("cn1_0000:")}
    assert nvme and all(
        set(p["inventories"]) == {"CUSTOM_PCI_8086_0A54"}
        and "COMPUTE_MANAGED_PCI_DEVICE" in p["traits"]
        and p["parent_provider_uuid"] == root["uuid"]
        for p in nvme.values()
    )

    r = cli(tmp_path, "run", "--once")
    record = json.loads((tmp_path / "last_cycle.json").read_text())
    (node,) = record["nodes"]
    assert node["ok"] and record["startup"] and node["providers"] == len(providers), record
    # The fixture's domains were not built for devstack's configuration (pinned CPUs with no
    # cpu_dedicated_set, disks larger than this machine's): those writes are refused, and
    # an honest run reports the cycle degraded (exit 1) rather than ok.
    refused = node["problems"]
    assert all("allocation not written" in p for p in refused), refused
    assert (r.returncode, record["status"]) == ((1, "degraded") if refused else (0, "ok"))
