"""Faults real sysfs trees showed (issue 13): each read right or refused clearly."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from agent.cli import main as cli
from drivers.host.capture import capture
from drivers.host.discovery import discover_host
from drivers.host.disk import mounts_essentials, parse_mounts
from drivers.host.settings import HostSettings
from drivers.host.synthetic import FakeHost, FakePci, two_socket_cpus, write_sysfs
from drivers.records import cells_mib


def _settings(root: Path, tmp_path: Path) -> HostSettings:
    from drivers.host.device_spec import parse_device_specs

    return HostSettings(
        nodename="cn1",
        sysfs_root=str(root),
        instances_path=str(tmp_path / "instances"),
        specs=parse_device_specs(['{"vendor_id": "*"}']),
    )


def _two_cells(root: Path) -> Path:
    """Two cells whose MemTotal KiB both end in 1023: each rounded down alone loses 1 MiB."""
    cpus = two_socket_cpus(2, 2, 1)
    numa = [(0, [0, 1], 1024 * 1000 + 1023, {}), (1, [2, 3], 1024 * 2000 + 1023, {})]
    return write_sysfs(
        root,
        FakeHost(
            cpus=cpus,
            numa=numa,
            memtotal_kb=sum(n[2] for n in numa),
            pci=[
                FakePci("0000:01:00.0", "8086", "0a54", "010802", numa=0, iommu_group=1),
                FakePci("0000:02:00.0", "8086", "0a54", "010802", numa=1, iommu_group=2),
            ],
        ),
    )


def test_numa_cells_sum_to_the_flat_memory_total(tmp_path):
    d = discover_host(_settings(_two_cells(tmp_path / "h"), tmp_path))
    assert d.resources.memory_mb == (1024 * 3000 + 2046) // 1024 == 3001
    assert [c.memory_mb for c in d.resources.numa_cells] == [1000, 2001]
    assert sum(c.memory_mb for c in d.resources.numa_cells) == d.resources.memory_mb


def test_capture_carries_an_unreadable_iommu_group(tmp_path):
    root = _two_cells(tmp_path / "h")
    link = root / "sys/bus/pci/devices/0000:02:00.0/iommu_group"
    link.unlink()
    link.mkdir()  # a directory where the kernel puts a link
    settings = _settings(root, tmp_path)
    original = discover_host(settings)
    assert "0000:02:00.0" not in original.functions
    assert any(str(link) in w for w in original.warnings)
    capture(settings, tmp_path / "cap")
    replay = discover_host(_settings(tmp_path / "cap", tmp_path))
    assert replay.functions == original.functions
    assert replay.resources == original.resources


@pytest.mark.parametrize("kind", ["garbled", "unreadable"])
def test_capture_carries_files_that_cannot_be_used(tmp_path, kind):
    root = _two_cells(tmp_path / "h")
    numa = root / "sys/bus/pci/devices/0000:01:00.0/numa_node"
    numa.unlink()
    if kind == "garbled":
        numa.write_bytes(b"\xff\xfe0\n")
    else:
        os.symlink("numa_node", numa)  # ELOOP: unreadable even for root
    settings = _settings(root, tmp_path)
    original = discover_host(settings)
    assert "0000:01:00.0" not in original.functions
    capture(settings, tmp_path / "cap")
    replay = discover_host(_settings(tmp_path / "cap", tmp_path))
    assert replay.resources == original.resources
    assert replay.functions == original.functions


def _exit_and_stderr(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("missing", ["proc", "cpu"])
def test_a_root_that_cannot_be_read_exits_2_with_one_line(tmp_path, capsys, missing):
    root = _two_cells(tmp_path / "h")
    if missing == "proc":
        shutil.rmtree(root / "proc")
        named = str(root / "proc")
    else:
        shutil.rmtree(root / "sys/devices/system/cpu")
        named = str(root / "sys/devices/system/cpu")
    for command in ("discover", "capture"):
        args = [command, "--sysfs-root", str(root)]
        if command == "discover":
            args += ["--driver", "host"]
        else:
            args += [str(tmp_path / f"cap-{missing}")]
        code, err = _exit_and_stderr(capsys, *args)
        assert code == 2
        assert len(err.strip().splitlines()) == 1
        assert named in err and "Traceback" not in err


def _with_offline_cpu(root: Path, online_file: bool) -> Path:
    cpus = two_socket_cpus(1, 4, 1)
    write_sysfs(root, FakeHost(cpus=cpus[:3]))
    # cpu3 exists but is offline: the kernel keeps its directory, drops its topology.
    cpu3 = root / "sys/devices/system/cpu/cpu3"
    cpu3.mkdir()
    (cpu3 / "online").write_text("0\n")
    if not online_file:
        (root / "sys/devices/system/cpu/online").unlink()
    return root


@pytest.mark.parametrize("online_file", [True, False])
def test_an_offline_cpu_is_a_fact_not_a_warning(tmp_path, caplog, online_file):
    root = _with_offline_cpu(tmp_path / "h", online_file)
    with caplog.at_level(logging.INFO):
        d = discover_host(_settings(root, tmp_path))
    assert d.resources.vcpus == 3
    assert not [w for w in d.warnings if "cpu3" in w or "CPU 3" in w]
    assert not [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING and ("cpu3" in r.getMessage() or "CPU 3" in r.getMessage())
    ]
    assert any(r.levelno == logging.INFO and "offline" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("kib", "mib"),
    [
        ([1024 * 1000 + 1023, 1024 * 2000 + 1023], [1000, 2001]),
        ([1023, 1023, 1023, 1023], [0, 1, 1, 1]),
        ([2048, 0, 1024], [2, 0, 1]),
        ([], []),
    ],
)
def test_cells_mib_sum_to_the_total_and_stay_within_one_mib(kib, mib):
    got = list(cells_mib(kib))
    assert got == mib
    assert sum(got) == sum(kib) // 1024
    assert all(abs(m * 1024 - k) < 1024 * 2 for m, k in zip(got, kib, strict=True))


def test_mount_table_capture_keeps_a_garbled_line_garbled():
    text = "/dev/sda1 / ext4 rw,relatime 0 0\nnfs-server:/export\n"
    kept = mounts_essentials(text)
    assert "nfs-server:/export" in kept and "relatime" not in kept
    with pytest.raises(ValueError):
        parse_mounts(kept)


def test_a_die_repeating_core_ids_is_not_hyperthreading(tmp_path):
    root = write_sysfs(tmp_path / "h", FakeHost(cpus=[(0, 0, 0), (1, 0, 0)]))
    for cpu, die in ((0, 0), (1, 1)):
        (root / f"sys/devices/system/cpu/cpu{cpu}/topology/die_id").write_text(f"{die}\n")
    d = discover_host(_settings(root, tmp_path))
    assert d.cpu.topology.cores == 2 and d.cpu.topology.threads_per_core == 1
    assert "HW_CPU_HYPERTHREADING" not in d.resources.traits
