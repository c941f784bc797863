"""GPUs whose vGPUs come through NVIDIA's vendor-specific VFIO framework (issue 34).

Hosts from public sysfs listings (tests/helpers/vendor_vgpu.py; provenance in
tests/fixtures/sysfs/README.md): an H200 SXM pair (full-GPU type, capacity used;
MIG-backed type), a fresh H200, an RTX PRO 6000 pair in mixed-size mode (fresh and
used), an A100 whose VFs are mdev parents. Through the host driver and the layout:

* the PCI path's providers equal nova 34's own ``pci_placement_translator`` on the
  same devices and ``[pci] device_spec``;
* VGPU only with ``[devices] vendor_vgpu_inventory``, totals equal to the per-GPU
  maxima (operator option, NVML faked at ``pynvml``'s functions, NVML absent);
* ``[mdev_$(TYPE)] max_instances`` keeps nova's meaning over those totals;
* ``discover --devices`` tells each VF's path as the tree has it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from nova import exception as nova_exception

from agent.model.provider_tree import ProviderTree
from agent.shape.layout import apply_layout
from agent.shape.planning import plan_allocations
from agent.shape.policy import LayoutPolicy
from drivers.device_views import REASON_VENDOR_VGPU_NOT_OFFERED, REASON_VF_OF_OFFERED
from drivers.host import HostDriver
from drivers.host.discovery import discover_host
from drivers.host.nvml import NvmlVgpuTypes
from drivers.host.settings import HostSettings
from drivers.records import Flavor, Instance
from tests.helpers.sysfs_fixtures import make_conf, tree_of
from tests.helpers.vendor_vgpu import (
    H200_1_18C,
    H200_141C,
    H200_MAX,
    RTX_DC_2B,
    RTX_DC_48Q,
    RTX_MAX,
    fake_pynvml,
    nova_pci_providers,
    write_host,
)

SPEC = '{"vendor_id": "10de", "product_id": "%s", "address": "%s", "resource_class": "%s", '
SPEC += '"managed": "no"}'
T141C, T1_18C = f"nvidia-{H200_141C}", f"nvidia-{H200_1_18C}"
T2B, T48Q = f"nvidia-{RTX_DC_2B}", f"nvidia-{RTX_DC_48Q}"
VENDOR_WARNING = "cannot consume VGPU"


def h200_spec(address: str, rc: str) -> str:
    return SPEC % ("2335", address, rc)


def rtx_spec(address: str, rc: str) -> str:
    return SPEC % ("2bb5", address, rc)


# One spec per VF holding a vGPU (the OpenStack products' way), and a glob that also
# matches 8 free VFs of the MIG GPU (2a:01.0-7): nova counts those too.
H200_SPECS = [
    h200_spec("0000:18:00.4", "CUSTOM_H200X_141C"),
    h200_spec("0000:2a:00.4", "CUSTOM_H200X_1_18C"),
    h200_spec("0000:2a:00.5", "CUSTOM_H200X_1_18C"),
    h200_spec("0000:2a:01.*", "CUSTOM_H200X_1_18C"),
]
RTX_SPECS = [
    rtx_spec("0001:c8:00.2", "CUSTOM_DC_48Q"),
    '{"vendor_id": "10de", "product_id": "2bb5", "address": "0001:c8:00.3", '
    '"resource_class": "CUSTOM_DC_48Q", "traits": "CUSTOM_BLACKWELL", "managed": "no"}',
]


def conf_on(tmp_path: Path, host: str, **groups: dict[str, object]):
    return make_conf(tmp_path, str(write_host(tmp_path, host)), **groups)


def pci_children(tree: dict[str, dict]) -> dict[str, dict]:
    return {n: v for n, v in tree.items() if v["parent"] == "cn1" and n.startswith("cn1_0")}


@pytest.mark.parametrize(
    ("host", "specs"),
    [
        ("h200-pair", H200_SPECS),
        ("rtx-pro-6000", [*RTX_SPECS[:1], rtx_spec("0001:c8:00.3", "CUSTOM_DC_48Q")]),
    ],
)
def test_pci_path_providers_are_what_nova_34_computes(tmp_path, host, specs):
    """Issue 34, defect 3: a VF holding a vGPU used to make its GPU a "vGPU parent"
    and its VFs were dropped from PCI offering; now nova's translator is the judge."""
    conf = conf_on(
        tmp_path,
        host,
        pci={"device_spec": specs, "report_in_placement": True},
        devices={"enabled_mdev_types": [T141C, T1_18C, T2B, T48Q]},
    )
    ours = pci_children(tree_of(conf))
    driver = HostDriver(conf)
    discovery = driver.discover()
    nova = nova_pci_providers(discovery.functions, specs, "cn1")
    assert ours and {n: v["inv"] for n, v in ours.items()} == {
        n: v["inventory"] for n, v in nova.items()
    }
    # nova adds OWNER_NOVA itself; the layout's owner trait is taken out by tree_of.
    assert {n: v["traits"] for n, v in ours.items()} == {
        n: v["traits"] - {"OWNER_NOVA"} for n, v in nova.items()
    }
    assert not any("vGPU parent" in w for w in discovery.warnings)


