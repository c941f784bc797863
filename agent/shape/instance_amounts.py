"""What one instance asks for, as nova's scheduler turns its flavor into a request.

Source: nova 34 ``nova/scheduler/utils.py`` ``ResourceRequest.from_request_spec``
and ``_translate_pinning_policies``:

* shared CPUs (no ``hw:cpu_policy``, or ``shared``): ``VCPU`` = the flavor's vCPUs;
  ``hw:emulator_threads_policy=isolate`` adds nothing (nova honours it only
  with dedicated CPUs);
* ``hw:cpu_policy=dedicated``: ``PCPU`` = the flavor's vCPUs;
* ``hw:cpu_policy=mixed``: ``PCPU`` = the vCPUs of ``hw:cpu_dedicated_mask``
  (or of ``hw:cpu_realtime_mask``), ``VCPU`` = the others;
* dedicated or mixed with ``hw:emulator_threads_policy=isolate``: one more
  ``PCPU`` for the emulator threads;
* ``DISK_GB`` = root (0 when booted from volume) + ephemeral + swap in whole
  GiB, rounded up (``compute_utils.convert_mb_to_ceil_gb``).

The driver says which vCPUs are dedicated (:class:`drivers.records.Instance`
``pinned``, ``dedicated_vcpus``, ``emulator_isolated``); this module turns
that into amounts, and :mod:`agent.shape.planning` decides where they go.
"""

from __future__ import annotations

import math

from drivers.records import Instance


def cpu_amounts(instance: Instance) -> dict[str, int]:
    """``{"VCPU": n, "PCPU": m}`` the instance holds (classes with 0 left out).

    Returns:
        The amounts by nova's translation (module docstring); an instance
        whose ``dedicated_vcpus`` is not below its vCPUs counts as dedicated.
    """
    vcpus = instance.flavor.vcpus
    dedicated = vcpus if instance.pinned else min(instance.dedicated_vcpus, vcpus)
    pcpus = dedicated + (1 if dedicated and instance.emulator_isolated else 0)
    amounts = {"VCPU": vcpus - dedicated, "PCPU": pcpus}
    return {rc: n for rc, n in amounts.items() if n}


def main_cpu_class(instance: Instance) -> str:
    """``PCPU`` when the instance has any dedicated CPU, else ``VCPU``: the class whose free
    capacity picks a NUMA cell for it."""
    return "PCPU" if "PCPU" in cpu_amounts(instance) else "VCPU"


def disk_gb(instance: Instance) -> int:
    """GiB of DISK_GB an instance uses: root (0 when booted from volume) + ephemeral + swap."""
    f = instance.flavor
    root = 0 if instance.boot_from_volume else f.root_gb
    return root + f.ephemeral_gb + math.ceil(f.swap_mb / 1024)
