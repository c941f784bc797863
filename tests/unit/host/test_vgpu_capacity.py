"""Vendor-VFIO vGPU in mixed-size mode (issue 40): the card's ceiling counts every type,
and a type's new instances are bounded by the framebuffer left.

The card of the issue (tests/helpers/vendor_vgpu.py, provenance in
tests/fixtures/sysfs/README.md): an RTX PRO 6000 Blackwell Server Edition, 48 VFs, in
mixed-size mode holding one DC-4Q, one DC-48Q and one DC-2B: 54 of its 96 GiB. DC-2B's
Max Instances is 32 per card, the card's ceiling 32 in both modes. Before: VGPU 32 for
DC-2B (31 free VFs' worth within the maximum, plus the one held). Now: 1 + min(32 - 3,
42 GiB / 2 GiB) = 22. Through sysfs with the operator's maxima (NVML absent: pynvml's
import fails), through NVML faked at its functions, and where neither can know.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from drivers.host.discovery import discover_host
from drivers.host.nvidia import VendorGpu, VendorVf
from drivers.host.nvml import NvmlVgpuTypes, disjoint_placements
from drivers.host.settings import HostSettings
from drivers.host.vgpu_capacity import (
    TypeFacts,
    card_ceiling,
    card_framebuffer,
    framebuffer_from_name,
    more_instances,
)
from tests.helpers.sysfs_fixtures import make_conf, tree_of
from tests.helpers.vendor_vgpu import (
    RTX_DC_2B,
    RTX_DC_4Q,
    RTX_DC_48Q,
    RTX_MAX_MIXED,
    RTX_PRO_6000_MIXED,
    RTX_PRO_6000_MIXED_ALONE,
    fake_pynvml,
    write_host,
)

T2B, T4Q, T48Q = f"nvidia-{RTX_DC_2B}", f"nvidia-{RTX_DC_4Q}", f"nvidia-{RTX_DC_48Q}"
GIB = 1024
MIXED, FRESH = "cn1_pci_0001_c8_00_0", "cn1_pci_0001_04_00_0"
RTX_FRAMEBUFFER = {RTX_DC_2B: 2, RTX_DC_4Q: 4, RTX_DC_48Q: 48}
RTX_NVML = {b"0001:c8:00.0": {RTX_DC_2B: 32, RTX_DC_4Q: 24, RTX_DC_48Q: 2}}


def totals(tmp_path: Path, host: str, enabled: list[str], maxima: dict[str, int]) -> dict:
    devices = {
        "enabled_mdev_types": enabled,
        "vendor_vgpu_inventory": True,
        "vendor_vgpu_max_instances": {t: str(n) for t, n in maxima.items()},
    }
    conf = make_conf(tmp_path, str(write_host(tmp_path, host)), devices=devices)
    return {n: v["inv"]["VGPU"] for n, v in tree_of(conf).items() if "_pci_" in n}


@pytest.mark.parametrize(
    ("enabled", "mixed"),
    [
        # 1 held + min(32 - 1, 32 - 3, 42 // 2, 45 free VFs): the framebuffer binds (old: 32).
        ([T2B], 22),
        # 1 held + min(24 - 1, 29, 42 // 4 = 10, 45) (old: 24).
        ([T4Q], 11),
        # 1 held; no VF lists DC-48Q (42 GiB left) and 42 // 48 = 0 (old: 1 as well).
        ([T48Q], 1),
    ],
)
def test_worked_example_through_sysfs_without_nvml(tmp_path, monkeypatch, enabled, mixed):
    # nvidia-ml-py absent (its import fails); a captured tree never asks NVML anyway.
    monkeypatch.setitem(sys.modules, "pynvml", None)
    got = totals(tmp_path, RTX_PRO_6000_MIXED, enabled, RTX_MAX_MIXED)
    # The fresh GPU beside it: the whole table, 96 GiB, nothing held.
    fresh = {T2B: 32, T4Q: 24, T48Q: 2}[enabled[0]]
    assert got == {MIXED: mixed, FRESH: fresh}


def test_only_the_maxima_of_the_types_offered_still_bound_the_fresh_gpu(tmp_path, monkeypatch):
    """The ceiling and framebuffer come from the operator's table: with DC-48Q's alone,
    the fresh card holds 2 (2 x 48 GiB), the mixed one 1 held and nothing more."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    got = totals(tmp_path, RTX_PRO_6000_MIXED, [T48Q], {T48Q: 2})
    assert got == {MIXED: 1, FRESH: 2}