def test_pci_path_warns_of_empty_vfs_and_counts_them_as_nova_does(tmp_path):
    conf = conf_on(tmp_path, "h200-pair", pci={"device_spec": H200_SPECS})
    discovery = HostDriver(conf).discover()
    (empty,) = [w for w in discovery.warnings if "hold no vGPU" in w]
    assert "0000:2a:01.0" in empty and "0000:2a:00.4" not in empty
    pfs = {p.address: p.num_vfs for p in discovery.resources.sriov_pfs}
    assert pfs == {"0000:18:00.0": 1, "0000:2a:00.0": 10}
    # Without report_in_placement, VFs count as SRIOV_NET_VF like any VF, no NIC trait.
    tree = tree_of(conf)
    assert tree["cn1_pci_0000_18_00_0"]["inv"] == {"SRIOV_NET_VF": 1}
    assert tree["cn1_pci_0000_18_00_0"]["traits"] == set()


def test_mixed_types_on_one_gpu_warn_and_mixed_classes_are_refused_as_nova_refuses(tmp_path):
    root = write_host(tmp_path, "rtx-pro-6000")
    vf = root / "sys/bus/pci/devices/0001:c8:00.3/nvidia/current_vgpu_type"
    vf.write_text(f"{RTX_DC_2B}\n")
    same = [
        '{"vendor_id": "10de", "product_id": "2bb5", "resource_class": "CUSTOM_RTX_VGPU", '
        '"address": {"domain": "0001", "bus": "c8", "slot": "00", "function": "[2-7]"}}'
    ]
    conf = make_conf(tmp_path, str(root), pci={"device_spec": same, "report_in_placement": True})
    discovery = HostDriver(conf).discover()
    assert any("holding different vGPU types" in w and T2B in w for w in discovery.warnings)

    mixed = [*RTX_SPECS[:1], rtx_spec("0001:c8:00.3", "CUSTOM_DC_2B")]
    with pytest.raises(nova_exception.PlacementPciMixedResourceClassException):
        nova_pci_providers(discovery.functions, mixed, "cn1")
    conf = make_conf(tmp_path, str(root), pci={"device_spec": mixed, "report_in_placement": True})
    assert pci_children(tree_of(conf)) == {}
    discovery = HostDriver(conf).discover()
    assert any("nova 34 refuses that" in w for w in discovery.warnings)


def test_vfs_held_by_instances_are_counted_on_the_gpu_provider(tmp_path):
    conf = conf_on(
        tmp_path, "h200-pair", pci={"device_spec": H200_SPECS, "report_in_placement": True}
    )
    host = HostDriver(conf).discover().resources
    policy = LayoutPolicy(pci_in_placement=True, reserved_host_memory_mb=0)
    tree = ProviderTree()
    tree.new_root("cn1", "00000000-0000-0000-0000-000000000001")
    apply_layout(tree, host, policy)
    inst = Instance(
        "11111111-1111-1111-1111-111111111111",
        "p",
        "u",
        Flavor(vcpus=1, memory_mb=512),
        pci_devices=("0000:2a:00.5", "0000:18:00.4"),
    )
    (planned,) = plan_allocations([inst], host, tree, policy).values()
    gpu0 = tree.data("cn1_0000:18:00.0").uuid
    gpu1 = tree.data("cn1_0000:2A:00.0").uuid
    assert planned.allocations[gpu0] == {"CUSTOM_H200X_141C": 1}
    assert planned.allocations[gpu1] == {"CUSTOM_H200X_1_18C": 1}


