"""NVIDIA vGPU through NVIDIA's vendor-specific VFIO framework (no mdev): what sysfs says.

Since vGPU 17 on kernel 6.8+, NVIDIA's GPUs from Ada and Hopper on (L40S, H100,
H200, GH200, RTX PRO 6000 Blackwell) have no mdev: a vGPU is made by writing a
type ID to a VF's ``nvidia/current_vgpu_type`` and the VF goes to QEMU as a
plain VFIO hostdev (NVIDIA Virtual GPU Software User Guide, "Creating an NVIDIA
vGPU on a Linux with KVM hypervisor that uses a vendor-specific VFIO
framework"). Each VF has:

* ``nvidia/current_vgpu_type``: ``0`` when the VF holds no vGPU, else the type ID;
* ``nvidia/creatable_vgpu_types``: a table ``ID : vGPU Name`` of what can be
  created on that VF *at the time of reading*; it changes as sibling VFs get
  vGPUs and is header-only once the GPU's capacity is used, so it is never a
  count of what the GPU can hold.

This module only reads them, as :class:`VendorGpu` records (one per PF, its
VFs in index order); which VF is offered how is
:mod:`drivers.host.vendor_vgpu`'s. Types are named ``nvidia-<ID>``, as
NVIDIA's mdev types are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from drivers.host.pci import PCI_DIR, PciFunction
from drivers.host.sysfs import Root, SysfsError, as_reader

_ROW_RE = re.compile(r"^\s*(\d+)\s*:\s*(.+?)\s*$")


def parse_creatable(text: str) -> dict[str, str]:
    """``{type id: name}`` of a ``creatable_vgpu_types`` table (header row skipped).

    Raises:
        ValueError: a row is neither the header nor ``<number> : <name>``.
    """
    out = {}
    for line in text.splitlines():
        if not line.strip() or line.strip().startswith("ID"):
            continue
        m = _ROW_RE.match(line)
        if not m:
            raise ValueError(f"row {line.strip()!r} is not 'ID : name'")
        out[f"nvidia-{int(m[1])}"] = m[2]
    return out


def type_number(type_id: str) -> int:
    """The numeric ID of ``nvidia-<ID>`` (what ``current_vgpu_type`` and NVML use).

    Raises:
        ValueError: not ``nvidia-<number>``.
    """
    prefix, _, number = type_id.partition("-")
    if prefix != "nvidia" or not number.isdigit():
        raise ValueError(f"{type_id!r} is not nvidia-<ID>")
    return int(number)


@dataclass(frozen=True, slots=True)
class VendorVf:
    """One VF of a vendor-VFIO GPU.

    Attributes:
        address: the VF's canonical PCI address.
        current: the type it holds (``nvidia-<ID>``), or None (``current_vgpu_type`` 0).
        creatable: type id -> name of what can be created on it now.
    """

    address: str
    current: str | None
    creatable: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class VendorGpu:
    """A physical GPU (the SR-IOV PF) whose VFs carry vGPUs through vendor VFIO.

    Attributes:
        address: the PF's canonical PCI address.
        vfs: its readable VFs, in address order.
        numa_node: the PF's NUMA cell, or None.
    """

    address: str
    vfs: tuple[VendorVf, ...]
    numa_node: int | None = None

    def names(self) -> dict[str, str]:
        """Every type a VF holds or can create, id -> name (the id when no VF names it)."""
        out: dict[str, str] = {}
        for vf in self.vfs:
            out.update(vf.creatable)
        for vf in self.vfs:
            if vf.current is not None:
                out.setdefault(vf.current, vf.current)
        return out

    def free_offering(self, type_id: str) -> int:
        """Free VFs (no vGPU) whose ``creatable_vgpu_types`` lists ``type_id`` now."""
        return sum(1 for vf in self.vfs if vf.current is None and type_id in vf.creatable)


def read_vendor_gpus(root: Root, functions: Mapping[str, PciFunction]) -> tuple[VendorGpu, ...]:
    """The vendor-VFIO GPUs: PFs with a VF that has ``nvidia/creatable_vgpu_types``.

    Args:
        root: sysfs root or reader.
        functions: every PCI function (VFs flagged ``nvidia_vgpu``).

    Returns:
        :class:`VendorGpu` records sorted by address. A VF whose files are
        unreadable or garbled is warned about (naming the file) and left out.
    """
    reader = as_reader(root)
    by_pf: dict[str, list[PciFunction]] = {}
    for fn in functions.values():
        if fn.nvidia_vgpu and fn.physfn in functions:
            by_pf.setdefault(fn.physfn, []).append(fn)  # type: ignore[arg-type]
    gpus = []
    for pf_address in sorted(by_pf):
        vfs = []
        for vf in sorted(by_pf[pf_address], key=lambda f: f.address):
            base = f"{PCI_DIR}/{vf.address}/nvidia"
            try:
                current = reader.integer(f"{base}/current_vgpu_type")
                creatable = reader.parse(f"{base}/creatable_vgpu_types", parse_creatable)
                assert creatable is not None
            except SysfsError as exc:
                reader.skip(exc, f"vGPU VF {vf.address}")
                continue
            held = f"nvidia-{current}" if current else None
            vfs.append(VendorVf(vf.address, held, MappingProxyType(creatable)))
        gpus.append(VendorGpu(pf_address, tuple(vfs), functions[pf_address].numa_node))
    return tuple(gpus)
