"""NUMA cells: ``/sys/devices/system/node/node*`` (cpulist, meminfo, huge pages).

Kernel ABI: Documentation/ABI/stable/sysfs-devices-node. A host without that
directory (NUMA disabled, some VMs) has no cells; the tree then has no NUMA
children even with ``[numa] model_in_placement``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from drivers.host.cpuset import parse_cpulist
from drivers.host.memory import parse_meminfo_total, read_hugepages
from drivers.host.sysfs import Root, SysfsError, as_reader
from drivers.records import NumaCell, cells_mib

NODE_DIR = "sys/devices/system/node"
_NODE_RE = re.compile(r"node\d+")


@dataclass(frozen=True, slots=True)
class NumaNode:
    """One NUMA node as sysfs shows it.

    Attributes:
        id: N of ``nodeN``.
        cpus: CPU numbers of the node (``cpulist``).
        memory_kib: ``MemTotal`` of the node, KiB.
        hugepages: page size in KiB -> pages in the node's pool.
    """

    id: int
    cpus: frozenset[int]
    memory_kib: int
    hugepages: Mapping[int, int]


def discover_numa(root: Root) -> tuple[NumaNode, ...]:
    """The host's NUMA nodes, by id; () when there is no node directory.

    A node whose files are missing or garbled is warned about and left out.
    """
    reader = as_reader(root)
    try:
        names = reader.listdir(NODE_DIR, _NODE_RE) or []
    except SysfsError as exc:
        reader.skip(exc, "NUMA topology")
        return ()
    nodes = []
    for name in sorted(names, key=lambda n: int(n[4:])):
        base = f"{NODE_DIR}/{name}"
        try:
            cpus = reader.parse(f"{base}/cpulist", parse_cpulist)
            kib = reader.parse(f"{base}/meminfo", parse_meminfo_total)
            pools = read_hugepages(reader, f"{base}/hugepages")
        except SysfsError as exc:
            reader.skip(exc, f"NUMA node {name[4:]}")
            continue
        assert cpus is not None and kib is not None
        nodes.append(NumaNode(int(name[4:]), cpus, kib, MappingProxyType(pools)))
    return tuple(nodes)


def numa_cells(
    nodes: Iterable[NumaNode], vcpu_ids: frozenset[int], pcpu_ids: frozenset[int]
) -> tuple[NumaCell, ...]:
    """:class:`NumaCell` records: each node's CPUs split as the host splits them.

    Memory is whole MiB per cell, rounded so that the cells sum to the
    host's MemTotal in MiB (:func:`drivers.records.cells_mib`).

    Args:
        nodes: from :func:`discover_numa`.
        vcpu_ids: CPUs offered as VCPU (host-wide).
        pcpu_ids: CPUs offered as PCPU (host-wide).
    """
    nodes = tuple(nodes)
    mib = cells_mib([n.memory_kib for n in nodes])
    return tuple(
        NumaCell(
            id=n.id,
            vcpus=len(n.cpus & vcpu_ids),
            pcpus=len(n.cpus & pcpu_ids),
            memory_mb=m,
            hugepages=n.hugepages,
        )
        for n, m in zip(nodes, mib, strict=True)
    )