def test_no_vgpu_on_vendor_vfio_gpus_by_default_said_once(tmp_path):
    """Issue 34, defect 3: nova 34 cannot consume VGPU there (it makes vGPUs only as
    mdevs), so the old VGPU 32 per GPU scheduled servers that failed at spawn."""
    conf = conf_on(tmp_path, "h200-pair", devices={"enabled_mdev_types": [T141C, T1_18C]})
    assert set(tree_of(conf)) == {"cn1"}
    discovery = HostDriver(conf).discover()
    assert discovery.resources.gpus == ()
    assert sum(VENDOR_WARNING in w for w in discovery.warnings) == 1


@pytest.mark.parametrize(
    ("host", "enabled", "maxima", "totals"),
    [
        # H200X-141C max 1: the used GPU holds it (old: 1 + 0); H200X-1-18C max 7 (old: 32).
        ("h200-pair", [T141C, T1_18C], H200_MAX, {"0000_18_00_0": 1, "0000_2a_00_0": 7}),
        ("h200-fresh", [T141C], H200_MAX, {"0000_18_00_0": 1}),  # old: 32
        ("h200-fresh", [T1_18C], H200_MAX, {"0000_18_00_0": 7}),  # old: 32
        ("rtx-pro-6000", [T2B, T48Q], RTX_MAX, {"0001_04_00_0": 32, "0001_c8_00_0": 2}),
        ("rtx-pro-6000", [T48Q], RTX_MAX, {"0001_04_00_0": 2, "0001_c8_00_0": 2}),  # old: 48
    ],
)
def test_vgpu_totals_are_the_per_gpu_maxima(tmp_path, host, enabled, maxima, totals):
    """Issue 34, defect 1: one vGPU per free VF was up to 32 times what a GPU holds."""
    conf = conf_on(
        tmp_path,
        host,
        devices={
            "enabled_mdev_types": enabled,
            "vendor_vgpu_inventory": True,
            "vendor_vgpu_max_instances": {t: str(n) for t, n in maxima.items()},
        },
    )
    tree = tree_of(conf)
    got = {n.removeprefix("cn1_pci_"): v["inv"] for n, v in tree.items() if "_pci_" in n}
    assert got == {slug: {"VGPU": n} for slug, n in totals.items()}


def test_max_instances_keeps_novas_meaning_over_true_totals(tmp_path):
    """Issue 34, defect 2: the fresh GPU (2 more DC-48Q) and the used one (2 held)
    honour a host-wide max_instances of 4; the old count (48 free VFs) dropped it."""
    devices = {
        "enabled_mdev_types": [T48Q],
        "vendor_vgpu_inventory": True,
        "vendor_vgpu_max_instances": {T48Q: "2"},
    }
    conf = conf_on(tmp_path, "rtx-pro-6000", devices=devices)
    conf.set_override("max_instances", 4, group=f"mdev_{T48Q}")
    tree = tree_of(conf)
    assert tree["cn1_pci_0001_04_00_0"]["inv"] == {"VGPU": 2}
    assert tree["cn1_pci_0001_c8_00_0"]["inv"] == {"VGPU": 2}
    # 3: the held ones count first; the fresh GPU would pass the limit: dropped whole.
    conf.set_override("max_instances", 3, group=f"mdev_{T48Q}")
    tree = tree_of(conf)
    assert "cn1_pci_0001_04_00_0" not in tree
    assert tree["cn1_pci_0001_c8_00_0"]["inv"] == {"VGPU": 2}


def _discover_with_nvml(root: Path, enabled: list[str]):
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
    return discovery, discovery.warnings + tuple(warnings)


def test_vgpu_maxima_read_through_nvml(tmp_path, monkeypatch):
    asked: list = []
    # NVML on a GPU in MIG mode lists its MIG-backed types only.
    answers = {b"0000:18:00.0": {H200_141C: 1}, b"0000:2a:00.0": {H200_1_18C: 7}}
    framebuffer = {H200_141C: 141, H200_1_18C: 18}
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(answers, framebuffer, asked))
    discovery, warnings = _discover_with_nvml(write_host(tmp_path, "h200-pair"), [T141C, T1_18C])
    # (more that can be created, held): totals 1 and 7, the maxima NVML gave (the MIG
    # GPU: 7 x 18 GiB of framebuffer, 2 x 18 held: 5 more).
    totals = {
        g.address: {t: (m.available_instances, len(g.mdevs)) for t, m in g.mdev_types.items()}
        for g in discovery.resources.gpus
    }
    assert totals == {"0000:18:00.0": {T141C: (0, 1)}, "0000:2a:00.0": {T1_18C: (5, 2)}}
    assert ("max", b"0000:2a:00.0", H200_1_18C) in asked and asked[-1] == ("shutdown",)
    # The used GPU names no 1-18C (header-only VFs); the MIG GPU no 141C: not asked.
    assert ("max", b"0000:2a:00.0", H200_141C) not in asked
    assert not warnings


