"""Host capabilities: NUMA cells, huge pages, distances, CPU model and features.

Source: ``virConnectGetCapabilities`` (format: libvirt's formatcaps.html).
The parts read::

    <capabilities><host>
      <cpu><arch/><model/><vendor/><topology sockets= cores= threads=/>
           <feature name=/>...</cpu>
      <topology><cells num=>
        <cell id=><memory unit='KiB'/><pages unit='KiB' size=>count</pages>
          <distances><sibling id= value=/></distances>
          <cpus num=><cpu id= socket_id= core_id= siblings=/></cpus>
        </cell></cells></topology>
    </host></capabilities>

libvirt lists an offline CPU as ``<cpu id='N'/>`` with no topology
attributes (virCapabilitiesHostNUMAFormat); only CPUs with a ``socket_id``
are taken as online. Older libvirt (before 1.0, still seen on real Westmere
hosts) writes no topology attributes at all: when no CPU of the document has
a ``socket_id``, every listed CPU is online.

A cell without ``<memory>`` is a CPU-only cell (0 KiB). A cell whose values
are garbled is left out with a warning naming it; the other cells and the
CPU model are still used.

The host ``<cpu>`` lists only the features beyond its named model; the full
set comes from ``virConnectBaselineCPU`` with
``VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES`` (what nova does), and is mapped
to ``HW_CPU_X86_*`` traits by the host driver's mapping
(:func:`drivers.host.cpu.cpu_flag_traits`, nova's own map for the traits nova
decides) once libvirt's feature names are turned into the kernel's
(:func:`drivers.host.nova_cpu_map.kernel_flag`).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from drivers.host.cpu import cpu_flag_traits
from drivers.host.nova_cpu_map import kernel_flag
from drivers.libvirt.xmlutil import LibvirtXMLError, parse_xml, to_int

_WHAT = "host capabilities"

# libvirt's <vendor> -> /proc/cpuinfo vendor_id, for the vendor-prefixed traits.
_VENDOR_IDS = {"Intel": "GenuineIntel", "AMD": "AuthenticAMD"}


@dataclass(frozen=True, slots=True)
class CapsCell:
    """One NUMA cell of the host.

    Attributes:
        id: the cell number.
        memory_kib: the cell's memory, KiB.
        cpus: online CPU numbers of the cell.
        offline_cpus: CPUs of the cell listed without topology (offline).
        pages: huge page size KiB -> pages of that size in the cell (the base
            page size, 4 KiB on x86, is left out: it is ordinary memory).
        distances: cell id -> relative distance (ACPI SLIT; 10 = local).
        max_siblings: the most CPUs sharing a core in this cell.
    """

    id: int
    memory_kib: int
    cpus: frozenset[int]
    offline_cpus: frozenset[int] = frozenset()
    pages: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    distances: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    max_siblings: int = 1


@dataclass(frozen=True, slots=True)
class HostCapabilities:
    """What the capabilities document says about the host.

    Attributes:
        arch: e.g. ``x86_64``.
        model: the CPU model name (``Skylake-Server-IBRS``), or "".
        vendor: ``Intel``, ``AMD`` or "".
        features: feature names listed in the host ``<cpu>`` (libvirt names).
        threads_per_core: ``<topology threads=>`` of the host CPU (0 when absent).
        cells: NUMA cells by id; empty when libvirt reports none.
        cpu_xml: the host ``<cpu>`` element as text, for ``baselineCPU``.
        warnings: one line per cell left out, naming it.
    """

    arch: str
    model: str = ""
    vendor: str = ""
    features: frozenset[str] = frozenset()
    threads_per_core: int = 0
    cells: tuple[CapsCell, ...] = ()
    cpu_xml: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def online_cpus(self) -> frozenset[int]:
        """Every online CPU of every cell."""
        return frozenset().union(*(c.cpus for c in self.cells))


def _cpulist(text: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def _cell(elem: ET.Element, base_page_kib: int, old_format: bool, notes: list[str]) -> CapsCell:
    cid = to_int(elem.get("id"), _WHAT, "cell id")
    what = f"{_WHAT}: cell {cid}"
    mem = elem.find("memory")
    memory_kib = 0
    if mem is not None:
        if mem.get("unit", "KiB") != "KiB":
            raise LibvirtXMLError(what, f"<memory> in {mem.get('unit')!r}, expected KiB")
        memory_kib = to_int(mem.text, what, "memory")
        if memory_kib < 0:
            raise LibvirtXMLError(what, f"<memory> {memory_kib} is negative")
    pages = {}
    for p in elem.findall("pages"):
        if p.get("unit", "KiB") != "KiB":
            raise LibvirtXMLError(what, f"<pages> in {p.get('unit')!r}, expected KiB")
        size = to_int(p.get("size"), what, "page size")
        if size != base_page_kib:
            pages[size] = to_int(p.text, what, "page count")
    distances = {
        to_int(s.get("id"), what, "sibling id"): to_int(s.get("value"), what, "distance")
        for s in elem.findall("distances/sibling")
    }
    online, offline, siblings = set(), set(), 1
    for c in elem.findall("cpus/cpu"):
        cpu = to_int(c.get("id"), what, "cpu id")
        if cpu in online or cpu in offline:
            notes.append(f"{what}: cpu {cpu} is listed more than once; counted once")
            continue
        if c.get("socket_id") is None and not old_format:
            offline.add(cpu)
            continue
        online.add(cpu)
        try:
            siblings = max(siblings, len(_cpulist(c.get("siblings") or "")))
        except ValueError:
            raise LibvirtXMLError(what, f"cpu {cpu} siblings {c.get('siblings')!r}") from None
    return CapsCell(
        id=cid,
        memory_kib=memory_kib,
        cpus=frozenset(online),
        offline_cpus=frozenset(offline),
        pages=MappingProxyType(pages),
        distances=MappingProxyType(distances),
        max_siblings=siblings,
    )


def parse_capabilities(text: str) -> HostCapabilities:
    """Parse a ``virConnectGetCapabilities`` document.

    Returns:
        :class:`HostCapabilities`; cells sorted by id (none when the document
        lists none, as libvirt's test driver does). A cell with a garbled
        value (memory, page counts, CPU ids) or a repeated id is left out
        and named in ``warnings``; a CPU a cell lists twice is counted once,
        with a warning.

    Raises:
        LibvirtXMLError: unparsable, no ``<host>``, or a garbled host CPU
            (topology, page sizes).
    """
    root = parse_xml(text, _WHAT)
    host = root.find("host")
    if root.tag != "capabilities" or host is None:
        raise LibvirtXMLError(_WHAT, f"<{root.tag}> has no <host>; not a capabilities document")
    cpu = host.find("cpu")
    arch = model = vendor = cpu_xml = ""
    features: frozenset[str] = frozenset()
    threads = 0
    if cpu is not None:
        arch = (cpu.findtext("arch") or "").strip()
        model = (cpu.findtext("model") or "").strip()
        vendor = (cpu.findtext("vendor") or "").strip()
        features = frozenset(f.get("name", "") for f in cpu.findall("feature")) - {""}
        topo = cpu.find("topology")
        if topo is not None and topo.get("threads"):
            threads = to_int(topo.get("threads"), _WHAT, "cpu topology threads")
        cpu_xml = ET.tostring(cpu, encoding="unicode")
    sizes = [to_int(p.get("size"), _WHAT, "page size") for p in host.findall("cpu/pages")]
    base = min(sizes, default=4)
    elems = host.findall("topology/cells/cell")
    old_format = not any(c.get("socket_id") is not None for c in host.iterfind(".//cells//cpu"))
    cells: dict[int, CapsCell] = {}
    warnings = []
    for elem in elems:
        notes: list[str] = []
        try:
            cell = _cell(elem, base, old_format, notes)
        except LibvirtXMLError as exc:
            warnings.append(f"{exc}; NUMA cell left out")
            continue
        warnings.extend(dict.fromkeys(notes))
        if cell.id in cells:
            warnings.append(f"{_WHAT}: cell {cell.id} listed twice; the second is left out")
            continue
        cells[cell.id] = cell
    return HostCapabilities(
        arch,
        model,
        vendor,
        features,
        threads,
        tuple(cells[i] for i in sorted(cells)),
        cpu_xml,
        tuple(warnings),
    )


def expanded_features(baseline_xml: str) -> frozenset[str]:
    """Feature names a ``baselineCPU(..., EXPAND_FEATURES)`` result requires.

    Features with ``policy='disable'`` or ``'forbid'`` are left out.

    Raises:
        LibvirtXMLError: the document is unparsable.
    """
    root = parse_xml(baseline_xml, "baseline CPU")
    return frozenset(
        f.get("name", "")
        for f in root.findall("feature")
        if f.get("policy", "require") not in ("disable", "forbid")
    ) - {""}


def cpu_traits(features: Iterable[str], vendor: str, threads_per_core: int) -> frozenset[str]:
    """``HW_CPU_X86_*`` (and ``HW_CPU_HYPERTHREADING``) traits of a host CPU.

    Args:
        features: libvirt feature names.
        vendor: libvirt's vendor (``Intel``, ``AMD``).
        threads_per_core: more than 1 adds ``HW_CPU_HYPERTHREADING`` (as the
            host driver does).
    """
    traits = set(cpu_flag_traits((kernel_flag(f) for f in features), _VENDOR_IDS.get(vendor, "")))
    if threads_per_core > 1:
        traits.add("HW_CPU_HYPERTHREADING")
    return frozenset(traits)
