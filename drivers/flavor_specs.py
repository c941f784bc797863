"""What a nova flavor's extra specs say about an instance's CPUs, as nova's scheduler reads them.

Source: nova 34 ``nova/scheduler/utils.py`` ``_translate_pinning_policies`` and
``nova/virt/hardware.py`` ``get_dedicated_cpu_constraint``,
``get_realtime_cpu_constraint``, ``get_emulator_thread_policy_constraint``:

* ``hw:cpu_policy=dedicated``: every vCPU is dedicated; ``shared``: none; without
  it, the image's ``hw_cpu_policy`` (``get_cpu_policy_constraint``);
* ``hw:cpu_policy=mixed``: the vCPUs of ``hw:cpu_dedicated_mask`` (a leading
  ``^`` excludes from all vCPUs: ``^0`` is every vCPU but 0), else, with
  ``hw:cpu_realtime``, of the realtime mask: the image's ``hw_cpu_realtime_mask``
  before the flavor's ``hw:cpu_realtime_mask`` (every vCPU without either);
* ``hw:emulator_threads_policy=isolate``: the emulator threads get a dedicated
  host CPU of their own (nova asks one PCPU more, for dedicated and mixed
  instances only).

Used by every source that knows an instance's flavor: the libvirt driver
(nova's metadata records the extra specs and the image's properties; the domain's
own ``<cputune>`` comes first there, :mod:`drivers.libvirt.cpu_policy`) and the
import of nova's database.
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


def cpu_policy_of(specs: Mapping[str, str], image: Mapping[str, str] | None = None) -> str | None:
    """The CPU policy nova applies: the flavor's ``hw:cpu_policy``, else the image's
    ``hw_cpu_policy`` (nova/virt/hardware.py ``get_cpu_policy_constraint``: a flavor's
    policy wins; the API refuses an image that contradicts it), else None."""
    return specs.get("hw:cpu_policy") or (image or {}).get("hw_cpu_policy") or None


def dedicated_vcpu_set(
    specs: Mapping[str, str], vcpus: int, image: Mapping[str, str] | None = None
) -> frozenset[int] | None:
    """Which of the flavor's ``vcpus`` are dedicated, or None when no CPU policy is named.

    Args:
        specs: the flavor's extra specs.
        vcpus: the flavor's vCPU count.
        image: the image's properties (``hw_cpu_policy``, ``hw_cpu_realtime_mask``), or None.

    Returns:
        Every vCPU for ``dedicated``, none for ``shared`` (or a mixed flavor with
        no mask, which nova's API refuses); for ``mixed`` the vCPUs of
        ``hw:cpu_dedicated_mask``, else, with ``hw:cpu_realtime``, of the realtime
        mask, the image's ``hw_cpu_realtime_mask`` before the flavor's
        ``hw:cpu_realtime_mask`` (nova/virt/hardware.py
        ``get_realtime_cpu_constraint``), every vCPU without either; None when
        neither the flavor nor the image names a policy.

    Raises:
        ValueError: a mask that does not parse (naming the extra spec or property).
    """
    image = image or {}
    policy = cpu_policy_of(specs, image)
    everything = frozenset(range(vcpus))
    if policy == "dedicated":
        return everything
    if policy != "mixed":
        return frozenset() if policy == "shared" else None
    mask = specs.get("hw:cpu_dedicated_mask")
    if mask:
        return _mask(mask, vcpus, "hw:cpu_dedicated_mask")
    if str(specs.get("hw:cpu_realtime", "")).lower() in _TRUE:
        if image.get("hw_cpu_realtime_mask"):
            return _mask(image["hw_cpu_realtime_mask"], vcpus, "hw_cpu_realtime_mask")
        rt = specs.get("hw:cpu_realtime_mask")
        return _mask(rt, vcpus, "hw:cpu_realtime_mask") if rt else everything
    return frozenset()


def dedicated_vcpus(
    specs: Mapping[str, str], vcpus: int, image: Mapping[str, str] | None = None
) -> int | None:
    """How many of the flavor's ``vcpus`` are dedicated (:func:`dedicated_vcpu_set`), or
    None when no CPU policy is named.

    Raises:
        ValueError: a mask that does not parse (naming the extra spec or property).
    """
    dedicated = dedicated_vcpu_set(specs, vcpus, image)
    return None if dedicated is None else len(dedicated)


def emulator_isolated(specs: Mapping[str, str]) -> bool | None:
    """``hw:emulator_threads_policy``: ``isolate`` (True), another value (False), absent (None)."""
    policy = specs.get("hw:emulator_threads_policy")
    return None if policy is None else policy == "isolate"
