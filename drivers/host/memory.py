"""Memory: total RAM (MEMORY_MB) and the host's huge page pools.

Sources: psutil (``virtual_memory().total``, i.e. ``MemTotal`` of
/proc/meminfo) on the real host, /proc/meminfo of the fixture otherwise;
``/sys/kernel/mm/hugepages/hugepages-<size>kB/nr_hugepages`` (kernel
Documentation/admin-guide/mm/hugetlbpage.rst).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import psutil

from drivers.host.sysfs import Root, SysfsError, SysfsReader, as_reader

MEMINFO = "proc/meminfo"
HUGEPAGES_DIR = "sys/kernel/mm/hugepages"
HUGEPAGES_RE = re.compile(r"hugepages-(\d+)kB")
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    """The host's memory.

    Attributes:
        total_mb: RAM in MiB (rounded down), before reserved_host_memory_mb.
        hugepages: page size in KiB -> pages in the pool (``nr_hugepages``).
    """

    total_mb: int
    hugepages: Mapping[int, int]


def parse_meminfo_total(text: str, key: str = "MemTotal") -> int:
    """KiB of ``key`` in a meminfo file (/proc/meminfo or a NUMA node's).

    Node files prefix each line with ``Node N``; both forms are accepted.

    Raises:
        ValueError: the key is absent or its value is not ``<int> kB``.
    """
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.split()[-1:] == [key]:
            number, _, unit = value.strip().partition(" ")
            if unit.strip() != "kB":
                raise ValueError(f"{key} is not in kB")
            return int(number)
    raise ValueError(f"no {key} line")


def read_hugepages(reader: SysfsReader, directory: str) -> dict[int, int]:
    """``{page size KiB: nr_hugepages}`` of a ``hugepages`` directory; {} when absent.

    Raises:
        SysfsError: a pool's ``nr_hugepages`` is unreadable or garbled.
    """
    pools: dict[int, int] = {}
    for name in reader.listdir(directory, HUGEPAGES_RE) or ():
        size = int(HUGEPAGES_RE.fullmatch(name)[1])  # type: ignore[index]
        pools[size] = reader.integer(f"{directory}/{name}/nr_hugepages")
    return pools


def discover_memory(root: Root) -> MemoryInfo:
    """Total RAM and the huge page pools.

    On the real host the total comes from psutil; /proc/meminfo is still read
    so that ``capture`` keeps it and a capture replays the same total.
    Unreadable huge page pools are warned about and reported as none.

    Raises:
        SysfsError: /proc/meminfo is missing or garbled (no MEMORY_MB can be
            reported).
    """
    reader = as_reader(root)
    kib = reader.parse(MEMINFO, parse_meminfo_total)
    assert kib is not None
    total_mb = psutil.virtual_memory().total // MIB if reader.is_live else kib // 1024
    try:
        pools = read_hugepages(reader, HUGEPAGES_DIR)
    except SysfsError as exc:
        reader.skip(exc, "host huge page pools")
        pools = {}
    return MemoryInfo(total_mb, MappingProxyType(pools))
