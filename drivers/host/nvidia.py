"""NVIDIA vGPU on SR-IOV GPUs, without mdev (recent NVIDIA drivers, Ampere on).

Each VF of such a GPU has ``nvidia/creatable_vgpu_types`` (a table
``ID : vGPU Name``; empty when the VF is busy) and
``nvidia/current_vgpu_type`` (``0`` when no vGPU is configured, else the
type ID) — NVIDIA Virtual GPU Software User Guide, "Creating an NVIDIA vGPU
on a Linux with KVM hypervisor that uses a vendor-specific VFIO framework".

Types are named ``nvidia-<ID>`` as NVIDIA's mdev types are, so
``[devices] enabled_mdev_types`` applies unchanged. The physical GPU is
reported as a :class:`Gpu` like an mdev parent: ``available_instances`` of a
type is the number of free VFs that can create it, and each VF holding a
vGPU is an existing :class:`Mdev` whose ``uuid`` is the VF's PCI address (the
VF is what an instance's domain names).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from drivers.host.mdev import keep_types
from drivers.host.pci import PCI_DIR, PciFunction
from drivers.host.sysfs import Root, SysfsError, as_reader
from drivers.records import Gpu, Mdev, MdevType

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


def discover_nvidia_vgpus(
    root: Root, functions: Mapping[str, PciFunction], enabled: Iterable[str] | None = None
) -> tuple[Gpu, ...]:
    """Physical GPUs whose VFs offer NVIDIA vGPUs, sorted by address.

    Args:
        root: sysfs root or reader.
        functions: every PCI function (VFs flagged ``nvidia_vgpu``).
        enabled: ``[devices] enabled_mdev_types`` (None keeps every type).

    Returns:
        :class:`Gpu` records. A VF with unreadable or garbled files is
        warned about and left out (its vGPU is not counted).
    """
    reader = as_reader(root)
    enabled = None if enabled is None else tuple(enabled)
    by_pf: dict[str, list[PciFunction]] = {}
    for fn in functions.values():
        if fn.nvidia_vgpu and fn.physfn in functions:
            by_pf.setdefault(fn.physfn, []).append(fn)  # type: ignore[arg-type]
    gpus = []
    for pf_address in sorted(by_pf):
        names: dict[str, str] = {}
        available: dict[str, int] = {}
        existing: list[Mdev] = []
        for vf in sorted(by_pf[pf_address], key=lambda f: f.address):
            base = f"{PCI_DIR}/{vf.address}/nvidia"
            try:
                current = reader.integer(f"{base}/current_vgpu_type")
                creatable = reader.parse(f"{base}/creatable_vgpu_types", parse_creatable)
                assert creatable is not None
            except SysfsError as exc:
                reader.skip(exc, f"vGPU VF {vf.address}")
                continue
            names.update(creatable)
            if current:
                type_id = f"nvidia-{current}"
                names.setdefault(type_id, type_id)
                existing.append(Mdev(uuid=vf.address, type_id=type_id, parent=pf_address))
            else:
                for type_id in creatable:
                    available[type_id] = available.get(type_id, 0) + 1
        types = {
            t: MdevType(
                id=t, name=n, available_instances=available.get(t, 0), device_api="vfio-pci"
            )
            for t, n in names.items()
        }
        kept = keep_types(types, enabled)
        if kept or existing:
            numa = functions[pf_address].numa_node
            gpus.append(Gpu(pf_address, MappingProxyType(kept), tuple(existing), numa))
    return tuple(gpus)
