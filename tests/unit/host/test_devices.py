"""``discover --devices``: every PCI function, names from pci.ids, and why it is offered or not.

Each reason is shown on a sysfs fixture (or a copy changed in one place),
and the view is checked to agree with what discovery offers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent.cli.commands import discover as discover_command
from agent.cli.main import main
from agent.cli.pci_ids import SEARCH_PATHS, PciIds
from drivers.device_views import (
    REASON_IN_USE_BY_HOST,
    REASON_MDEV_NOT_ENABLED,
    REASON_NO_SPEC,
    REASON_OFFERED,
    REASON_PARENT_NOT_OFFERED,
    REASON_VF_OF_OFFERED,
)
from drivers.host.device_spec import parse_device_specs
from drivers.host.devices import device_views
from drivers.host.discovery import discover_host
from drivers.host.settings import HostSettings
from tests.helpers.paths import REPO

SYSFS = REPO / "tests" / "fixtures" / "sysfs"
PCI_IDS = REPO / "tests" / "fixtures" / "pci-ids" / "pci.ids"
X710_VF = '{"vendor_id": "8086", "product_id": "154c", "physical_network": "physnet1"}'


def views(root: Path, specs: tuple[str, ...] = (), mdev_types: tuple[str, ...] = ()):
    settings = HostSettings(
        nodename="cn1",
        sysfs_root=str(root),
        instances_path=str(root),
        specs=parse_device_specs(list(specs)),
        enabled_mdev_types=mdev_types,
    )
    discovery = discover_host(settings)
    return {v.address: v for v in device_views(discovery, settings)}, discovery


def test_every_function_is_shown_and_agrees_with_what_is_offered():
    by_address, discovery = views(SYSFS / "sriov-nic", (X710_VF,))
    assert set(by_address) == set(discovery.functions)
    pf = by_address["0000:3b:00.0"]
    assert (pf.offered, pf.offered_as, pf.reason_kind) == (True, "SRIOV_NET_VF", REASON_OFFERED)
    assert (pf.driver, pf.netdevs, pf.numa_node, pf.num_vfs, pf.total_vfs) == (
        "i40e",
        ("ens1f0",),
        0,
        64,
        64,
    )
    assert "physnet physnet1" in pf.reason
    vf = by_address["0000:3b:02.0"]
    assert vf.physfn == "0000:3b:00.0" and vf.reason_kind == REASON_VF_OF_OFFERED
    offered_pfs = {p.address for p in discovery.resources.sriov_pfs if p.num_vfs}
    shown = {a for a, v in by_address.items() if v.offered_as == "SRIOV_NET_VF" and not v.physfn}
    assert shown == offered_pfs


def test_a_pf_named_itself_is_offered_whole_and_its_vfs_are_not():
    """A spec with the PF's own ids (8086:1572) matches none of its VFs (8086:154c): nova's
    type-PF device, one whole device; the VFs are not offered."""
    by_address, discovery = views(
        SYSFS / "sriov-nic", ('{"vendor_id": "8086", "product_id": "1572"}',)
    )
    pf = by_address["0000:3b:00.0"]
    assert pf.offered and pf.offered_as is None and pf.reason_kind == REASON_OFFERED
    assert {d.address for d in discovery.resources.pci_devices} == {"0000:3b:00.0", "0000:3b:00.1"}
    assert not discovery.resources.sriov_pfs
    vf = by_address["0000:3b:02.0"]
    assert not vf.offered and "offered whole" in vf.reason


def test_no_device_spec_match_and_vfs_of_a_pf_not_offered():
    by_address, _ = views(SYSFS / "sriov-nic")
    pf = by_address["0000:3b:00.0"]
    assert not pf.offered and pf.reason_kind == REASON_NO_SPEC
    assert by_address["0000:3b:02.0"].reason_kind == REASON_PARENT_NOT_OFFERED
    nvme, _ = views(SYSFS / "two-socket")
    assert nvme["0000:5e:00.0"].reason == "no [pci] device_spec matches"
    whole, _ = views(SYSFS / "two-socket", ('{"vendor_id": "8086", "product_id": "0a54"}',))
    assert whole["0000:5e:00.0"].offered and whole["0000:5e:00.0"].reason_kind == REASON_OFFERED


def test_a_matched_pf_without_vfs_is_offered_whole(tmp_path):
    """nova's libvirt driver reports an SR-IOV capable PF as a type-PF device whatever
    its VF count (host.py ``_get_device_type``): a spec naming it offers it whole."""
    root = tmp_path / "sysfs"
    shutil.copytree(SYSFS / "sriov-nic", root, symlinks=True)
    pf_dir = root / "sys/bus/pci/devices/0000:3b:00.1"
    for link in pf_dir.glob("virtfn*"):
        vf = pf_dir.parent / link.readlink().name
        link.unlink()
        if vf.is_symlink() or not vf.is_dir():
            vf.unlink()
        else:
            shutil.rmtree(vf)
    (pf_dir / "sriov_numvfs").write_text("0\n")
    by_address, _ = views(root, ('{"vendor_id": "8086", "product_id": "1572"}',))
    pf = by_address["0000:3b:00.1"]
    assert pf.offered and pf.reason_kind == REASON_OFFERED
    assert "matches the PF itself and none of its 0 VFs" in pf.reason
    assert by_address["0000:3b:00.0"].offered  # its sibling still has VFs


def test_gpus_mdev_type_not_enabled_and_in_use_by_the_host():
    off, _ = views(SYSFS / "gpu-host")
    # 86:00.0 holds mdevs already (offered by their type); 87:00.0 has none.
    assert off["0000:86:00.0"].offered_as == "VGPU"
    gpu = off["0000:87:00.0"]
    assert not gpu.offered and gpu.reason_kind == REASON_MDEV_NOT_ENABLED
    assert gpu.mdev_types == ("nvidia-35", "nvidia-36", "nvidia-37", "nvidia-38")
    spec = '{"vendor_id": "10de", "product_id": "13f2"}'
    on, discovery = views(SYSFS / "gpu-host", (spec,), ("nvidia-36",))
    assert not discovery.resources.pci_devices  # not passed through as well
    gpu = on["0000:87:00.0"]
    assert gpu.offered_as == "VGPU" and gpu.reason_kind == REASON_IN_USE_BY_HOST
    assert "nvidia-36 enabled" in gpu.reason


def test_pci_ids_names_vendors_devices_and_classes():
    ids = PciIds.load([str(PCI_IDS)])
    assert ids.vendor("8086") == "Intel Corporation"
    assert ids.device("10DE", "13f2") == "GM204GL [Tesla M60]"
    assert ids.class_name("010802") == "NVM Express"
    assert ids.class_name("020000") == "Ethernet controller"  # no prog-if entry
    assert ids.class_name("0c0330") == ""
    missing = PciIds.load([str(PCI_IDS.parent / "absent")])
    assert missing.path is None and missing.vendor("8086") == ""


def run_discover(capsys, tmp_path, *args: str) -> tuple[int, str]:
    conf = tmp_path / "c.conf"
    conf.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\n[pci]\ndevice_spec = {X710_VF}\n"
    )
    code = main(["discover", "--devices", "--config", str(conf), "--driver", "host", *args])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("with_names", [True, False])
def test_discover_devices_json_with_and_without_pci_ids(capsys, tmp_path, with_names):
    ids = str(PCI_IDS) if with_names else str(tmp_path / "no-pci.ids")
    code, out = run_discover(
        capsys, tmp_path, "--sysfs-root", str(SYSFS / "sriov-nic"), "--pci-ids", ids, "--format",
        "json",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["format"] == "compute-agent.devices/1"
    (node,) = doc["nodes"]
    pf = next(d for d in node["devices"] if d["address"] == "0000:3b:00.0")
    assert pf["vendor_id"] == "8086" and pf["product_id"] == "1572"
    if with_names:
        assert pf["vendor_name"] == "Intel Corporation"
        assert pf["product_name"] == "Ethernet Controller X710 for 10GbE SFP+"
        assert pf["class_name"] == "Ethernet controller"
    else:
        assert (pf["vendor_name"], pf["product_name"], pf["class_name"]) == ("", "", "")
    assert pf["offered_as"] == "SRIOV_NET_VF" and pf["reason_kind"] == "offered"


def test_discover_devices_in_a_pipe_is_one_tab_separated_line_per_device(capsys, tmp_path):
    code, out = run_discover(
        capsys, tmp_path, "--sysfs-root", str(SYSFS / "sriov-nic"), "--pci-ids", str(PCI_IDS)
    )
    assert code == 0
    lines = out.splitlines()
    header = lines[0].split("\t")
    assert header[0] == "ADDRESS" and header[-1] == "WHY"
    rows = [line.split("\t") for line in lines[1:]]
    assert all(len(r) == len(header) for r in rows)
    pf = next(r for r in rows if r[0] == "0000:3b:00.0")
    # the name, and beside it the id that device_spec and the resource class are written with
    assert pf[header.index("DEVICE")] == (
        "Intel Corporation Ethernet Controller X710 for 10GbE SFP+ (8086:1572)"
    )
    assert pf[header.index("OFFERED AS")] == "SRIOV_NET_VF"


def test_discover_devices_without_pci_ids_shows_the_ids(capsys, tmp_path):
    absent = str(tmp_path / "no-pci.ids")
    code, out = run_discover(
        capsys, tmp_path, "--sysfs-root", str(SYSFS / "gpu-host"), "--pci-ids", absent
    )
    assert code == 0
    header, *rows = (line.split("\t") for line in out.splitlines())
    gpu = next(r for r in rows if r[0] == "0000:87:00.0")
    assert gpu[header.index("DEVICE")] == "10de:13f2"


def test_a_vendor_known_without_its_device_keeps_the_id(capsys, tmp_path):
    ids = tmp_path / "pci.ids"
    ids.write_text("10de  NVIDIA Corporation\n\t13f2  GM204GL [Tesla M60]\n")
    sysfs = tmp_path / "sysfs"
    shutil.copytree(SYSFS / "gpu-host", sysfs, symlinks=True)
    (sysfs / "sys/bus/pci/devices/0000:87:00.0/device").write_text("0x2335\n")
    code, out = run_discover(capsys, tmp_path, "--sysfs-root", str(sysfs), "--pci-ids", str(ids))
    assert code == 0
    header, *rows = (line.split("\t") for line in out.splitlines())
    device = {r[0]: r[header.index("DEVICE")] for r in rows}
    assert device["0000:86:00.0"] == "NVIDIA Corporation GM204GL [Tesla M60] (10de:13f2)"
    assert device["0000:87:00.0"] == "NVIDIA Corporation (10de:2335)"


def test_the_system_database_is_searched_first_where_debian_installs_it():
    # Debian's (and Ubuntu's) pci.ids package; hwdata's path on Fedora and RHEL
    assert SEARCH_PATHS[0] == "/usr/share/misc/pci.ids"
    assert "/usr/share/hwdata/pci.ids" in SEARCH_PATHS


def test_without_pci_ids_discover_reads_the_first_system_database(capsys, tmp_path, monkeypatch):
    """The search itself, on stand-ins for the system paths (the test does not depend on
    what this machine has installed): the first that exists is read."""
    monkeypatch.setattr(
        discover_command, "SEARCH_PATHS", (str(tmp_path / "absent.ids"), str(PCI_IDS))
    )
    code, out = run_discover(
        capsys, tmp_path, "--sysfs-root", str(SYSFS / "sriov-nic"), "--format", "json"
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["pci_ids"] == str(PCI_IDS)
    pf = next(d for d in doc["nodes"][0]["devices"] if d["address"] == "0000:3b:00.0")
    assert pf["vendor_name"] == "Intel Corporation"
    monkeypatch.setattr(discover_command, "SEARCH_PATHS", (str(tmp_path / "absent.ids"),))
    code, out = run_discover(
        capsys, tmp_path, "--sysfs-root", str(SYSFS / "sriov-nic"), "--format", "json"
    )
    assert code == 0
    assert json.loads(out)["pci_ids"] is None
