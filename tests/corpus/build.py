"""Build a corpus host from its description: a sysfs tree, or a libvirt test:/// host.

A description (``hosts/<name>.yaml``) holds the facts of one public host
description, transcribed with their origin (README.md, "Format"). This
module writes what the drivers read:

* ``kind: sysfs``: ``sys/`` and ``proc/`` below a directory, through
  :func:`drivers.host.synthetic.write_sysfs` plus the source's quirks (offline
  CPUs, missing files, files given verbatim);
* ``kind: libvirt``: ``host.xml`` (libvirt's test driver: node info and node
  devices) and, when the source has capabilities, ``capabilities.xml``;
* ``kind: capture``: a ``compute-agent capture`` directory kept under
  ``captures/<name>/``, used as it is.
"""

from __future__ import annotations

import os
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from drivers.host.cpuset import format_cpu_set, parse_cpulist
from drivers.host.synthetic import FakeHost, FakePci, write_sysfs

CORPUS = Path(__file__).resolve().parent
HOSTS = CORPUS / "hosts"
CAPTURES = CORPUS / "captures"
EXPECTED = CORPUS / "expected"
KINDS = ("sysfs", "libvirt", "capture")


class DescriptionError(Exception):
    """A corpus description is malformed: the file and what is wrong."""


@dataclass(frozen=True, slots=True)
class Host:
    """One corpus host.

    Attributes:
        name: file stem (``hosts/<name>.yaml``) or capture directory name.
        kind: ``sysfs``, ``libvirt`` or ``capture``.
        data: the description (for a capture, its ``host.yaml`` if any, else {}).
    """

    name: str
    kind: str
    data: dict[str, Any]

    @property
    def config(self) -> dict[str, Any]:
        """The description's ``config`` overrides ({} when none)."""
        return dict(self.data.get("config") or {})

    @property
    def expected(self) -> Path:
        """Path of the golden file."""
        return EXPECTED / f"{self.name}.json"


