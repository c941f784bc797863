"""Remote-managed VFs and the card serial number of PCI VPD, read by the host driver as
nova 34 reads it through libvirt (nova/pci/devspec.py drops a remote-managed device without
one; nova/virt/libvirt/host.py falls back to the VF's PF's VPD)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from drivers.device_views import REASON_NO_SPEC
from drivers.host.device_spec import parse_device_specs
from drivers.host.devices import device_views
from drivers.host.discovery import discover_host
from drivers.host.settings import HostSettings
from drivers.host.vpd import vpd_serial
from tests.helpers.paths import REPO

SYSFS = REPO / "tests" / "fixtures" / "sysfs"
# The fields of libvirt's tests/nodedevschemadata/pci_0000_42_00_0_vpd.xml (a BlueField-2)
# laid out as PCI Local Bus 3.0 Appendix I writes them: identifier string (large resource
# 0x82), VPD-R (0x90: PN, EC, SN, RV keywords), end tag (0x78).
NAME = b"BlueField-2 DPU 25GbE Dual-Port SFP56"
KEYWORDS = b"PN\x0fMBF2H332A-AEEOT" + b"EC\x02B1" + b"SN\x0cMT2113X00000" + b"RV\x01\x00"
IMAGE = (
    b"\x82" + len(NAME).to_bytes(2, "little") + NAME
    + b"\x90" + len(KEYWORDS).to_bytes(2, "little") + KEYWORDS
    + b"\x78"
)  # fmt: skip
REMOTE = '{"vendor_id": "8086", "product_id": "154c", "remote_managed": "true"}'


def test_the_serial_number_of_a_vpd_image():
    assert vpd_serial(IMAGE) == "MT2113X00000"
    assert vpd_serial(IMAGE.replace(b"SN\x0cMT2113X00000", b"SN\x0c            ")) is None
    assert vpd_serial(IMAGE.replace(b"SN\x0c", b"XX\x0c")) is None
    assert vpd_serial(IMAGE[:10]) is None  # cut in the identifier string
    assert vpd_serial(b"") is None


def settings(root: Path, *specs: str) -> HostSettings:
    return HostSettings(
        nodename="cn1",
        sysfs_root=str(root),
        instances_path=str(root),
        specs=parse_device_specs(list(specs)),
    )


def discover(root: Path, *specs: str):
    return discover_host(settings(root, *specs)).resources


def test_remote_managed_vfs_need_a_serial_number_on_the_vf_or_its_pf(tmp_path, caplog):
    root = tmp_path / "sysfs"
    shutil.copytree(SYSFS / "sriov-nic", root, symlinks=True)
    with caplog.at_level(logging.WARNING):
        bare = discover(root, REMOTE)
    assert not bare.sriov_pfs and not bare.pci_devices
    assert "remote_managed needs a card serial number" in caplog.text
    shown = {
        v.address: v
        for v in device_views(discover_host(settings(root, REMOTE)), settings(root, REMOTE))
    }
    pf = shown["0000:3b:00.0"]
    assert not pf.offered and pf.reason_kind == REASON_NO_SPEC
    assert "remote_managed and neither the VFs nor the PF have a card serial" in pf.reason
    # nova's fallback: the PF's VPD serves its VFs.
    (root / "sys/bus/pci/devices/0000:3b:00.0/vpd").write_bytes(IMAGE)
    pfs = {pf.address: pf for pf in discover(root, REMOTE).sriov_pfs}
    assert set(pfs) == {"0000:3b:00.0"} and pfs["0000:3b:00.0"].remote_managed
    # A later spec without the tag still offers what the remote-managed one leaves.
    plain = '{"vendor_id": "8086", "product_id": "154c"}'
    pfs = {pf.address: pf for pf in discover(root, REMOTE, plain).sriov_pfs}
    assert pfs["0000:3b:00.0"].remote_managed and not pfs["0000:3b:00.1"].remote_managed


def test_an_unreadable_vpd_costs_a_warning_not_the_host(tmp_path, caplog):
    root = tmp_path / "sysfs"
    shutil.copytree(SYSFS / "sriov-nic", root, symlinks=True)
    (root / "sys/bus/pci/devices/0000:3b:00.0/vpd").mkdir()  # read() fails: EISDIR
    (root / "sys/bus/pci/devices/0000:3b:00.1/vpd").write_bytes(IMAGE)
    with caplog.at_level(logging.WARNING):
        pfs = {pf.address for pf in discover(root, REMOTE).sriov_pfs}
    assert pfs == {"0000:3b:00.1"}
    assert "0000:3b:00.0/vpd" in caplog.text and "card serial number of 0000:3b:00.0" in caplog.text
