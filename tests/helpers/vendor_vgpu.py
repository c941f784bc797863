"""GPUs whose vGPUs come through NVIDIA's vendor-specific VFIO framework, as sysfs trees,
and nova 34's own PCI-in-Placement providers for the same devices.

The hosts (provenance: tests/fixtures/sysfs/README.md, "Vendor-VFIO vGPU hosts"):

* :data:`H200_PAIR`: two H200 SXM 141GB (``10de:2335``), 32 VFs each (offset 4, as
  NVIDIA/vgpu-device-manager's vfio tests lay them out). GPU ``0000:18:00.0`` in
  full-GPU mode whose capacity is used: VF ``18:00.4`` holds ``H200X-141C``
  (type 1428, one per GPU), every other VF's ``creatable_vgpu_types`` is header-only.
  GPU ``0000:2a:00.0`` in MIG mode: VFs ``2a:00.4`` and ``2a:00.5`` hold
  ``H200X-1-18C`` (type 1414, seven per GPU: MIG 1g.18gb 7/7), the 30 others list it.
* :data:`RTX_PRO_6000`: two RTX PRO 6000 Blackwell Server Edition (``10de:2bb5``,
  VFs the same id), 48 VFs each (offset 2: ``virtfn0`` is ``0001:04:00.2``), in
  mixed-size mode. ``0001:04:00.0`` fresh: every VF lists ``DC-2B`` (32 per GPU) and
  ``DC-48Q`` (2 per GPU). ``0001:c8:00.0`` used: ``c8:00.2`` and ``c8:00.3`` hold
  ``DC-48Q``, the others are header-only.
* :data:`RTX_PRO_6000_MIXED` (issue 40): the same pair, ``0001:04:00.0`` fresh (every
  VF lists ``DC-2B``, ``DC-4Q``, ``DC-48Q``), ``0001:c8:00.0`` in mixed-size mode holding
  one ``DC-4Q`` (``c8:00.2``), one ``DC-48Q`` (``c8:00.3``) and one ``DC-2B``
  (``c8:00.4``): 54 of 96 GiB used; its 45 free VFs list ``DC-2B`` and ``DC-4Q`` (what
  fits in 42 GiB), not ``DC-48Q``. :data:`RTX_PRO_6000_MIXED_ALONE`: that GPU alone, so
  no VF of the host names the ``DC-48Q`` it holds.
* :data:`A100_MDEV`: an A100 PCIe (``10de:20f1``) whose 4 VFs are mdev parents
  (Ampere: vGPU through mdev on each VF), one VF holding an ``nvidia-470`` mdev:
  the contrast, nova's own vGPU path.
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from drivers.host.pci import PciFunction
from drivers.host.synthetic import FakeHost, FakePci, write_sysfs

H200_141C, H200_1_18C = 1428, 1414
H200_NAMES = {H200_1_18C: "NVIDIA H200X-1-18C", H200_141C: "NVIDIA H200X-141C"}
H200_MAX = {f"nvidia-{H200_141C}": 1, f"nvidia-{H200_1_18C}": 7}

RTX_DC_2B, RTX_DC_4Q, RTX_DC_48Q = 1552, 1556, 1576
RTX_NAMES = {
    RTX_DC_2B: "NVIDIA RTX Pro 6000 Blackwell DC-2B",
    RTX_DC_48Q: "NVIDIA RTX Pro 6000 Blackwell DC-48Q",
}
RTX_DC_4Q_NAME = "NVIDIA RTX Pro 6000 Blackwell DC-4Q"
RTX_MAX = {f"nvidia-{RTX_DC_2B}": 32, f"nvidia-{RTX_DC_48Q}": 2}
RTX_MAX_MIXED = RTX_MAX | {f"nvidia-{RTX_DC_4Q}": 24}

_CPUS = [(0, 0, 0), (1, 0, 1), (2, 0, 2), (3, 0, 3)]


def _gpu(
    address: str,
    device: str,
    total: int,
    offset: int,
    vfs: Mapping[int, tuple[int, Mapping[int, str]]],
    numa: int = 0,
) -> FakePci:
    return FakePci(
        address,
        "10de",
        device,
        "030200",
        numa=numa,
        driver="nvidia",
        total_vfs=total,
        num_vfs=total,
        vf_offset=offset,
        vf_driver="nvidia",
        nvidia_vfs=vfs,
    )


def h200_pair() -> FakeHost:
    """:data:`H200_PAIR` (module docstring)."""
    used = {i: (0, {}) for i in range(32)} | {0: (H200_141C, {})}
    mig = {i: (0, {H200_1_18C: H200_NAMES[H200_1_18C]}) for i in range(32)}
    mig |= {0: (H200_1_18C, {}), 1: (H200_1_18C, {})}
    return FakeHost(
        cpus=_CPUS,
        pci=(
            _gpu("0000:18:00.0", "2335", 32, 4, used),
            _gpu("0000:2a:00.0", "2335", 32, 4, mig, numa=1),
        ),
    )


def h200_fresh() -> FakeHost:
    """One H200 in full-GPU mode, nothing created: every VF lists both types."""
    fresh = {i: (0, dict(H200_NAMES)) for i in range(32)}
    return FakeHost(cpus=_CPUS, pci=(_gpu("0000:18:00.0", "2335", 32, 4, fresh),))


def rtx_pro_6000() -> FakeHost:
    """:data:`RTX_PRO_6000` (module docstring)."""
    fresh = {i: (0, dict(RTX_NAMES)) for i in range(48)}
    used = {i: (0, {}) for i in range(48)} | {0: (RTX_DC_48Q, {}), 1: (RTX_DC_48Q, {})}
    return FakeHost(
        cpus=_CPUS,
        pci=(
            _gpu("0001:04:00.0", "2bb5", 48, 2, fresh),
            _gpu("0001:c8:00.0", "2bb5", 48, 2, used, numa=1),
        ),
    )


def _rtx_mixed_gpu(address: str, numa: int) -> FakePci:
    """An RTX PRO 6000 in mixed-size mode holding one DC-4Q, one DC-48Q and one DC-2B
    (54 of 96 GiB): the 45 free VFs list what still fits, DC-2B and DC-4Q, not DC-48Q."""
    fits = {RTX_DC_2B: RTX_NAMES[RTX_DC_2B], RTX_DC_4Q: RTX_DC_4Q_NAME}
    vfs = {i: (0, fits) for i in range(48)}
    vfs |= {0: (RTX_DC_4Q, {}), 1: (RTX_DC_48Q, {}), 2: (RTX_DC_2B, {})}
    return _gpu(address, "2bb5", 48, 2, vfs, numa=numa)


def rtx_pro_6000_mixed() -> FakeHost:
    """:data:`RTX_PRO_6000_MIXED` (module docstring)."""
    fresh = {i: (0, dict(RTX_NAMES) | {RTX_DC_4Q: RTX_DC_4Q_NAME}) for i in range(48)}
    return FakeHost(
        cpus=_CPUS,
        pci=(_gpu("0001:04:00.0", "2bb5", 48, 2, fresh), _rtx_mixed_gpu("0001:c8:00.0", 1)),
    )


def rtx_pro_6000_mixed_alone() -> FakeHost:
    """:data:`RTX_PRO_6000_MIXED_ALONE` (module docstring)."""
    return FakeHost(cpus=_CPUS, pci=(_rtx_mixed_gpu("0001:c8:00.0", 0),))


def a100_mdev() -> FakeHost:
    """:data:`A100_MDEV` (module docstring)."""
    a100 = FakePci(
        "0000:41:00.0",
        "10de",
        "20f1",
        "030200",
        numa=0,
        driver="nvidia",
        total_vfs=4,
        num_vfs=4,
        vf_offset=4,
        vf_driver="nvidia",
        vf_mdev_types={
            i: {"nvidia-470": ("NVIDIA A100-8C", 0 if i == 0 else 1, "vfio-pci")} for i in range(4)
        },
        vf_mdevs={0: [("b1b4a2f0-2d2b-4c5d-9c6a-0c1f0e6a0a01", "nvidia-470")]},
    )
    return FakeHost(cpus=_CPUS, pci=(a100,))


H200_PAIR, RTX_PRO_6000, A100_MDEV = "h200-pair", "rtx-pro-6000", "a100-mdev"
RTX_PRO_6000_MIXED, RTX_PRO_6000_MIXED_ALONE = "rtx-pro-6000-mixed", "rtx-pro-6000-mixed-alone"
HOSTS = {
    H200_PAIR: h200_pair,
    "h200-fresh": h200_fresh,
    RTX_PRO_6000: rtx_pro_6000,
    RTX_PRO_6000_MIXED: rtx_pro_6000_mixed,
    RTX_PRO_6000_MIXED_ALONE: rtx_pro_6000_mixed_alone,
    A100_MDEV: a100_mdev,
}


class FakeNVMLError(Exception):
    """Stands for ``pynvml.NVMLError``."""


@dataclass
class _FakeNvml:
    """The answers of :func:`fake_pynvml` (its arguments) and the calls it was asked."""

    gpus: Mapping[bytes, Mapping[int, int]]
    framebuffer_gib: Mapping[int, int]
    asked: list
    placements: Mapping[tuple[bytes, int], tuple[Sequence[int], int]]
    init_error: bool

    def init(self) -> None:
        if self.init_error:
            raise FakeNVMLError("Driver Not Loaded")

    def handle(self, bus_id: bytes) -> bytes:
        self.asked.append(("handle", bus_id))
        if bus_id not in self.gpus:
            raise FakeNVMLError("Not Found")
        return bus_id

    def supported(self, handle: bytes) -> list[int]:
        self.asked.append(("supported", handle))
        return sorted(self.gpus[handle])

    def max_instances(self, handle: bytes, type_id: int) -> int:
        self.asked.append(("max", handle, type_id))
        if type_id not in self.gpus[handle]:
            raise FakeNVMLError("Not Supported")
        return self.gpus[handle][type_id]

    def framebuffer(self, type_id: int) -> int:
        self.asked.append(("framebuffer", type_id))
        if type_id not in self.framebuffer_gib:
            raise FakeNVMLError("Invalid Argument")
        return self.framebuffer_gib[type_id] << 30

    def creatable(self, handle: bytes, type_id: int) -> types.SimpleNamespace:
        self.asked.append(("placements", handle, type_id))
        if (handle, type_id) not in self.placements:
            raise FakeNVMLError("Not Supported")
        ids, size = self.placements[(handle, type_id)]
        return types.SimpleNamespace(count=len(ids), placementIds=list(ids), placementSize=size)


def fake_pynvml(
    gpus: Mapping[bytes, Mapping[int, int]],
    framebuffer_gib: Mapping[int, int],
    asked: list,
    placements: Mapping[tuple[bytes, int], tuple[Sequence[int], int]] | None = None,
    init_error: bool = False,
) -> types.ModuleType:
    """A stand-in for nvidia-ml-py's ``pynvml`` module: the functions and the error class the
    agent calls, answering like NVML on the described GPUs.

    Args:
        gpus: PCI bus id -> {supported type number: Max Instances on that GPU}.
        framebuffer_gib: type number -> framebuffer of one instance (GiB; NVML answers bytes).
        asked: every call is appended to it, as ``(function, arguments...)``.
        placements: ``(bus id, type number) -> (creatable placement ids, placement size)``;
            None: the module has no ``nvmlDeviceGetVgpuTypeCreatablePlacements`` (an
            nvidia-ml-py older than it); a pair not listed raises "Not Supported".
        init_error: ``nvmlInit`` fails as on a host without the vGPU manager.
    """
    nvml = _FakeNvml(gpus, framebuffer_gib, asked, placements or {}, init_error)
    lib = types.ModuleType("pynvml")
    functions = {
        "NVMLError": FakeNVMLError,
        "nvmlInit": nvml.init,
        "nvmlShutdown": lambda: asked.append(("shutdown",)),
        "nvmlDeviceGetHandleByPciBusId": nvml.handle,
        "nvmlDeviceGetSupportedVgpus": nvml.supported,
        "nvmlVgpuTypeGetMaxInstances": nvml.max_instances,
        "nvmlVgpuTypeGetFramebufferSize": nvml.framebuffer,
    }
    if placements is not None:
        functions["nvmlDeviceGetVgpuTypeCreatablePlacements"] = nvml.creatable
    for name, value in functions.items():
        setattr(lib, name, value)
    return lib


def write_host(dest: Path, name: str) -> Path:
    """Write host ``name`` of :data:`HOSTS` below ``dest``; returns the sysfs root."""
    return write_sysfs(dest / name, HOSTS[name]())


def vf_address(pf: str, offset: int, index: int) -> str:
    """The address of VF ``index`` of ``pf`` (stride 1), e.g. ``vf_address("0000:18:00.0",
    4, 0)`` is ``0000:18:00.4``."""
    domain, bus, rest = pf.split(":")
    slot, function = rest.split(".")
    routing = int(slot, 16) * 8 + int(function) + offset + index
    return f"{domain}:{int(bus, 16) + routing // 256:02x}:{(routing % 256) // 8:02x}.{routing % 8}"


def _nova_devices(functions: Mapping[str, PciFunction]) -> list[dict[str, Any]]:
    """The devices as nova's libvirt driver reports them (``_get_pcidev_info``)."""
    out = []
    for fn in sorted(functions.values(), key=lambda f: f.address):
        if fn.physfn is not None:
            kind, parent = "type-VF", fn.physfn
        elif fn.total_vfs:
            kind, parent = "type-PF", None
        else:
            kind, parent = "type-PCI", None
        dev = {
            "dev_id": "pci_" + fn.address.replace(":", "_").replace(".", "_"),
            "address": fn.address,
            "vendor_id": fn.vendor_id,
            "product_id": fn.product_id,
            "numa_node": fn.numa_node,
            "label": f"label_{fn.vendor_id}_{fn.product_id}",
            "dev_type": kind,
        }
        if parent:
            dev["parent_addr"] = parent
        out.append(dev)
    return out