def load_hosts() -> list[Host]:
    """Every corpus host, sorted by name.

    Raises:
        DescriptionError: a description has no valid ``kind`` or two hosts share a name.
    """
    hosts: dict[str, Host] = {}
    for path in sorted(HOSTS.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("kind") not in ("sysfs", "libvirt"):
            raise DescriptionError(f"{path}: kind must be sysfs or libvirt")
        hosts[path.stem] = Host(path.stem, data["kind"], data)
    for path in sorted(CAPTURES.iterdir()) if CAPTURES.is_dir() else ():
        if path.name in hosts:
            raise DescriptionError(f"{path}: a host named {path.name} exists already")
        meta = path / "host.yaml"
        data = yaml.safe_load(meta.read_text(encoding="utf-8")) if meta.exists() else {}
        hosts[path.name] = Host(path.name, "capture", data or {})
    return [hosts[n] for n in sorted(hosts)]


def build(host: Host, dest: Path) -> Path:
    """Write ``host`` below ``dest`` (created); returns the directory to read.

    For sysfs and capture hosts that is the sysfs root; for libvirt hosts
    the directory holding ``host.xml`` (and ``capabilities.xml``).
    """
    if host.kind == "capture":
        shutil.copytree(CAPTURES / host.name, dest, symlinks=True)
        return dest
    if host.kind == "sysfs":
        return _build_sysfs(host.data, dest)
    return _build_libvirt(host.data, dest)


# -- sysfs ---------------------------------------------------------------------


def _cpu_tokens(text: str) -> list[tuple[int, int, int, int | None]]:
    """``"0/0/0 1/0/1/2"``: cpu/package/core[/die] per online CPU."""
    out = []
    for token in str(text).split():
        parts = [int(x) for x in token.split("/")]
        out.append((parts[0], parts[1], parts[2], parts[3] if len(parts) > 3 else None))
    return out


def _pci(entry: dict[str, Any]) -> FakePci:
    return FakePci(
        address=entry["address"],
        vendor=entry["vendor"],
        device=entry["device"],
        class_code=entry["class"],
        numa=entry.get("numa", -1),
        driver=entry.get("driver"),
        iommu_group=entry.get("iommu_group"),
        netdev=entry.get("netdev"),
        total_vfs=entry.get("total_vfs", 0),
        vf_offset=entry.get("vf_offset", 1),
        vf_stride=entry.get("vf_stride", 1),
        vf_device=entry.get("vf_device", ""),
        num_vfs=entry.get("num_vfs", 0),
        vf_driver=entry.get("vf_driver"),
        mdev_types={k: tuple(v) for k, v in (entry.get("mdev_types") or {}).items()},
        mdevs=[tuple(m) for m in entry.get("mdevs") or ()],
    )


def _build_sysfs(data: dict[str, Any], root: Path) -> Path:
    cpuinfo = data.get("cpuinfo")
    numa = [
        (n["id"], sorted(parse_cpulist(str(n.get("cpus", "")))), n.get("memtotal_kb") or 0, {})
        for n in data.get("numa") or ()
    ]
    tokens = _cpu_tokens(data["cpus"])
    host = FakeHost(
        cpus=[(cpu, package, core) for cpu, package, core, _ in tokens],
        numa=numa,
        memtotal_kb=data["memtotal_kb"],
        hugepages={int(k): v for k, v in (data.get("hugepages") or {}).items()},
        vendor=(cpuinfo or {}).get("vendor", ""),
        flags=(cpuinfo or {}).get("flags", ""),
        mounts=tuple(data.get("mounts") or ("/dev/sda1 / ext4 rw,relatime 0 0",)),
        pci=[_pci(p) for p in data.get("pci") or ()],
    )
    write_sysfs(root, host)
    cpu_dir = root / "sys/devices/system/cpu"
    for cpu, _, _, die in tokens:
        if die is not None:
            (cpu_dir / f"cpu{cpu}/topology/die_id").write_text(f"{die}\n")
    offline = parse_cpulist(str(data.get("offline", "")))
    for cpu in sorted(offline):
        # The kernel keeps an offline CPU's directory and drops its topology.
        (cpu_dir / f"cpu{cpu}").mkdir(parents=True, exist_ok=True)
        (cpu_dir / f"cpu{cpu}/online").write_text("0\n")
    if not data.get("online_file", True):
        (cpu_dir / "online").unlink()
        (cpu_dir / "offline").write_text(format_cpu_set(offline) + "\n")
    if cpuinfo is None:
        (root / "proc/cpuinfo").unlink()
    for n in data.get("numa") or ():
        node = root / f"sys/devices/system/node/node{n['id']}"
        if n.get("memtotal_kb") is None:
            (node / "meminfo").unlink()
        for size, count in (n.get("hugepages") or {}).items():
            pool = node / f"hugepages/hugepages-{size}kB"
            pool.mkdir(parents=True, exist_ok=True)
            (pool / "nr_hugepages").write_text(f"{count}\n")
    for rel, target in (data.get("links") or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
    for rel, content in (data.get("files") or {}).items():
        path = root / rel
        if content is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(str(content), encoding="utf-8")
    return root


# -- libvirt -------------------------------------------------------------------


def _sub(parent: ET.Element, tag: str, text: object = None, **attrib: object) -> ET.Element:
    elem = ET.SubElement(parent, tag, {k: str(v) for k, v in attrib.items()})
    if text is not None:
        elem.text = str(text)
    return elem


def device_name(address: str) -> str:
    """libvirt's node device name of a PCI address: ``pci_dddd_bb_ss_f``."""
    return "pci_" + address.replace(":", "_").replace(".", "_")


def _split(address: str) -> tuple[int, int, int, int]:
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return int(domain, 16), int(bus, 16), int(slot, 16), int(function, 16)


def _address_elem(parent: ET.Element, address: str) -> None:
    d, b, s, f = _split(address)
    _sub(
        parent,
        "address",
        domain=f"0x{d:04x}",
        bus=f"0x{b:02x}",
        slot=f"0x{s:02x}",
        function=f"0x{f:x}",
    )


def _sriov_caps(cap: ET.Element, dev: dict[str, Any]) -> None:
    """A VF's ``phys_function`` and a PF's ``virt_functions`` capabilities."""
    if dev.get("physfn"):
        _address_elem(_sub(cap, "capability", type="phys_function"), dev["physfn"])
    if "max_vfs" in dev or dev.get("vfs"):
        vfs = _sub(cap, "capability", type="virt_functions", maxCount=dev.get("max_vfs", 0))
        for vf in dev.get("vfs") or ():
            _address_elem(vfs, vf)


def _mdev_types_cap(cap: ET.Element, dev: dict[str, Any]) -> None:
    """A GPU's ``mdev_types`` capability: id -> (name or None, available, device API)."""
    if not dev.get("mdev_types"):
        return
    types = _sub(cap, "capability", type="mdev_types")
    for tid, (name, available, api) in dev["mdev_types"].items():
        t = _sub(types, "type", id=tid)
        if name is not None:
            _sub(t, "name", name)
        _sub(t, "deviceAPI", api)
        _sub(t, "availableInstances", available)


def _vpd_cap(cap: ET.Element, dev: dict[str, Any]) -> None:
    """The ``vpd`` capability: the product name and its read-only fields."""
    if not dev.get("vpd"):
        return
    vpd = _sub(cap, "capability", type="vpd")
    _sub(vpd, "name", dev["vpd"]["name"])
    ro = _sub(vpd, "fields", access="readonly")
    for tag, value in (dev["vpd"].get("readonly") or {}).items():
        _sub(ro, tag, value)


def _net_devices(node: ET.Element, dev: dict[str, Any]) -> None:
    """One ``net_*`` node device per interface of the PCI device, its child."""
    for iface in dev.get("net") or ():
        net = _sub(node, "device")
        _sub(net, "name", f"net_{iface}")
        _sub(net, "parent", dev.get("name") or device_name(dev["address"]))
        _sub(_sub(net, "capability", type="net"), "interface", iface)


def _pci_device(node: ET.Element, dev: dict[str, Any]) -> None:
    elem = _sub(node, "device")
    _sub(elem, "name", dev.get("name") or device_name(dev["address"]))
    _sub(elem, "parent", dev.get("parent", "computer"))
    if dev.get("driver"):
        _sub(_sub(elem, "driver"), "name", dev["driver"])
    cap = _sub(elem, "capability", type="pci")
    if dev.get("class") is not None:
        _sub(cap, "class", f"0x{dev['class']}")
    d, b, s, f = _split(dev["address"])
    fields = {"domain": d, "bus": b, "slot": s, "function": f, **(dev.get("fields") or {})}
    for tag in ("domain", "bus", "slot", "function"):
        _sub(cap, tag, fields[tag])
    _sub(cap, "product", id=f"0x{dev['product']}")
    _sub(cap, "vendor", id=f"0x{dev['vendor']}")
    _sriov_caps(cap, dev)
    _mdev_types_cap(cap, dev)
    for kind in dev.get("extra_caps") or ():  # e.g. pci-bridge, which the drivers ignore
        _sub(cap, "capability", type=kind)
    _vpd_cap(cap, dev)
    if dev.get("iommu_group") is not None:
        _address_elem(_sub(cap, "iommuGroup", number=dev["iommu_group"]), dev["address"])
    if dev.get("numa") is not None:
        _sub(cap, "numa", node=dev["numa"])
    _net_devices(node, dev)


def _mdev_device(node: ET.Element, mdev: dict[str, Any]) -> None:
    elem = _sub(node, "device")
    _sub(elem, "name", "mdev_" + mdev["uuid"].replace("-", "_"))
    _sub(elem, "parent", device_name(mdev["parent"]))
    cap = _sub(elem, "capability", type="mdev")
    _sub(cap, "type", id=mdev["type"])
    if mdev.get("uuid_element", True):  # libvirt before 7.3 wrote none
        _sub(cap, "uuid", mdev["uuid"])
    if mdev.get("iommu_group") is not None:
        _sub(cap, "iommuGroup", number=mdev["iommu_group"])


def host_xml(data: dict[str, Any]) -> str:
    """The test driver's host file: node info and node devices."""
    info = data["node"]
    node = ET.Element("node")
    cpu = _sub(node, "cpu")
    for tag in ("nodes", "sockets", "cores", "threads"):
        _sub(cpu, tag, info[tag])
    _sub(cpu, "active", info["cpus"])
    _sub(cpu, "mhz", info.get("mhz", 2000))
    _sub(cpu, "model", info.get("model", "x86_64"))
    _sub(node, "memory", info["memory_kib"])
    for dev in data.get("devices") or ():
        _pci_device(node, dev)
    for mdev in data.get("mdevs") or ():
        _mdev_device(node, mdev)
    ET.indent(node)
    return ET.tostring(node, encoding="unicode") + "\n"


def _cell_cpus(cpus: ET.Element, text: str, offline: str) -> None:
    """CPUs of a cell: ``id/socket/core/siblings`` tokens, or bare ids (no attributes)."""
    for token in str(text).split():
        parts = token.split("/")
        if len(parts) == 1:
            _sub(cpus, "cpu", id=parts[0])
        else:
            cid, socket, core, siblings = parts
            _sub(cpus, "cpu", id=cid, socket_id=socket, core_id=core, siblings=siblings)
    for cid in sorted(parse_cpulist(str(offline))):
        _sub(cpus, "cpu", id=cid)


def capabilities_xml(caps: dict[str, Any]) -> str:
    """A ``virsh capabilities`` document with the host facts of ``caps``."""
    root = ET.Element("capabilities")
    host = _sub(root, "host")
    cpu = _sub(host, "cpu")
    _sub(cpu, "arch", caps.get("arch", "x86_64"))
    if caps.get("model"):
        _sub(cpu, "model", caps["model"])
    if caps.get("vendor"):
        _sub(cpu, "vendor", caps["vendor"])
    if caps.get("topology"):
        sockets, cores, threads = caps["topology"]
        _sub(cpu, "topology", sockets=sockets, cores=cores, threads=threads)
    for name in str(caps.get("features", "")).split():
        _sub(cpu, "feature", name=name)
    for size in caps.get("pages") or ():
        _sub(cpu, "pages", unit="KiB", size=size)
    if caps.get("cells") is not None:
        cells = _sub(_sub(host, "topology"), "cells", num=len(caps["cells"]))
        for c in caps["cells"]:
            cell = _sub(cells, "cell", id=c["id"])
            if c.get("memory_kib") is not None:
                _sub(cell, "memory", c["memory_kib"], unit="KiB")
            for size, count in (c.get("pages") or {}).items():
                _sub(cell, "pages", count, unit="KiB", size=size)
            if c.get("distances"):
                dist = _sub(cell, "distances")
                for sid, value in c["distances"].items():
                    _sub(dist, "sibling", id=sid, value=value)
            n = len(str(c.get("cpus", "")).split()) + len(parse_cpulist(str(c.get("offline", ""))))
            _cell_cpus(_sub(cell, "cpus", num=n), c.get("cpus", ""), c.get("offline", ""))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"


def _build_libvirt(data: dict[str, Any], dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "host.xml").write_text(host_xml(data), encoding="utf-8")
    if data.get("caps") is not None:
        (dest / "capabilities.xml").write_text(capabilities_xml(data["caps"]), encoding="utf-8")
    return dest