def test_without_nvml_a_held_type_no_vf_names_leaves_the_framebuffer_unknown(tmp_path, monkeypatch):
    """The card alone: its DC-48Q is named by no VF (42 GiB left, so none lists it) and sysfs
    has no other source of its framebuffer: only what is held is counted, said once."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    root = write_host(tmp_path, RTX_PRO_6000_MIXED_ALONE)
    settings = HostSettings(
        nodename="cn1",
        sysfs_root=str(root),
        instances_path=str(root),
        enabled_mdev_types=(T2B,),
        vendor_vgpu_inventory=True,
        vendor_vgpu_max_instances=tuple(RTX_MAX_MIXED.items()),
    )
    discovery = discover_host(settings, vgpu_types=NvmlVgpuTypes(lambda line: None))
    ((gpu,),) = [discovery.resources.gpus]
    assert gpu.mdev_types[T2B].available_instances == 0
    assert [m.type_id for m in gpu.mdevs] == [T4Q, T48Q, T2B]
    (line,) = [w for w in discovery.warnings if "framebuffer left is unknown" in w]
    assert T48Q in line and "nvidia-ml-py" in line and "creatable_vgpu_types" in line


def _nvml_discovery(tmp_path: Path, monkeypatch, enabled: list[str], **fake) -> tuple:
    asked: list = []
    lib = fake_pynvml(RTX_NVML, RTX_FRAMEBUFFER, asked, **fake)
    monkeypatch.setitem(sys.modules, "pynvml", lib)
    root = write_host(tmp_path, RTX_PRO_6000_MIXED_ALONE)
    settings = HostSettings(
        nodename="cn1",
        sysfs_root=str(root),
        instances_path=str(root),
        enabled_mdev_types=tuple(enabled),
        vendor_vgpu_inventory=True,
    )
    warnings: list[str] = []
    with NvmlVgpuTypes(warnings.append) as nvml:
        discovery = discover_host(settings, vgpu_types=nvml)
    ((gpu,),) = [discovery.resources.gpus]
    more = {t: m.available_instances for t, m in gpu.mdev_types.items()}
    return more, asked, discovery.warnings + tuple(warnings)


def test_worked_example_through_nvml(tmp_path, monkeypatch):
    """NVML gives the held DC-48Q's framebuffer, the whole type table, no operator maxima."""
    more, asked, warnings = _nvml_discovery(tmp_path, monkeypatch, [T2B, T4Q])
    assert more == {T2B: 21, T4Q: 10}  # totals 22 and 11 with the one held of each
    assert ("framebuffer", RTX_DC_48Q) in asked and ("supported", b"0001:c8:00.0") in asked
    assert asked[-1] == ("shutdown",) and not warnings


def test_nvml_creatable_placements_bound_what_the_framebuffer_allows(tmp_path, monkeypatch):
    """Mixed-size mode places vGPUs at slots: NVML's creatable placements tell the
    fragmentation sysfs cannot. DC-2B: 18 free slots of size 1 (of 21 that 42 GiB would
    give); DC-4Q: placements of size 2 at 0..7 overlap, 4 fit at once (of 10)."""
    placements = {
        (b"0001:c8:00.0", RTX_DC_2B): (range(30, 48), 1),
        (b"0001:c8:00.0", RTX_DC_4Q): (range(8), 2),
    }
    more, asked, _ = _nvml_discovery(tmp_path, monkeypatch, [T2B, T4Q], placements=placements)
    assert more == {T2B: 18, T4Q: 4}
    assert ("placements", b"0001:c8:00.0", RTX_DC_2B) in asked


