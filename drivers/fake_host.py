"""Read a fake host description (YAML) into driver records.

Format: docs/fake-host.md. Structure is checked with a JSON schema; what a
schema cannot say (unique addresses, devices that instances name, VF counts)
is checked after. Any fault is one :class:`HostDescriptionError` naming the
file and the place in it, e.g. ``examples/big-host.yaml at nodes[0].gpus[1]:
mdev type 'nvidia-99' is not offered by this GPU``.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jsonschema
import yaml

from agent.model.exceptions import HostDescriptionError
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

_COUNT = {"type": "integer", "minimum": 0}
_STRS = {"type": "array", "items": {"type": "string", "minLength": 1}}
_HEX4 = {"type": "string", "pattern": "^[0-9a-fA-F]{4}$"}
_NUMA = {"type": ["integer", "null"], "minimum": 0}


def _obj(props: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(required),
        "additionalProperties": False,
    }


SCHEMA: dict[str, Any] = _obj(
    {
        "nodes": {
            "type": "array",
            "minItems": 1,
            "items": _obj(
                {
                    "nodename": {"type": "string", "minLength": 1},
                    "cpu": _obj({"vcpus": _COUNT, "pcpus": _COUNT, "traits": _STRS}),
                    "memory_mb": _COUNT,
                    "disk_gb": _COUNT,
                    "shared_storage": {"type": "boolean"},
                    "traits": _STRS,
                    "numa_cells": {
                        "type": "array",
                        "items": _obj(
                            {
                                "id": _COUNT,
                                "vcpus": _COUNT,
                                "pcpus": _COUNT,
                                "memory_mb": _COUNT,
                                "hugepages": {
                                    "type": "object",
                                    "patternProperties": {"^[0-9]+$": _COUNT},
                                    "additionalProperties": False,
                                },
                            },
                            ["id", "memory_mb"],
                        ),
                    },
                    "pci_devices": {
                        "type": "array",
                        "items": _obj(
                            {
                                "address": {"type": "string"},
                                "vendor_id": _HEX4,
                                "product_id": _HEX4,
                                "numa_node": _NUMA,
                                "resource_class": {"type": "string", "minLength": 1},
                                "traits": _STRS,
                            },
                            ["address", "vendor_id", "product_id"],
                        ),
                    },
                    "sriov_pfs": {
                        "type": "array",
                        "items": _obj(
                            {
                                "address": {"type": "string"},
                                "total_vfs": {"type": "integer", "minimum": 1},
                                "num_vfs": _COUNT,
                                "vf_offset": {"type": "integer", "minimum": 1},
                                "vf_stride": {"type": "integer", "minimum": 1},
                                "numa_node": _NUMA,
                                "physnet": {"type": "string", "minLength": 1},
                                "netdev": {"type": "string", "minLength": 1},
                                "traits": _STRS,
                                "vf_vendor_id": _HEX4,
                                "vf_product_id": _HEX4,
                                "resource_class": {"type": "string", "minLength": 1},
                            },
                            ["address", "total_vfs"],
                        ),
                    },
                    "gpus": {
                        "type": "array",
                        "items": _obj(
                            {
                                "address": {"type": "string"},
                                "numa_node": _NUMA,
                                "mdev_types": {
                                    "type": "array",
                                    "minItems": 1,
                                    "items": _obj(
                                        {
                                            "id": {"type": "string", "minLength": 1},
                                            "name": {"type": "string"},
                                            "available_instances": _COUNT,
                                            "device_api": {"type": "string"},
                                        },
                                        ["id", "available_instances"],
                                    ),
                                },
                                "mdevs": {
                                    "type": "array",
                                    "items": _obj(
                                        {"uuid": {"type": "string"}, "type": {"type": "string"}},
                                        ["uuid", "type"],
                                    ),
                                },
                            },
                            ["address", "mdev_types"],
                        ),
                    },
                    "instances": {
                        "type": "array",
                        "items": _obj(
                            {
                                "uuid": {"type": "string"},
                                "name": {"type": "string"},
                                "project_id": {"type": "string", "minLength": 1},
                                "user_id": {"type": "string", "minLength": 1},
                                "flavor": _obj(
                                    {
                                        "name": {"type": "string"},
                                        "vcpus": _COUNT,
                                        "memory_mb": _COUNT,
                                        "root_gb": _COUNT,
                                        "ephemeral_gb": _COUNT,
                                        "swap_mb": _COUNT,
                                    },
                                    ["vcpus", "memory_mb"],
                                ),
                                "boot_from_volume": {"type": "boolean"},
                                "pinned": {"type": "boolean"},
                                "numa_cells": {"type": "array", "items": _COUNT},
                                "pci_devices": {"type": "array", "items": {"type": "string"}},
                                "mdevs": {"type": "array", "items": {"type": "string"}},
                            },
                            ["uuid", "project_id", "user_id", "flavor"],
                        ),
                    },
                },
                ["nodename", "memory_mb"],
            ),
        }
    },
    ["nodes"],
)

DEFAULT_VF_OFFSET = 128
"""``sriov_offset`` of a PF when the description does not give one."""
DEFAULT_VF_STRIDE = 1
"""``sriov_stride`` of a PF when the description does not give one."""


@dataclass(slots=True)
class FakeNode:
    """One node of a host description: its hardware and its instances."""

    host: HostResources
    instances: dict[str, Instance] = field(default_factory=dict)


def _where(path: Sequence[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _Reader:
    """Turns one parsed document into FakeNodes, failing with the place at fault."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, reason: str) -> HostDescriptionError:
        return HostDescriptionError(self.path, where, reason)

    def address(self, value: str, where: str) -> str:
        try:
            return normalize_pci_address(value)
        except ValueError as exc:
            raise self.fail(where, str(exc)) from None

    def uuid(self, value: str, where: str) -> str:
        try:
            return str(uuidlib.UUID(value))
        except ValueError:
            raise self.fail(where, f"{value!r} is not a UUID") from None

    def node(self, raw: dict[str, Any], at: str) -> FakeNode:
        cells = tuple(
            NumaCell(
                id=c["id"],
                vcpus=c.get("vcpus", 0),
                pcpus=c.get("pcpus", 0),
                memory_mb=c["memory_mb"],
                hugepages=MappingProxyType(
                    {int(k): v for k, v in (c.get("hugepages") or {}).items()}
                ),
            )
            for c in raw.get("numa_cells", [])
        )
        cell_ids = [c.id for c in cells]
        if len(set(cell_ids)) != len(cell_ids):
            raise self.fail(f"{at}.numa_cells", f"NUMA cell ids repeat: {cell_ids}")
        cpu = raw.get("cpu", {})
        vcpus = cpu.get("vcpus", sum(c.vcpus for c in cells))
        pcpus = cpu.get("pcpus", sum(c.pcpus for c in cells))
        if cells:
            for name, total, key in (
                ("cpu.vcpus", vcpus, "vcpus"),
                ("cpu.pcpus", pcpus, "pcpus"),
                ("memory_mb", raw["memory_mb"], "memory_mb"),
            ):
                cell_sum = sum(getattr(c, key) for c in cells)
                if total != cell_sum:
                    raise self.fail(
                        f"{at}.{name}",
                        f"{total} differs from the sum over numa_cells ({cell_sum}); "
                        "make them agree or leave the host-level value out",
                    )

        def numa(value: int | None, where: str) -> int | None:
            if value is not None and cells and value not in cell_ids:
                raise self.fail(where, f"numa_node {value} is not one of the cells {cell_ids}")
            return value

        seen: dict[str, str] = {}

        def claim(addr: str, where: str) -> str:
            if addr in seen:
                raise self.fail(where, f"PCI address {addr} is already used at {seen[addr]}")
            seen[addr] = where
            return addr

        devices = []
        for i, d in enumerate(raw.get("pci_devices", [])):
            w = f"{at}.pci_devices[{i}]"
            devices.append(
                PciDevice(
                    address=claim(self.address(d["address"], w), w),
                    vendor_id=d["vendor_id"].lower(),
                    product_id=d["product_id"].lower(),
                    numa_node=numa(d.get("numa_node"), w),
                    resource_class=d.get("resource_class"),
                    traits=frozenset(d.get("traits", [])),
                )
            )
        pfs = []
        for i, p in enumerate(raw.get("sriov_pfs", [])):
            w = f"{at}.sriov_pfs[{i}]"
            addr = claim(self.address(p["address"], w), w)
            num = p.get("num_vfs", p["total_vfs"])
            if num > p["total_vfs"]:
                raise self.fail(w, f"num_vfs {num} exceeds total_vfs {p['total_vfs']}")
            try:
                vfs = vf_addresses(
                    addr,
                    num,
                    p.get("vf_offset", DEFAULT_VF_OFFSET),
                    p.get("vf_stride", DEFAULT_VF_STRIDE),
                )
            except ValueError as exc:
                raise self.fail(w, str(exc)) from None
            for n, vf in enumerate(vfs):
                claim(vf, f"{w} VF {n}")
            pfs.append(
                SriovPF(
                    address=addr,
                    total_vfs=p["total_vfs"],
                    vf_addresses=vfs,
                    numa_node=numa(p.get("numa_node"), w),
                    physnet=p.get("physnet"),
                    netdev=p.get("netdev"),
                    traits=frozenset(p.get("traits", [])),
                    vf_vendor_id=p.get("vf_vendor_id", "").lower(),
                    vf_product_id=p.get("vf_product_id", "").lower(),
                    resource_class=p.get("resource_class"),
                    spec_traits=frozenset(p.get("traits", [])),
                )
            )
        gpus = []
        mdev_seen: set[str] = set()
        for i, g in enumerate(raw.get("gpus", [])):
            w = f"{at}.gpus[{i}]"
            addr = claim(self.address(g["address"], w), w)
            types = {
                t["id"]: MdevType(
                    id=t["id"],
                    name=t.get("name", t["id"]),
                    available_instances=t["available_instances"],
                    device_api=t.get("device_api", "vfio-pci"),
                )
                for t in g["mdev_types"]
            }
            mdevs = []
            for j, m in enumerate(g.get("mdevs", [])):
                mw = f"{w}.mdevs[{j}]"
                if m["type"] not in types:
                    raise self.fail(mw, f"mdev type {m['type']!r} is not offered by this GPU")
                muuid = self.uuid(m["uuid"], mw)
                if muuid in mdev_seen:
                    raise self.fail(mw, f"mdev {muuid} is listed twice")
                mdev_seen.add(muuid)
                mdevs.append(Mdev(uuid=muuid, type_id=m["type"], parent=addr))
            gpus.append(
                Gpu(
                    address=addr,
                    mdev_types=MappingProxyType(types),
                    mdevs=tuple(mdevs),
                    numa_node=numa(g.get("numa_node"), w),
                )
            )
        host = HostResources(
            nodename=raw["nodename"],
            vcpus=vcpus,
            pcpus=pcpus,
            memory_mb=raw["memory_mb"],
            disk_gb=raw.get("disk_gb", 0),
            shared_storage=raw.get("shared_storage", False),
            traits=frozenset(cpu.get("traits", [])) | frozenset(raw.get("traits", [])),
            numa_cells=cells,
            pci_devices=tuple(devices),
            sriov_pfs=tuple(pfs),
            gpus=tuple(gpus),
        )
        fake = FakeNode(host)
        for i, r in enumerate(raw.get("instances", [])):
            inst = self.instance(r, f"{at}.instances[{i}]")
            if inst.uuid in fake.instances:
                raise self.fail(f"{at}.instances[{i}]", f"instance {inst.uuid} is listed twice")
            fake.instances[inst.uuid] = inst
        check_instances(host, fake.instances.values(), lambda w, r: self.fail(f"{at}.{w}", r))
        return fake

    def instance(self, r: dict[str, Any], w: str) -> Instance:
        f = r["flavor"]
        return Instance(
            uuid=self.uuid(r["uuid"], w),
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
            pci_devices=tuple(
                self.address(a, f"{w}.pci_devices[{k}]")
                for k, a in enumerate(r.get("pci_devices", []))
            ),
            mdevs=tuple(self.uuid(m, f"{w}.mdevs[{k}]") for k, m in enumerate(r.get("mdevs", []))),
        )


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


def parse_host_description(document: Any, path: str = "<host description>") -> list[FakeNode]:
    """Validate a parsed YAML document and build its nodes.

    Raises:
        HostDescriptionError: the first fault, with its place in the document.
    """
    validator = jsonschema.Draft202012Validator(SCHEMA)
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        raise HostDescriptionError(path, _where(error.absolute_path), error.message)
    reader = _Reader(path)
    nodes = [reader.node(raw, f"nodes[{i}]") for i, raw in enumerate(document["nodes"])]
    names = [n.host.nodename for n in nodes]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise HostDescriptionError(path, f"nodes[{i}].nodename", f"nodename {name!r} repeats")
    return nodes


def load_host_description(path: str | Path) -> list[FakeNode]:
    """Read and validate a host description file.

    Args:
        path: the YAML file.

    Returns:
        One :class:`FakeNode` per entry of ``nodes``, in file order.

    Raises:
        HostDescriptionError: unreadable file, bad YAML, or a fault in the
            description (one line, naming the place).
    """
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise HostDescriptionError(path, "", f"cannot read the file: {exc.strerror}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise HostDescriptionError(path, where, f"not valid YAML: {problem}") from None
    return parse_host_description(document, path)
