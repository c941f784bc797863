"""CPUs: which are online, their topology, the VCPU/PCPU split, CPU feature traits.

Sources: ``/sys/devices/system/cpu/online`` and ``cpu*/topology/``
(kernel Documentation/admin-guide/cputopology.rst), the first ``flags`` and
``vendor_id`` lines of ``/proc/cpuinfo``, and nova's rules for
``[compute] cpu_dedicated_set`` / ``cpu_shared_set`` (nova.conf reference):

* neither set: every online CPU is a shared CPU (VCPU);
* ``cpu_shared_set``: those CPUs are VCPU;
* ``cpu_dedicated_set``: those CPUs are PCPU, and without
  ``cpu_shared_set`` there is no VCPU at all;
* the two must not overlap and must name online CPUs only.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

import os_traits

from drivers.errors import ConfigError
from drivers.host.arch import arch_traits
from drivers.host.cpuset import format_cpu_set, parse_cpulist
from drivers.host.nova_cpu_map import NOVA_DECIDED, nova_map_traits
from drivers.host.sysfs import Root, SysfsError, SysfsReader, as_reader

LOG = logging.getLogger("drivers.host")

CPU_DIR = "sys/devices/system/cpu"
CPUINFO = "proc/cpuinfo"
_CPU_RE = re.compile(r"cpu\d+")

_X86_PREFIX = "HW_CPU_X86_"
_X86_TRAITS = frozenset(os_traits.get_traits(_X86_PREFIX))

# Kernel flag names (arch/x86/include/asm/cpufeatures.h) that differ from the
# os-traits suffix naming the same feature. Everything else maps by name:
# upper-cased, with or without underscores, or with the vendor prefix os-traits
# uses for vendor-specific features (INTEL_PCID, AMD_SEV ...).
_FLAG_ALIASES = {
    "pni": "SSE3",
    "pclmulqdq": "CLMUL",
    "fma": "FMA3",
    "aes": "AESNI",
    "sha_ni": "SHA",
    "bmi1": "BMI",
    "rtm": "TSX",
    "vaes": "AVX512VAES",
    "gfni": "AVX512GFNI",
    "vpclmulqdq": "AVX512VPCLMULQDQ",
}
_VENDOR_PREFIX = {"GenuineIntel": "INTEL_", "AuthenticAMD": "AMD_"}
# Vendor-specific renames: Intel's CPUID.7.EDX[26] "IBRS and IBPB" is the
# feature libvirt calls spec-ctrl (os-traits INTEL_SPEC_CTRL); the kernel
# hides its own spec_ctrl flag and shows "ibrs" for it.
_VENDOR_FLAG_ALIASES = {("GenuineIntel", "ibrs"): "INTEL_SPEC_CTRL"}
# Flags that map to more than one os-traits name: the generic one and the
# vendor-specific one, whatever the vendor_id says (nova/virt/libvirt/utils.py
# CPU_TRAITS_MAPPING: 'vmx' -> HW_CPU_X86_VMX and HW_CPU_X86_INTEL_VMX,
# 'svm' -> HW_CPU_X86_SVM and HW_CPU_X86_AMD_SVM).
_FLAG_ALSO = {"vmx": ("INTEL_VMX",), "svm": ("AMD_SVM",)}


@dataclass(frozen=True, slots=True)
class CpuTopology:
    """Online CPUs and how they sit in sockets and cores.

    Attributes:
        online: online CPU numbers whose topology could be read.
        sockets: distinct ``physical_package_id`` values.
        cores: distinct (package, ``die_id``, ``core_id``) triples.
        threads_per_core: the most online CPUs sharing one core.
    """

    online: frozenset[int]
    sockets: int
    cores: int
    threads_per_core: int


@dataclass(frozen=True, slots=True)
class CpuInfo:
    """What the host offers in CPUs.

    Attributes:
        topology: :class:`CpuTopology`.
        vcpu_ids: CPUs offered as shared (VCPU), before ``reserved_host_cpus``.
        pcpu_ids: CPUs offered as dedicated (PCPU).
        vendor: ``vendor_id`` of /proc/cpuinfo (``GenuineIntel``), or "".
        traits: os-traits CPU traits (``HW_CPU_X86_*``, ``HW_CPU_HYPERTHREADING``).
    """

    topology: CpuTopology
    vcpu_ids: frozenset[int]
    pcpu_ids: frozenset[int]
    vendor: str
    traits: frozenset[str]


def cpu_flag_traits(flags: Iterable[str], vendor: str = "") -> frozenset[str]:
    """The ``HW_CPU_X86_*`` traits for kernel CPU flags.

    Args:
        flags: flag names as in /proc/cpuinfo (``avx2``, ``sse4_2``, ``pni``).
        vendor: ``vendor_id`` (selects ``INTEL_`` / ``AMD_`` prefixed traits).

    Returns:
        Only names os-traits defines; unknown flags are ignored. The traits of
        nova's own map (:mod:`drivers.host.nova_cpu_map`) have nova's value,
        whatever the aliases below say: ``pni`` gives no ``HW_CPU_X86_SSE3``,
        since nova looks for ``sse3`` and clears it (issue 32).
    """
    flags = tuple(flags)
    prefix = _VENDOR_PREFIX.get(vendor, "")
    out = set()
    for flag in flags:
        base = _VENDOR_FLAG_ALIASES.get((vendor, flag)) or _FLAG_ALIASES.get(flag, flag.upper())
        for candidate in (base, base.replace("_", ""), prefix + base if prefix else ""):
            if candidate and _X86_PREFIX + candidate in _X86_TRAITS:
                out.add(_X86_PREFIX + candidate)
                break
        out.update(
            _X86_PREFIX + t for t in _FLAG_ALSO.get(flag, ()) if _X86_PREFIX + t in _X86_TRAITS
        )
    return frozenset(out - NOVA_DECIDED) | nova_map_traits(flags)


def read_cpuinfo(root: Root) -> tuple[str, tuple[str, ...]]:
    """``(vendor_id, flags)`` of the first CPU in /proc/cpuinfo; ("", ()) off x86.

    Raises:
        SysfsError: /proc/cpuinfo is missing or unreadable.
    """
    reader = as_reader(root)
    vendor, flags = "", ()
    for line in reader.raw(CPUINFO).splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key == "flags":
            flags = tuple(value.split())
            break
    return vendor, flags


def cpuinfo_essentials(text: str) -> str:
    """The lines of /proc/cpuinfo that discovery reads (first vendor_id and flags).

    ``capture`` stores only these: the rest (model, microcode, bugs, per-CPU
    MHz) is not used and need not leave the host.
    """
    kept: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        key = line.partition(":")[0].strip()
        if key in ("processor", "vendor_id", "flags") and key not in seen:
            seen.add(key)
            kept.append(line)
        if key == "flags":
            break
    return "\n".join(kept) + "\n"


def read_topology(root: Root) -> CpuTopology:
    """Online CPUs and their sockets/cores/threads.

    ``online`` says which CPUs are online; the other ``cpu*`` directories are
    offline CPUs (hot-unplugged, ``nosmt``, ``maxcpus=``): a fact of the host,
    logged at INFO, never a warning. A CPU whose topology files are missing
    or garbled is warned about and left out (not offered). When ``online``
    cannot be used, the CPUs in ``offline`` are offline and each other
    ``cpu*`` directory's own ``online`` file decides (absent: the CPU cannot
    be taken offline, so it is online).

    Raises:
        SysfsError: no online CPU can be found at all.
    """
    reader = as_reader(root)
    if not os.path.isdir(reader.path(CPU_DIR)):
        # Nothing to fall back on: one error, not a warning per missing file first.
        raise SysfsError(
            reader.path(CPU_DIR),
            "no online CPU could be read (is the root a sysfs tree holding "
            "sys/devices/system/cpu?)",
        )
    try:
        present = frozenset(int(n[3:]) for n in reader.listdir(CPU_DIR, _CPU_RE) or ())
    except SysfsError as exc:
        reader.skip(exc, "the list of offline CPUs")
        present = frozenset()
    try:
        online = reader.parse(f"{CPU_DIR}/online", _online_list)
        assert online is not None
    except SysfsError as exc:
        reader.warn(
            f"{exc.path}: {exc.reason}; each {reader.path(CPU_DIR)}/cpu*/online decides instead"
        )
        online = _online_by_cpu(reader, present)
    offline = present - online
    if offline:
        LOG.info("CPUs %s are offline; not offered", format_cpu_set(offline))
    topology = _topology(reader, online)
    if not topology.online:
        raise SysfsError(
            reader.path(CPU_DIR),
            "no online CPU could be read (is the root a sysfs tree holding "
            "sys/devices/system/cpu?)",
        )
    return topology


def _online_list(text: str) -> frozenset[int]:
    cpus = parse_cpulist(text)
    if not cpus:
        raise ValueError("empty; a running host has at least one online CPU")
    return cpus


def _online_by_cpu(reader: SysfsReader, present: frozenset[int]) -> frozenset[int]:
    try:
        offline = reader.parse(f"{CPU_DIR}/offline", parse_cpulist, optional=True) or frozenset()
    except SysfsError as exc:
        reader.skip(exc, "the list of offline CPUs")
        offline = frozenset()
    online = set()
    for cpu in sorted(present - offline):
        try:
            flag = reader.optional_integer(f"{CPU_DIR}/cpu{cpu}/online")
        except SysfsError as exc:
            reader.skip(exc, f"CPU {cpu}")
            continue
        if flag is None or flag == 1:
            online.add(cpu)
    return frozenset(online)


def _topology(reader: SysfsReader, online: frozenset[int]) -> CpuTopology:
    kept: set[int] = set()
    cores: dict[tuple[int, int, int], int] = {}
    for cpu in sorted(online):
        base = f"{CPU_DIR}/cpu{cpu}/topology"
        try:
            package = reader.integer(f"{base}/physical_package_id")
            # core_id repeats in each die of a multi-die package (kernel
            # cputopology.rst: die_id, Linux 5.3+); absent means one die.
            die = reader.optional_integer(f"{base}/die_id") or 0
            core = reader.integer(f"{base}/core_id")
        except SysfsError as exc:
            reader.skip(exc, f"CPU {cpu}")
            continue
        kept.add(cpu)
        key = (package, die, core)
        cores[key] = cores.get(key, 0) + 1
    return CpuTopology(
        online=frozenset(kept),
        sockets=len({p for p, _, _ in cores}),
        cores=len(cores),
        threads_per_core=max(cores.values(), default=0),
    )


def split_cpus(
    online: frozenset[int],
    dedicated: frozenset[int] | None,
    shared: frozenset[int] | None,
) -> tuple[frozenset[int], frozenset[int]]:
    """``(vcpu_ids, pcpu_ids)`` by nova's rules (module docstring).

    Args:
        online: the host's online CPUs.
        dedicated: ``[compute] cpu_dedicated_set`` parsed, or None when unset.
        shared: ``[compute] cpu_shared_set`` parsed, or None when unset.

    Raises:
        ConfigError: the sets overlap, or one names CPUs that are not online.
    """
    for option, cpus in (("cpu_dedicated_set", dedicated), ("cpu_shared_set", shared)):
        if cpus is not None and not cpus <= online:
            raise ConfigError(
                f"[compute] {option} names CPUs {format_cpu_set(cpus - online)} that are not "
                f"online on this host (online: {format_cpu_set(online) or 'none'})"
            )
    check_cpu_sets(dedicated, shared)
    if dedicated is None and shared is None:
        return online, frozenset()
    return shared or frozenset(), dedicated or frozenset()


def check_cpu_sets(dedicated: frozenset[int] | None, shared: frozenset[int] | None) -> None:
    """Refuse overlapping ``cpu_dedicated_set`` and ``cpu_shared_set`` (nova's rule).

    Raises:
        ConfigError: naming the CPUs in both.
    """
    if dedicated and shared and dedicated & shared:
        raise ConfigError(
            "[compute] cpu_dedicated_set and cpu_shared_set overlap on CPUs "
            f"{format_cpu_set(dedicated & shared)}; a CPU is either dedicated or shared"
        )


def discover_cpus(
    root: Root,
    dedicated: frozenset[int] | None = None,
    shared: frozenset[int] | None = None,
) -> CpuInfo:
    """The host's CPUs split into VCPU and PCPU, with their feature traits.

    Args:
        root: sysfs root or reader.
        dedicated: parsed ``cpu_dedicated_set`` or None.
        shared: parsed ``cpu_shared_set`` or None.

    Returns:
        :class:`CpuInfo`. ``HW_CPU_HYPERTHREADING`` is set when a core has
        more than one online thread; ``HW_ARCH_*`` from :mod:`drivers.host.arch`.
        A missing /proc/cpuinfo gives no flag
        traits and a warning.

    Raises:
        SysfsError: no CPU can be found at all.
        ConfigError: see :func:`split_cpus`.
    """
    reader = as_reader(root)
    topology = read_topology(reader)
    vcpus, pcpus = split_cpus(topology.online, dedicated, shared)
    try:
        vendor, flags = read_cpuinfo(reader)
    except SysfsError as exc:
        reader.skip(exc, "CPU feature traits")
        vendor, flags = "", ()
    traits = set(cpu_flag_traits(flags, vendor)) | arch_traits(vendor, flags)
    if topology.threads_per_core > 1:
        traits.add(os_traits.HW_CPU_HYPERTHREADING)
    return CpuInfo(topology, vcpus, pcpus, vendor, frozenset(traits))