def nova_pci_providers(
    functions: Mapping[str, PciFunction], device_spec: Sequence[str], nodename: str
) -> dict[str, dict[str, Any]]:
    """nova 34's own PCI-in-Placement providers for ``functions`` under ``device_spec``.

    nova's ``PciDevTracker`` (its ``Whitelist`` of ``[pci] device_spec``, devices fed as
    its libvirt driver reports them) and ``pci_placement_translator.update_provider_tree_for_pci``
    on a nova ``ProviderTree`` with the compute node only, no allocations: what nova-compute's
    resource tracker writes. nova's global ``CONF`` is overridden for the call only.

    Returns:
        ``{provider name: {"inventory": {rc: total}, "traits": set}}`` of every child.

    Raises:
        nova.exception.PlacementPciException: nova refuses the devices (mixed classes or
            traits among one PF's VFs).
    """
    from nova import conf as nova_conf
    from nova import context, objects
    from nova.compute import pci_placement_translator, provider_tree
    from nova.pci import manager as pci_manager

    objects.register_all()
    conf = nova_conf.CONF
    conf.set_override("device_spec", list(device_spec), group="pci")
    conf.set_override("report_in_placement", True, group="pci")
    try:
        node = objects.ComputeNode(id=1, numa_topology=None)
        empty = objects.PciDeviceList(objects=[])
        with mock.patch.object(objects.PciDeviceList, "get_by_compute_node", return_value=empty):
            tracker = pci_manager.PciDevTracker(context.get_admin_context(), node)
        tracker.update_devices_from_hypervisor_resources(json.dumps(_nova_devices(functions)))
        tree = provider_tree.ProviderTree()
        tree.new_root(nodename, "00000000-0000-0000-0000-0000000000c1")
        pci_placement_translator.update_provider_tree_for_pci(tree, nodename, tracker, {}, [])
    finally:
        conf.clear_override("device_spec", group="pci")
        conf.clear_override("report_in_placement", group="pci")
    out = {}
    for uuid in tree.get_provider_uuids():
        data = tree.data(uuid)
        if data.name != nodename:
            inventory = {rc: inv["total"] for rc, inv in data.inventory.items()}
            out[data.name] = {"inventory": inventory, "traits": set(data.traits)}
    return out
