"""How many more vGPUs of a type a vendor-VFIO GPU can create (issue 40).

A type's VGPU total on a GPU is the instances of it held plus::

    min( Max Instances of the type       - instances of the type held,
         the card's vGPU ceiling          - instances of every type held,
         floor(framebuffer left / framebuffer of one instance of the type),
         NVML's creatable placements of the type (mixed-size mode, when NVML answers),
         free VFs whose creatable_vgpu_types lists the type now )

never below 0. The facts and where each comes from:

* **instances held**, of every type: each VF's ``nvidia/current_vgpu_type``
  (:mod:`drivers.host.nvidia`).
* **Max Instances** of a type on the GPU: ``[devices] vendor_vgpu_max_instances``,
  else NVML ``nvmlVgpuTypeGetMaxInstances`` (NVIDIA's vGPU type tables,
  ``nvidia-smi vgpu -s -v`` "Max Instances").
* **framebuffer of one instance**: NVML ``nvmlVgpuTypeGetFramebufferSize``, else
  the number in the type's name as a VF's ``nvidia/creatable_vgpu_types`` gives
  it: ``DC-4Q`` is 4 GiB, ``H200X-1-18C`` 18 GiB (NVIDIA's vGPU type naming:
  the number before the series letters is the framebuffer in GB). Type IDs are
  one table per vGPU manager, so a name listed by any VF of the host serves.
* **the card's vGPU ceiling** and **its framebuffer**: read off the same type
  table (:func:`card_ceiling`, :func:`card_framebuffer`). In NVIDIA's tables a
  type's Max Instances is what the framebuffer allows, capped by the card's
  ceiling: the smallest type reaches the ceiling (``DC-2B``: 32 on an RTX PRO
  6000 Blackwell, in equal-size and in mixed-size mode alike), a larger one the
  framebuffer (``DC-48Q``: 2 x 48 GiB). Built from a partial table (the
  operator's maxima for some types) both are lower bounds: the count can fall
  short, never overshoot.
* **creatable placements**: NVML ``nvmlDeviceGetVgpuTypeCreatablePlacements``, the
  free slots left for the type given where the held vGPUs sit (fragmentation in
  mixed-size mode); nothing in sysfs tells it.

A ``creatable_vgpu_types`` list is a snapshot that every sibling VF's
``current_vgpu_type`` write changes; it says whether one more fits now, never how
many. ``nvidia/vgpu_params`` holds the plugin parameters an operator writes before
creating a vGPU: nothing about capacity. Where the framebuffer left cannot be
known (a held type no VF names and NVML absent) no new instance is counted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from drivers.host.nvidia import VendorGpu

MIB_PER_GIB = 1024
_FRAMEBUFFER_RE = re.compile(r"-(\d+)[A-Z]+$")


@dataclass(frozen=True, slots=True)
class TypeFacts:
    """What is known of one vGPU type on one GPU; None where unknown.

    Attributes:
        max_instances: the type's Max Instances per GPU.
        framebuffer_mib: framebuffer of one instance, MiB.
        placements: how many more instances the free placements hold now (NVML's
            creatable placements, counted without overlap); None without NVML or
            where NVML has no placements (equal-size mode).
    """

    max_instances: int | None = None
    framebuffer_mib: int | None = None
    placements: int | None = None


def framebuffer_from_name(name: str) -> int | None:
    """Framebuffer of one instance in MiB, from a type name, or None when the name has no
    ``-<GB><series>`` ending.

    ``"NVIDIA RTX Pro 6000 Blackwell DC-4Q"`` -> 4096, ``"NVIDIA H200X-1-18C"`` -> 18432
    (NVIDIA's vGPU type naming: the number before the series letters is the framebuffer
    in GB, the vGPU manager's GiB).
    """
    m = _FRAMEBUFFER_RE.search(name.strip())
    return int(m[1]) * MIB_PER_GIB if m else None


def card_ceiling(table: Mapping[str, TypeFacts]) -> int | None:
    """The most vGPUs of all types the card holds: the largest Max Instances in ``table``
    (its smallest type's, which the ceiling caps); None when no maximum is known."""
    return max((f.max_instances for f in table.values() if f.max_instances), default=None)


def card_framebuffer(table: Mapping[str, TypeFacts]) -> int | None:
    """The framebuffer the vGPU manager divides among vGPUs, MiB: the largest Max
    Instances x framebuffer in ``table``; None when no type has both."""
    return max(
        (
            f.max_instances * f.framebuffer_mib
            for f in table.values()
            if f.max_instances and f.framebuffer_mib
        ),
        default=None,
    )


def held_counts(gpu: VendorGpu) -> dict[str, int]:
    """Instances held on ``gpu``, by type (``nvidia/current_vgpu_type`` of each VF)."""
    out: dict[str, int] = {}
    for vf in gpu.vfs:
        if vf.current is not None:
            out[vf.current] = out.get(vf.current, 0) + 1
    return out


def framebuffer_left(gpu: VendorGpu, table: Mapping[str, TypeFacts]) -> int | str:
    """The card's framebuffer less what the held vGPUs take, MiB (may be negative when the
    table is partial), or why it cannot be known: the held types whose framebuffer is
    unknown, or that the card's is."""
    total = card_framebuffer(table)
    held = held_counts(gpu)
    unknown = sorted(t for t in held if t not in table or table[t].framebuffer_mib is None)
    if unknown:
        return (
            f"the framebuffer of held type(s) {', '.join(unknown)}: no VF's "
            "nvidia/creatable_vgpu_types names them"
        )
    if total is None:
        return "the card's framebuffer: no type with both a known maximum and a framebuffer"
    return total - sum(n * (table[t].framebuffer_mib or 0) for t, n in held.items())


def more_instances(gpu: VendorGpu, type_id: str, table: Mapping[str, TypeFacts]) -> int | str:
    """How many more of ``type_id`` the GPU can create (module docstring's rule), or why the
    framebuffer bound cannot be known when every other bound leaves room.

    Args:
        gpu: the GPU as sysfs gives it.
        type_id: ``nvidia-<ID>``, in ``table`` (no maximum known: 0).
        table: :class:`TypeFacts` of every type the GPU holds or names, by type id.

    Returns:
        the count (0 or more), or a phrase naming what is unknown.
    """
    facts = table[type_id]
    maximum = facts.max_instances or 0
    held = held_counts(gpu)
    bounds = [
        maximum - held.get(type_id, 0),
        (card_ceiling(table) or maximum) - sum(held.values()),
        gpu.free_offering(type_id),
    ]
    if facts.placements is not None:
        bounds.append(facts.placements)
    room = max(0, min(bounds))
    if room == 0:
        return 0
    left = framebuffer_left(gpu, table)
    if isinstance(left, str):
        return left
    if facts.framebuffer_mib is None:
        return f"the framebuffer of {type_id}: its name gives none"
    return max(0, min(room, left // facts.framebuffer_mib))


def type_table(
    gpu: VendorGpu,
    names: Mapping[str, str],
    operator: Mapping[str, int],
    nvml: Mapping[str, TypeFacts],
) -> dict[str, TypeFacts]:
    """The facts of every type the GPU holds or names, and of every type NVML says it supports.

    Args:
        gpu: the GPU as sysfs gives it.
        names: type id -> name over every VF of the host (``creatable_vgpu_types``).
        operator: ``[devices] vendor_vgpu_max_instances``, used over NVML's maximum.
        nvml: NVML's facts for this GPU (empty without NVML).

    Returns:
        type id -> :class:`TypeFacts`; a framebuffer from NVML, else from the type's name.
    """
    out = {}
    for type_id in set(gpu.names()) | set(nvml):
        got = nvml.get(type_id, TypeFacts())
        name = names.get(type_id)
        framebuffer = got.framebuffer_mib or (framebuffer_from_name(name) if name else None)
        maximum = operator.get(type_id) or got.max_instances
        out[type_id] = TypeFacts(maximum, framebuffer, got.placements)
    return out
