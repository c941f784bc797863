"""Turn one node of a fake host description into driver records, one reader per section.

Each section of a node (docs/fake-host.md) has its reader: NUMA cells, CPU
and memory totals, whole PCI devices, SR-IOV PFs, GPUs with their mdevs,
instances. The schema has already checked types (:mod:`drivers.fake_host.schema`);
the readers check what it cannot (unique ids and addresses, totals that agree
with the cells, devices the instances name) and fail with the place at fault.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import Any, TypeVar

from drivers.errors import HostDescriptionError
from drivers.records import (
    Flavor,
    Gpu,
    HostResources,
    Instance,
    Mdev,
    MdevType,
    NumaCell,
    PciDevice,
    SriovPF,
    normalize_pci_address,
    vf_addresses,
)

DEFAULT_VF_OFFSET = 128
"""``sriov_offset`` of a PF when the description does not give one."""
DEFAULT_VF_STRIDE = 1
"""``sriov_stride`` of a PF when the description does not give one."""

_T = TypeVar("_T")


@dataclass(slots=True)
class FakeNode:
    """One node of a host description: its hardware and its instances."""

    host: HostResources
    instances: dict[str, Instance] = field(default_factory=dict)


@dataclass
class _NodeReading:
    """What the readers of one node share: where it is and what is taken so far.

    Attributes:
        path: the description file, for errors.
        at: the node's place in it (``nodes[0]``).
        cell_ids: ids of the node's NUMA cells (empty: no NUMA, any numa_node goes).
        addresses: PCI address -> the place that took it (devices, PFs, VFs, GPUs).
        mdevs: mdev UUIDs seen on the node's GPUs.
    """

    path: str
    at: str
    cell_ids: list[int] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)
    mdevs: set[str] = field(default_factory=set)

    def fail(self, where: str, reason: str) -> HostDescriptionError:
        return HostDescriptionError(self.path, where, reason)

    def address(self, value: str, where: str) -> str:
        """``value`` as a normalised PCI address; fails if it is not one."""
        try:
            return normalize_pci_address(value)
        except ValueError as exc:
            raise self.fail(where, str(exc)) from None

    def uuid(self, value: str, where: str) -> str:
        """``value`` as a canonical UUID; fails if it is not one."""
        try:
            return str(uuidlib.UUID(value))
        except ValueError:
            raise self.fail(where, f"{value!r} is not a UUID") from None

    def numa(self, value: int | None, where: str) -> int | None:
        """A device's ``numa_node``; fails if the node has cells and it is none of them."""
        if value is not None and self.cell_ids and value not in self.cell_ids:
            raise self.fail(where, f"numa_node {value} is not one of the cells {self.cell_ids}")
        return value

    def claim(self, address: str, where: str) -> str:
        """Take a PCI address for ``where``; fails if another entry took it first."""
        if address in self.addresses:
            raise self.fail(
                where, f"PCI address {address} is already used at {self.addresses[address]}"
            )
        self.addresses[address] = where
        return address


def _numa_cells(raw: dict[str, Any], node: _NodeReading) -> tuple[NumaCell, ...]:
    """``numa_cells``: the cells, with unique ids (recorded in ``node.cell_ids``)."""
    cells = tuple(
        NumaCell(
            id=c["id"],
            vcpus=c.get("vcpus", 0),
            pcpus=c.get("pcpus", 0),
            memory_mb=c["memory_mb"],
            hugepages=MappingProxyType({int(k): v for k, v in (c.get("hugepages") or {}).items()}),
        )
        for c in raw.get("numa_cells", [])
    )
    node.cell_ids = [c.id for c in cells]
    if len(set(node.cell_ids)) != len(node.cell_ids):
        raise node.fail(f"{node.at}.numa_cells", f"NUMA cell ids repeat: {node.cell_ids}")
    return cells


