"""Intel TDX: whether the host offers it, and how many TDX guests it may run at once.

Rules from nova 34 (``nova/virt/libvirt/host.py`` ``supports_intel_tdx``,
``_get_cgroup_tdx_capacity``, ``_get_tdx_capacity``, ``max_intel_tdx_guests``,
``_get_mem_encryption_traits_intel_tdx``; ``nova/virt/libvirt/config.py``
``LibvirtConfigDomainCapsFeatureTDX``):

* the host CPU is ``x86_64``;
* ``[libvirt] cpu_mode`` is ``host-passthrough`` (a TD must see the real host
  CPU; nova does not detect TDX with any other value, unset included);
* the domain capabilities of some x86_64 machine type have
  ``<features><tdx supported='yes'/>``;
* its slots: the ``tdx N`` line of the misc cgroup's capacity file
  (``/sys/fs/cgroup/misc.capacity``), else ``[libvirt] num_intel_tdx_guests``;
  when both are set the option wins (nova's code; its option help says "the
  lower", its code takes the option), with a warning when it exceeds the
  cgroup's; neither: 0 slots, with a warning, and no provider (nova's
  ``_ensure_memory_encryption_providers`` makes none for a total of 0).

The model is ``intel_tdx`` (its provider ``{nodename}_intel_tdx``), its trait
``HW_CPU_X86_INTEL_TDX``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from drivers.host.sysfs import SysfsError, SysfsReader
from drivers.libvirt.mem_encryption import INTEL_TDX, TRAITS
from drivers.libvirt.traits import DomainCapabilities
from drivers.records import MemEncryption

MISC_CAPACITY = "sys/fs/cgroup/misc.capacity"
"""The misc cgroup's capacity file below the sysfs root (``MISC_CONTROL_GROUP_CAPACITY_FILE``)."""

CPU_MODE = "host-passthrough"
"""The only ``[libvirt] cpu_mode`` with which nova detects TDX."""


@dataclass(frozen=True, slots=True)
class TdxSettings:
    """The nova.conf options TDX detection reads.

    Attributes:
        cpu_mode: ``[libvirt] cpu_mode`` (None when unset).
        num_guests: ``[libvirt] num_intel_tdx_guests`` (None when unset).
    """

    cpu_mode: str | None = None
    num_guests: int | None = None


def supports_tdx(arch: str, cpu_mode: str | None, domains: Iterable[DomainCapabilities]) -> bool:
    """nova's ``supports_intel_tdx``: x86_64, ``cpu_mode = host-passthrough`` and any of
    the host arch's domain capabilities (one per machine type, as the driver's reader
    parsed them) offering TDX (``tdx_supported``)."""
    if arch != "x86_64" or cpu_mode != CPU_MODE:
        return False
    return any(d.tdx_supported for d in domains)


def cgroup_capacity(reader: SysfsReader, warn: Callable[[str], None]) -> int | None:
    """The ``tdx N`` line of the misc cgroup's capacity file, or None.

    None when the file is absent (a kernel without the misc controller, or an
    agent in a container that cannot see the host's cgroups: nova logs that at
    debug level) and, with a warning naming the file, when it cannot be read,
    has no ``tdx`` line or its value is not a whole number of at least 0.
    """
    path = reader.path(MISC_CAPACITY)
    try:
        text = reader.optional_text(MISC_CAPACITY)
    except SysfsError as exc:
        warn(f"{exc.path}: {exc.reason}; the Intel TDX capacity is not read from it")
        return None
    if text is None:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "tdx":
            if not parts[1].isdigit():
                warn(
                    f"{path}: tdx capacity {parts[1]!r} is not a whole number; the Intel TDX "
                    "capacity is not read from it"
                )
                return None
            return int(parts[1])
    warn(f"{path}: no tdx line; the Intel TDX capacity is not read from it")
    return None


def tdx_slots(cgroup: int | None, option: int | None, warn: Callable[[str], None]) -> int:
    """How many TDX guests may run at once (nova's ``_get_tdx_capacity``).

    Args:
        cgroup: :func:`cgroup_capacity`, or None.
        option: ``[libvirt] num_intel_tdx_guests``, or None when unset.
        warn: told when neither is known (0 slots), or the option exceeds the cgroup.

    Returns:
        The option when set, else the cgroup's capacity, else 0.
    """
    if option is None:
        if cgroup is None:
            warn(
                "Intel TDX: the misc cgroup gives no TDX capacity and [libvirt] "
                "num_intel_tdx_guests is not set; no TDX slots are reported (set the option)"
            )
            return 0
        return cgroup
    if cgroup is not None and option > cgroup:
        warn(
            f"[libvirt] num_intel_tdx_guests = {option} exceeds the {cgroup} Intel TDX "
            "guests the misc cgroup allows; the option is reported, as nova does"
        )
    return option


def host_tdx(
    arch: str,
    settings: TdxSettings,
    domains: Iterable[DomainCapabilities],
    reader: SysfsReader,
    warn: Callable[[str], None],
) -> MemEncryption | None:
    """The host's Intel TDX model with its slots, or None (module docstring).

    Args:
        arch: the host CPU's arch (host capabilities).
        settings: ``[libvirt] cpu_mode`` and ``num_intel_tdx_guests``.
        domains: the host arch's domain capabilities, every machine type.
        reader: reads the misc cgroup's capacity file below the sysfs root.
        warn: where warnings go (the driver logs each once).

    Returns:
        ``MemEncryption("intel_tdx", slots, "HW_CPU_X86_INTEL_TDX")``; None when TDX is
        not supported or has 0 slots.
    """
    if not supports_tdx(arch, settings.cpu_mode, domains):
        return None
    slots = tdx_slots(cgroup_capacity(reader, warn), settings.num_guests, warn)
    return MemEncryption(INTEL_TDX, slots, TRAITS[INTEL_TDX]) if slots > 0 else None
