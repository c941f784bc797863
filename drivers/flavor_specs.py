"""What a nova flavor's extra specs say about an instance's CPUs, as nova's scheduler reads them.

Source: nova 34 ``nova/scheduler/utils.py`` ``_translate_pinning_policies`` and
``nova/virt/hardware.py`` ``get_dedicated_cpu_constraint``,
``get_realtime_cpu_constraint``, ``get_emulator_thread_policy_constraint``:

* ``hw:cpu_policy=dedicated``: every vCPU is dedicated; ``shared``: none;
* ``hw:cpu_policy=mixed``: the vCPUs of ``hw:cpu_dedicated_mask`` (a leading
  ``^`` excludes from all vCPUs: ``^0`` is every vCPU but 0), else, with
  ``hw:cpu_realtime``, of ``hw:cpu_realtime_mask`` (every vCPU without a mask);
* ``hw:emulator_threads_policy=isolate``: the emulator threads get a dedicated
  host CPU of their own (nova asks one PCPU more, for dedicated and mixed
  instances only).

Used by every source that knows an instance's flavor: the libvirt driver
(nova's metadata records the extra specs) and the import of nova's database.
"""

from __future__ import annotations

from collections.abc import Mapping

from drivers.host.cpuset import parse_cpu_spec

_TRUE = ("1", "true", "yes", "on", "y", "t")


def _mask(mask: str, vcpus: int, spec: str) -> frozenset[int]:
    text = f"0-{vcpus - 1},{mask}" if mask.strip().startswith("^") else mask
    try:
        cpus = parse_cpu_spec(text)
    except ValueError as exc:
        raise ValueError(f"{spec} {mask!r}: {exc}") from None
    return cpus & frozenset(range(vcpus))


def dedicated_vcpus(specs: Mapping[str, str], vcpus: int) -> int | None:
    """How many of the flavor's ``vcpus`` are dedicated, or None when no CPU policy is named.

    Args:
        specs: the flavor's extra specs.
        vcpus: the flavor's vCPU count.

    Returns:
        ``vcpus`` for ``dedicated``, 0 for ``shared`` (or a mixed flavor with
        no mask, which nova's API refuses), the mask's vCPUs for ``mixed``;
        None when ``hw:cpu_policy`` is absent (an image may still set it).

    Raises:
        ValueError: a mask that does not parse (naming the extra spec).
    """
    policy = specs.get("hw:cpu_policy")
    if policy == "dedicated":
        return vcpus
    if policy != "mixed":
        return 0 if policy == "shared" else None
    mask = specs.get("hw:cpu_dedicated_mask")
    if mask:
        return len(_mask(mask, vcpus, "hw:cpu_dedicated_mask"))
    if str(specs.get("hw:cpu_realtime", "")).lower() in _TRUE:
        rt = specs.get("hw:cpu_realtime_mask")
        return len(_mask(rt, vcpus, "hw:cpu_realtime_mask")) if rt else vcpus
    return 0


def emulator_isolated(specs: Mapping[str, str]) -> bool | None:
    """``hw:emulator_threads_policy``: ``isolate`` (True), another value (False), absent (None)."""
    policy = specs.get("hw:emulator_threads_policy")
    return None if policy is None else policy == "isolate"
