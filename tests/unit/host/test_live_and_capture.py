"""This machine (pyudev, psutil) and capture/replay."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from agent.model.exceptions import ConfigError
from drivers.host.capture import capture
from drivers.host.discovery import discover_host
from drivers.host.memory import discover_memory
from drivers.host.pci import PCI_DIR, enumerate_pci, read_pci_functions
from drivers.host.settings import HostSettings, settings_from_conf
from drivers.host.sysfs import SysfsReader
from tests.helpers.paths import SYSFS as FIXTURES
from tests.helpers.sysfs_fixtures import make_conf


class ListingReader(SysfsReader):
    """The real /sys read as if it were a fixture (directory listing, no pyudev)."""

    @property
    def is_live(self) -> bool:
        return False


def test_pyudev_and_listing_give_the_same_records():
    assert SysfsReader("/").is_live
    names = enumerate_pci(SysfsReader("/"))
    assert names and names == sorted(os.listdir(f"/sys/{PCI_DIR[4:]}"))
    assert names == enumerate_pci(ListingReader("/"))
    assert read_pci_functions(SysfsReader("/")) == read_pci_functions(ListingReader("/"))


def test_memory_psutil_and_meminfo_agree():
    assert discover_memory("/").total_mb == psutil.virtual_memory().total // 2**20
    assert discover_memory(ListingReader("/")).total_mb == psutil.virtual_memory().total // 2**20


def test_this_machine(tmp_path):
    d = discover_host(HostSettings(nodename="me", instances_path=str(tmp_path)))
    res = d.resources
    assert res.vcpus == psutil.cpu_count(logical=True)
    assert res.memory_mb == psutil.virtual_memory().total // 2**20
    assert res.disk_gb == psutil.disk_usage(str(tmp_path)).total // 2**30
    assert d.cpu.topology.online == set(os.sched_getaffinity(0)) | d.cpu.topology.online
    assert set(d.functions) == {f"{n}" for n in os.listdir("/sys/bus/pci/devices")}
    assert res.gpus == ()  # no mdev_bus here


@pytest.mark.parametrize(
    "fixture", ["two-socket", "sriov-nic", "gpu-host", "nvidia-vgpu", "no-numa", "broken"]
)
def test_capture_replays_identically(tmp_path, fixture):
    conf = make_conf(
        tmp_path,
        fixture,
        pci={"device_spec": ['{"vendor_id": "*"}']},
        devices={"enabled_mdev_types": ["nvidia-35", "nvidia-470"]},
    )
    settings = settings_from_conf(conf)
    result = capture(settings, tmp_path / "cap")
    replay = discover_host(
        settings.__class__(
            **{
                **{f: getattr(settings, f) for f in settings.__slots__},
                "sysfs_root": str(tmp_path / "cap"),
            }
        )
    )
    assert replay.resources == result.discovery.resources
    assert replay.functions == result.discovery.functions

    # Same paths and consequences; an unreadable file is captured as absent,
    # so only the reason may differ.
    def shape(warnings, base):
        return [(w.replace(base, "").split(": ")[0], w.rsplit("; ", 1)[-1]) for w in warnings]

    assert shape(result.discovery.warnings, str(FIXTURES / fixture)) == shape(
        replay.warnings, str(tmp_path / "cap")
    )
    for path in (tmp_path / "cap").rglob("*"):
        if path.is_symlink():
            assert not os.readlink(path).startswith("/")
            assert path.resolve().is_relative_to((tmp_path / "cap").resolve()), path


def test_capture_of_this_machine(tmp_path):
    settings = HostSettings(nodename="me", instances_path=str(tmp_path))
    result = capture(settings, tmp_path / "cap")
    cap = tmp_path / "cap"
    replay = discover_host(
        HostSettings(nodename="me", instances_path=str(tmp_path), sysfs_root=str(cap))
    )
    assert replay.resources == result.discovery.resources
    assert replay.functions == result.discovery.functions
    names = {p.name for p in cap.rglob("*") if p.is_file()}
    assert not names & {"config", "resource0", "resource", "rom", "environ"}
    assert all(" rw 0 0" in line for line in (cap / "proc/self/mounts").read_text().splitlines())
    assert len((cap / "proc/cpuinfo").read_text().splitlines()) == 3
    with pytest.raises(ConfigError, match="not an empty directory"):
        capture(settings, cap)


def test_fixture_symlinks_are_relative_and_resolve():
    for path in FIXTURES.rglob("*"):
        if path.is_symlink():
            assert not os.readlink(path).startswith("/"), path
            assert path.resolve().is_relative_to(FIXTURES.resolve()), path
            assert path.exists(), path
    assert Path(FIXTURES / "no-numa/sys/devices/system").exists()
    assert not Path(FIXTURES / "no-numa/sys/devices/system/node").exists()