def _totals(
    raw: dict[str, Any], cells: tuple[NumaCell, ...], node: _NodeReading
) -> tuple[int, int]:
    """``cpu`` and ``memory_mb``: (vcpus, pcpus) of the node.

    A CPU total left out is the sum over the cells; one given must equal that
    sum, and so must ``memory_mb``, when the node has cells.
    """
    cpu = raw.get("cpu", {})
    vcpus = cpu.get("vcpus", sum(c.vcpus for c in cells))
    pcpus = cpu.get("pcpus", sum(c.pcpus for c in cells))
    if not cells:
        return vcpus, pcpus
    for name, total, key in (
        ("cpu.vcpus", vcpus, "vcpus"),
        ("cpu.pcpus", pcpus, "pcpus"),
        ("memory_mb", raw["memory_mb"], "memory_mb"),
    ):
        cell_sum = sum(getattr(c, key) for c in cells)
        if total != cell_sum:
            raise node.fail(
                f"{node.at}.{name}",
                f"{total} differs from the sum over numa_cells ({cell_sum}); "
                "make them agree or leave the host-level value out",
            )
    return vcpus, pcpus


def _pci_device(d: dict[str, Any], where: str, node: _NodeReading) -> PciDevice:
    """One entry of ``pci_devices``: a whole device for passthrough."""
    return PciDevice(
        address=node.claim(node.address(d["address"], where), where),
        vendor_id=d["vendor_id"].lower(),
        product_id=d["product_id"].lower(),
        numa_node=node.numa(d.get("numa_node"), where),
        resource_class=d.get("resource_class"),
        traits=frozenset(d.get("traits", [])),
    )


def _sriov_pf(p: dict[str, Any], where: str, node: _NodeReading) -> SriovPF:
    """One entry of ``sriov_pfs``; its VFs' addresses are taken too (PCI SR-IOV numbering)."""
    address = node.claim(node.address(p["address"], where), where)
    num = p.get("num_vfs", p["total_vfs"])
    if num > p["total_vfs"]:
        raise node.fail(where, f"num_vfs {num} exceeds total_vfs {p['total_vfs']}")
    try:
        vfs = vf_addresses(
            address,
            num,
            p.get("vf_offset", DEFAULT_VF_OFFSET),
            p.get("vf_stride", DEFAULT_VF_STRIDE),
        )
    except ValueError as exc:
        raise node.fail(where, str(exc)) from None
    for n, vf in enumerate(vfs):
        node.claim(vf, f"{where} VF {n}")
    return SriovPF(
        address=address,
        total_vfs=p["total_vfs"],
        vf_addresses=vfs,
        numa_node=node.numa(p.get("numa_node"), where),
        physnet=p.get("physnet"),
        netdev=p.get("netdev"),
        traits=frozenset(p.get("traits", [])),
        vf_vendor_id=p.get("vf_vendor_id", "").lower(),
        vf_product_id=p.get("vf_product_id", "").lower(),
        resource_class=p.get("resource_class"),
        spec_traits=frozenset(p.get("traits", [])),
    )


def _mdev(
    m: dict[str, Any], where: str, gpu: str, types: Iterable[str], node: _NodeReading
) -> Mdev:
    """One entry of a GPU's ``mdevs``: of a type the GPU offers, its UUID unique on the node."""
    if m["type"] not in types:
        raise node.fail(where, f"mdev type {m['type']!r} is not offered by this GPU")
    uuid = node.uuid(m["uuid"], where)
    if uuid in node.mdevs:
        raise node.fail(where, f"mdev {uuid} is listed twice")
    node.mdevs.add(uuid)
    return Mdev(uuid=uuid, type_id=m["type"], parent=gpu)


def _gpu(g: dict[str, Any], where: str, node: _NodeReading) -> Gpu:
    """One entry of ``gpus``: its mdev types and the mdevs created on it."""
    address = node.claim(node.address(g["address"], where), where)
    types = {
        t["id"]: MdevType(
            id=t["id"],
            name=t.get("name", t["id"]),
            available_instances=t["available_instances"],
            device_api=t.get("device_api", "vfio-pci"),
        )
        for t in g["mdev_types"]
    }
    mdevs = _entries(g, "mdevs", where, partial(_mdev, gpu=address, types=types, node=node))
    return Gpu(
        address=address,
        mdev_types=MappingProxyType(types),
        mdevs=mdevs,
        numa_node=node.numa(g.get("numa_node"), where),
    )