def test_nvml_without_the_placement_call_keeps_the_framebuffer_bound(tmp_path, monkeypatch):
    """An nvidia-ml-py without nvmlDeviceGetVgpuTypeCreatablePlacements, or NVML refusing
    it ("Not Supported": a type without placements): the arithmetic alone."""
    more, *_ = _nvml_discovery(tmp_path / "old", monkeypatch, [T2B], placements=None)
    assert more == {T2B: 21}
    more, *_ = _nvml_discovery(tmp_path / "refused", monkeypatch, [T2B], placements={})
    assert more == {T2B: 21}


def _gpu(held: dict[str, int], listing: dict[str, str], vfs: int = 48) -> VendorGpu:
    out = [VendorVf(f"vf{i}", t, {}) for t, n in held.items() for i in range(n)]
    out += [VendorVf(f"free{i}", None, listing) for i in range(vfs - len(out))]
    return VendorGpu("0001:c8:00.0", tuple(out))


RTX_TABLE = {
    T2B: TypeFacts(32, 2 * GIB),
    T4Q: TypeFacts(24, 4 * GIB),
    T48Q: TypeFacts(2, 48 * GIB),
}


def test_the_ceiling_counts_the_instances_of_every_type():
    """20 DC-2B and 10 DC-4Q held: 80 GiB, 30 vGPUs. DC-2B's own maximum leaves 12 and the
    framebuffer 8; the card's ceiling of 32 leaves 2 (the old count: 12)."""
    gpu = _gpu({T2B: 20, T4Q: 10}, {T2B: "DC-2B", T4Q: "DC-4Q"})
    assert card_ceiling(RTX_TABLE) == 32 and card_framebuffer(RTX_TABLE) == 96 * GIB
    assert more_instances(gpu, T2B, RTX_TABLE) == 2
    assert more_instances(gpu, T4Q, RTX_TABLE) == 2


def test_nothing_more_when_a_bound_is_spent_whatever_is_unknown():
    """The maximum spent: 0, with no need for the framebuffer (an H200's one 141C)."""
    gpu = _gpu({"nvidia-1428": 1}, {}, vfs=32)
    assert more_instances(gpu, "nvidia-1428", {"nvidia-1428": TypeFacts(1, None)}) == 0
    gpu = _gpu({T48Q: 1}, {T2B: "DC-2B"})
    why = more_instances(gpu, T2B, {T2B: TypeFacts(32, 2 * GIB), T48Q: TypeFacts(2, None)})
    assert isinstance(why, str) and T48Q in why


@pytest.mark.parametrize(
    ("name", "mib"),
    [
        ("NVIDIA RTX Pro 6000 Blackwell DC-4Q", 4 * GIB),
        ("NVIDIA RTX Pro 6000 Blackwell DC-1-24Q", 24 * GIB),
        ("NVIDIA H200X-1-18C", 18 * GIB),
        ("NVIDIA H200X-141C", 141 * GIB),
        ("NVIDIA A100D-1-10CME", 10 * GIB),
        ("nvidia-1576", None),  # a held type no VF names: its id only
    ],
)
def test_framebuffer_from_the_type_name(name, mib):
    assert framebuffer_from_name(name) == mib


@pytest.mark.parametrize(
    ("ids", "size", "count"),
    [([], 1, 0), ([0, 1, 2], 1, 3), ([0, 1, 2, 3], 2, 2), ([4, 0, 2], 2, 3), ([0, 3, 6], 4, 2)],
)
def test_disjoint_placements(ids, size, count):
    assert disjoint_placements(ids, size) == count
