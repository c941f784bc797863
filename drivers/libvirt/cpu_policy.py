"""Which of a domain's vCPUs are on dedicated host CPUs, and whether its emulator threads are.

nova 34 pins a guest's CPUs in ``<cputune>`` (nova/virt/libvirt/driver.py
``_get_guest_numa_config``) and records the flavor's extra specs in its
metadata (``<nova:flavor><nova:extraSpecs><nova:extraSpec name=...>``,
config.py ``LibvirtConfigGuestMetaNovaFlavorExtraSpecs``). The scheduler's
translation of the same extra specs (nova/scheduler/utils.py
``_translate_pinning_policies``; nova/virt/hardware.py
``get_dedicated_cpu_constraint``, ``get_realtime_cpu_constraint``) decides
what the instance holds, so the extra specs are read first
(:mod:`drivers.flavor_specs`).

Where the metadata says nothing (an image's ``hw_cpu_policy``, a domain
without nova's metadata, nova before it wrote extra specs), the domain's own
``<cputune>`` decides: a vCPU whose ``<vcpupin>`` is one host CPU outside
``[compute] cpu_shared_set`` is dedicated (nova pins a mixed guest's shared
vCPUs to the whole shared set); the emulator threads are isolated when
``<emulatorpin>`` is one host CPU that no vCPU is pinned to and that is
outside ``cpu_shared_set`` (nova's ``share`` policy pins them to the shared
set, or to the guest's own CPUs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from drivers.flavor_specs import dedicated_vcpus, emulator_isolated
from drivers.libvirt.xmlutil import LibvirtXMLError


@dataclass(frozen=True, slots=True)
class CpuPolicy:
    """How a guest uses host CPUs.

    Attributes:
        dedicated: vCPUs on dedicated host CPUs (PCPU).
        emulator_isolated: the emulator threads have a dedicated host CPU.
    """

    dedicated: int = 0
    emulator_isolated: bool = False


def cpu_policy(
    vcpus: int,
    vcpu_pins: Mapping[int, frozenset[int]],
    emulator_pin: frozenset[int],
    specs: Mapping[str, str],
    shared: frozenset[int] | None,
    what: str,
) -> CpuPolicy:
    """The guest's :class:`CpuPolicy`: the extra specs where they say, else its ``<cputune>``.

    Args:
        vcpus: the guest's vCPU count.
        vcpu_pins: vCPU number -> host CPUs of its ``<vcpupin>``.
        emulator_pin: host CPUs of ``<emulatorpin>`` (empty when none).
        specs: nova's recorded flavor extra specs (empty when none).
        shared: ``[compute] cpu_shared_set``, or None when unset.
        what: the domain, for messages.

    Raises:
        LibvirtXMLError: an extra spec mask that does not parse.
    """
    shared = shared or frozenset()
    try:
        dedicated = dedicated_vcpus(specs, vcpus)
    except ValueError as exc:
        raise LibvirtXMLError(what, f"nova:extraSpec {exc}") from None
    if dedicated is None:
        dedicated = sum(
            1
            for v in range(vcpus)
            if len(pin := vcpu_pins.get(v, frozenset())) == 1 and not pin & shared
        )
    isolated = emulator_isolated(specs)
    if isolated is None:
        pinned = frozenset().union(*vcpu_pins.values()) if vcpu_pins else frozenset()
        isolated = len(emulator_pin) == 1 and not emulator_pin & (pinned | shared)
    return CpuPolicy(dedicated, isolated and dedicated > 0)