def test_without_nvml_a_type_without_operator_maximum_gets_no_vgpu(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    discovery, warnings = _discover_with_nvml(write_host(tmp_path, "h200-fresh"), [T141C])
    assert discovery.resources.gpus == ()
    (line,) = [w for w in warnings if "maximum instances per GPU unknown" in w]
    assert f"vendor_vgpu_max_instances = {T141C}:<N>" in line

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml({}, {}, [], init_error=True))
    discovery, warnings = _discover_with_nvml(tmp_path / "h200-fresh", [T141C])
    assert discovery.resources.gpus == ()
    assert any("NVML (nvidia-ml-py) cannot start: Driver Not Loaded" in w for w in warnings)


def test_devices_view_tells_each_vfs_path_as_the_tree_has_it(tmp_path):
    """Issue 34, defect 4: VFs were "counted in its VGPU inventory" while the tree had none."""
    specs = H200_SPECS[:1]
    conf = conf_on(
        tmp_path,
        "h200-pair",
        pci={"device_spec": specs, "report_in_placement": True},
        devices={"enabled_mdev_types": [T1_18C]},
    )
    tree = tree_of(conf)
    driver = HostDriver(conf)
    views = {v.address: v for v in driver.device_views("cn1")}
    pci = [a for a, v in views.items() if v.physfn == "0000:18:00.0" and v.offered]
    assert pci == ["0000:18:00.4"] and tree["cn1_0000:18:00.0"]["inv"] == {"CUSTOM_H200X_141C": 1}
    assert views["0000:18:00.4"].offered_as == "CUSTOM_H200X_141C"
    assert views["0000:18:00.4"].reason_kind == REASON_VF_OF_OFFERED
    assert views["0000:18:00.4"].reason.startswith("PCI path")
    # The MIG GPU: no spec, VGPU off: no VF offered, and no provider for it.
    mig = [v for v in views.values() if v.physfn == "0000:2a:00.0"]
    assert len(mig) == 32 and not any(v.offered for v in mig)
    assert {v.reason_kind for v in mig} == {REASON_VENDOR_VGPU_NOT_OFFERED}
    assert not any("2a_00_0" in n or "2A:00.0" in n for n in tree)

    on = {
        "enabled_mdev_types": [T1_18C],
        "vendor_vgpu_inventory": True,
        "vendor_vgpu_max_instances": {T1_18C: "7"},
    }
    conf = make_conf(tmp_path, str(tmp_path / "h200-pair"), devices=on)
    tree = tree_of(conf)
    views = {v.address: v for v in HostDriver(conf).device_views("cn1")}
    vgpu = [a for a, v in views.items() if v.physfn == "0000:2a:00.0" and v.offered_as == "VGPU"]
    assert len(vgpu) == 32 and tree["cn1_pci_0000_2a_00_0"]["inv"] == {"VGPU": 7}
    assert not any(v.offered for v in views.values() if v.physfn == "0000:18:00.0")
    assert "cn1_pci_0000_18_00_0" not in tree


def test_a100_with_mdev_on_its_vfs_is_novas_own_vgpu_path(tmp_path):
    """The contrast: an Ampere GPU's VFs are mdev parents; nova 34's libvirt driver
    makes each a VGPU provider, and so does the agent, without the vendor-VFIO rules."""
    conf = conf_on(tmp_path, "a100-mdev", devices={"enabled_mdev_types": ["nvidia-470"]})
    tree = tree_of(conf)
    gpus = {n: v["inv"] for n, v in tree.items() if "_pci_" in n}
    assert gpus == {f"cn1_pci_0000_41_00_{f}": {"VGPU": 1} for f in (4, 5, 6, 7)}
    discovery = HostDriver(conf).discover()
    assert not any(VENDOR_WARNING in w for w in discovery.warnings)
    assert discovery.vendor.functions == {}