def _instance(r: dict[str, Any], where: str, node: _NodeReading) -> Instance:
    """One entry of ``instances``; the devices it names are checked by :func:`check_instances`."""
    f = r["flavor"]
    return Instance(
        uuid=node.uuid(r["uuid"], where),
        name=r.get("name", ""),
        project_id=r["project_id"],
        user_id=r["user_id"],
        flavor=Flavor(
            vcpus=f["vcpus"],
            memory_mb=f["memory_mb"],
            root_gb=f.get("root_gb", 0),
            ephemeral_gb=f.get("ephemeral_gb", 0),
            swap_mb=f.get("swap_mb", 0),
            name=f.get("name", ""),
        ),
        boot_from_volume=r.get("boot_from_volume", False),
        pinned=r.get("pinned", False),
        numa_cells=tuple(r.get("numa_cells", [])),
        pci_devices=_entries(r, "pci_devices", where, node.address),
        mdevs=_entries(r, "mdevs", where, node.uuid),
    )


def _entries(
    raw: dict[str, Any],
    section: str,
    at: str,
    read: Callable[[Any, str], _T],
) -> tuple[_T, ...]:
    """``read(entry, where)`` for each entry of list ``raw[section]``, in order.

    ``where`` is the entry's place, ``{at}.{section}[{i}]``, for the errors.
    """
    return tuple(
        read(entry, f"{at}.{section}[{i}]") for i, entry in enumerate(raw.get(section, []))
    )


_DEVICE_SECTIONS: tuple[tuple[str, Callable[[dict[str, Any], str, _NodeReading], Any]], ...] = (
    ("pci_devices", _pci_device),
    ("sriov_pfs", _sriov_pf),
    ("gpus", _gpu),
)
"""The device sections, in reading order: an address taken twice is reported at the later one."""


def read_node(raw: dict[str, Any], at: str, path: str) -> FakeNode:
    """One entry of ``nodes``: its hardware, then its instances checked against it.

    Args:
        raw: the entry, valid against :data:`drivers.fake_host.schema.NODE`.
        at: its place in the document (``nodes[0]``).
        path: the description file, for errors.

    Raises:
        HostDescriptionError: the first fault, naming its place.
    """
    node = _NodeReading(path, at)
    cells = _numa_cells(raw, node)
    vcpus, pcpus = _totals(raw, cells, node)
    devices = {
        section: _entries(raw, section, at, partial(read, node=node))
        for section, read in _DEVICE_SECTIONS
    }
    host = HostResources(
        nodename=raw["nodename"],
        vcpus=vcpus,
        pcpus=pcpus,
        memory_mb=raw["memory_mb"],
        disk_gb=raw.get("disk_gb", 0),
        shared_storage=raw.get("shared_storage", False),
        traits=frozenset(raw.get("cpu", {}).get("traits", [])) | frozenset(raw.get("traits", [])),
        numa_cells=cells,
        **devices,
    )
    fake = FakeNode(host)
    for i, entry in enumerate(raw.get("instances", [])):
        instance = _instance(entry, f"{at}.instances[{i}]", node)
        if instance.uuid in fake.instances:
            raise node.fail(f"{at}.instances[{i}]", f"instance {instance.uuid} is listed twice")
        fake.instances[instance.uuid] = instance
    check_instances(host, fake.instances.values(), lambda w, r: node.fail(f"{at}.{w}", r))
    return fake


def check_instances(
    host: HostResources,
    instances: Iterable[Instance],
    fail: Callable[[str, str], Exception],
) -> None:
    """Check that instances name devices and cells the host has, each used once.

    Args:
        host: the node's hardware.
        instances: iterable of :class:`Instance`.
        fail: ``fail(where, reason) -> Exception`` building the error to raise.

    Raises:
        whatever ``fail`` builds, for the first fault.
    """
    assignable = host.pf_of_vf().keys() | {d.address for d in host.pci_devices}
    mdevs = host.gpu_of_mdev()
    cells = {c.id for c in host.numa_cells}
    used: dict[str, str] = {}
    for n, inst in enumerate(instances):
        w = f"instances[{n}]"
        for cid in inst.numa_cells:
            if cid not in cells:
                raise fail(
                    w,
                    f"instance {inst.uuid} is pinned to NUMA cell {cid}, which the "
                    f"node does not have (cells: {sorted(cells)})",
                )
        for dev in (*inst.pci_devices, *inst.mdevs):
            known = dev in assignable or dev in mdevs
            if not known:
                raise fail(
                    w,
                    f"instance {inst.uuid} uses {dev}, which is neither a VF, a "
                    "passthrough PCI device nor an mdev of this node",
                )
            if dev in used:
                raise fail(w, f"{dev} is assigned to both {used[dev]} and {inst.uuid}")
            used[dev] = inst.uuid
