"""Which of a domain's vCPUs are on dedicated host CPUs, and whether its emulator threads are.

nova 34 pins a guest's CPUs in ``<cputune>`` (nova/virt/libvirt/driver.py
``_get_guest_numa_config``): a dedicated vCPU (``hw:cpu_policy=dedicated``, or in a
mixed guest's dedicated or realtime mask) on one host CPU of ``cpu_dedicated_set``, a
shared vCPU on its cell's shared CPUs, the emulator threads on the one CPU reserved for
them (``hw:emulator_threads_policy=isolate``), else on the shared set, or on the
guest's own (non-realtime) CPUs. The domain says what nova decided, after every rule
(the image's ``hw_cpu_realtime_mask`` before the flavor's, nova/virt/hardware.py
``get_realtime_cpu_constraint``), so it is read first: a vCPU whose ``<vcpupin>`` is
one host CPU outside ``[compute] cpu_shared_set`` is dedicated; the emulator threads
are isolated when ``<emulatorpin>`` is one host CPU that no vCPU is pinned to and that
is outside ``cpu_shared_set``.

Where the domain is silent (no ``<vcpupin>``; no ``<emulatorpin>``), nova's rules
decide from what its metadata records (``<nova:flavor><nova:extraSpecs>`` and
``<nova:image><nova:properties>``, config.py ``LibvirtConfigGuestMetaNovaFlavor``,
``LibvirtConfigGuestMetaImage``), as the scheduler reads them
(:mod:`drivers.flavor_specs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from drivers.flavor_specs import dedicated_vcpu_set, emulator_isolated
from drivers.libvirt.xmlutil import LibvirtXMLError


@dataclass(frozen=True, slots=True)
class CpuPolicy:
    """How a guest uses host CPUs.

    Attributes:
        dedicated_set: vCPUs on dedicated host CPUs (PCPU).
        emulator_isolated: the emulator threads have a dedicated host CPU.
    """

    dedicated_set: frozenset[int] = frozenset()
    emulator_isolated: bool = False

    @property
    def dedicated(self) -> int:
        """How many vCPUs are dedicated."""
        return len(self.dedicated_set)


def cpu_policy(
    vcpus: int,
    vcpu_pins: Mapping[int, frozenset[int]],
    emulator_pin: frozenset[int],
    specs: Mapping[str, str],
    shared: frozenset[int] | None,
    what: str,
    image: Mapping[str, str] | None = None,
) -> CpuPolicy:
    """The guest's :class:`CpuPolicy`: its ``<cputune>`` where it says, else nova's rules.

    Args:
        vcpus: the guest's vCPU count.
        vcpu_pins: vCPU number -> host CPUs of its ``<vcpupin>``.
        emulator_pin: host CPUs of ``<emulatorpin>`` (empty when none).
        specs: nova's recorded flavor extra specs (empty when none).
        shared: ``[compute] cpu_shared_set``, or None when unset.
        what: the domain, for messages.
        image: nova's recorded image properties (empty or None when none).

    Raises:
        LibvirtXMLError: an extra spec or image property mask that does not parse,
            when the domain leaves it to decide.
    """
    shared = shared or frozenset()
    if vcpu_pins:
        dedicated = frozenset(
            v
            for v in range(vcpus)
            if len(pin := vcpu_pins.get(v, frozenset())) == 1 and not pin & shared
        )
    else:
        try:
            dedicated = dedicated_vcpu_set(specs, vcpus, image) or frozenset()
        except ValueError as exc:
            raise LibvirtXMLError(what, f"nova metadata {exc}") from None
    if emulator_pin:
        pinned = frozenset().union(*vcpu_pins.values()) if vcpu_pins else frozenset()
        isolated = len(emulator_pin) == 1 and not emulator_pin & (pinned | shared)
    else:
        isolated = bool(emulator_isolated(specs))
    return CpuPolicy(dedicated, isolated and bool(dedicated))
