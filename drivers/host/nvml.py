"""What NVIDIA's NVML says of a GPU's vGPU types (``nvidia-ml-py``, optional).

Per type on one physical GPU (:class:`~drivers.host.vgpu_capacity.TypeFacts`):
its Max Instances (``nvmlVgpuTypeGetMaxInstances``: NVIDIA's vGPU type tables,
``nvidia-smi vgpu -s -v`` "Max Instances"; never the number of VFs: an H200
with 32 VFs holds one ``H200X-141C``), the framebuffer of one instance
(``nvmlVgpuTypeGetFramebufferSize``), and the placements still free for it
(``nvmlDeviceGetVgpuTypeCreatablePlacements``, mixed-size mode); for every type
the GPU supports (``nvmlDeviceGetSupportedVgpus``), so that the card's ceiling
and framebuffer can be read off the whole table
(:mod:`drivers.host.vgpu_capacity`).

``pynvml`` (the ``nvidia-ml-py`` package, the ``nvidia`` extra of
pyproject.toml) is imported when the first GPU is asked about, so a host
without it still works; NVML itself (``libnvidia-ml.so``) comes with NVIDIA's
vGPU manager. Where either is missing, the operator's ``[devices]
vendor_vgpu_max_instances`` and sysfs are the only sources
(:mod:`drivers.host.vendor_vgpu`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType, TracebackType
from typing import Any

from drivers.host.nvidia import type_number
from drivers.host.vgpu_capacity import TypeFacts

VgpuTypes = Callable[[str, Iterable[str]], Mapping[str, TypeFacts]]
"""``(PF address, type ids the GPU holds or names) -> {type id: TypeFacts}`` of those
types and of every type NVML says the GPU supports; empty when NVML is not asked."""

MIB = 1 << 20


def no_vgpu_types(pf_address: str, type_ids: Iterable[str]) -> Mapping[str, TypeFacts]:
    """The :data:`VgpuTypes` of a host where NVML is not asked (a captured tree)."""
    return {}


def disjoint_placements(placement_ids: Iterable[int], size: int) -> int:
    """How many instances the free placements hold at once: placement ``p`` of a type whose
    placement size is ``size`` takes slots ``p`` to ``p + size - 1`` (NVML's
    ``nvmlVgpuPlacementList_t``: ``placementSize``, "the number of slots occupied by the
    vGPU type"); overlapping placements count once (earliest first, which is the most
    that fit for intervals of one length)."""
    count, free_from = 0, None
    for placement in sorted(placement_ids):
        if free_from is None or placement >= free_from:
            count, free_from = count + 1, placement + max(size, 1)
    return count


class NvmlVgpuTypes:
    """:data:`VgpuTypes` read through NVML, opened on first use and closed on exit.

    Use as a context manager around one discovery::

        with NvmlVgpuTypes(warn) as vgpu_types:
            vgpu_types("0000:18:00.0", ["nvidia-1428"])["nvidia-1428"].max_instances  # 1

    Args:
        warn: where a failure goes (one line naming NVML's error and the fix);
            a missing ``pynvml`` is no failure (the caller says what to set).
    """

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn
        self._lib: Any = None
        self._tried = False

    def __enter__(self) -> NvmlVgpuTypes:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._lib is not None:
            try:
                self._lib.nvmlShutdown()
            except self._lib.NVMLError:
                pass  # nothing left to release: shutting down a broken NVML changes nothing
            self._lib = None

    def _open(self) -> ModuleType | None:
        if self._tried:
            return self._lib  # type: ignore[no-any-return]
        self._tried = True
        try:
            lib = importlib.import_module("pynvml")
        except ImportError:
            return None
        try:
            lib.nvmlInit()
        except lib.NVMLError as exc:
            self._warn(
                f"NVML (nvidia-ml-py) cannot start: {exc}; vGPU maxima per GPU come only from "
                "[devices] vendor_vgpu_max_instances (is NVIDIA's vGPU manager loaded?)"
            )
            return None
        self._lib = lib
        return lib

    def __call__(self, pf_address: str, type_ids: Iterable[str]) -> Mapping[str, TypeFacts]:
        """The facts of ``type_ids`` and of every type NVML says the GPU at ``pf_address``
        supports; empty without NVML.

        NVML calls: ``nvmlDeviceGetHandleByPciBusId``, ``nvmlDeviceGetSupportedVgpus``,
        then per type ``nvmlVgpuTypeGetMaxInstances``, ``nvmlVgpuTypeGetFramebufferSize``
        and ``nvmlDeviceGetVgpuTypeCreatablePlacements`` (where the installed
        ``nvidia-ml-py`` has it). An NVML error on the GPU, or on the maximum of a type
        in ``type_ids``, costs a warning naming the GPU, the type and the fix; other
        answers NVML refuses stay unknown.
        """
        lib = self._open()
        if lib is None:
            return {}
        asked = set(type_ids)
        try:
            handle = lib.nvmlDeviceGetHandleByPciBusId(pf_address.encode())
            supported = {f"nvidia-{int(t)}" for t in lib.nvmlDeviceGetSupportedVgpus(handle)}
        except lib.NVMLError as exc:
            self._warn(
                f"NVML: GPU {pf_address} cannot be asked about its vGPU types: {exc}; set "
                "[devices] vendor_vgpu_max_instances = nvidia-<ID>:<max instances per GPU>"
            )
            return {}
        return {
            t: self._facts(lib, handle, pf_address, t, t in asked)
            for t in sorted(asked | supported)
        }

    def _facts(
        self, lib: Any, handle: Any, pf_address: str, type_id: str, named: bool
    ) -> TypeFacts:
        number = type_number(type_id)
        maximum = framebuffer = placements = None
        try:
            maximum = int(lib.nvmlVgpuTypeGetMaxInstances(handle, number))
        except lib.NVMLError as exc:
            if named:
                self._warn(
                    f"NVML: no maximum of vGPU type {type_id} on GPU {pf_address}: {exc}; set "
                    f"[devices] vendor_vgpu_max_instances = {type_id}:<max instances per GPU>"
                )
        try:
            framebuffer = int(lib.nvmlVgpuTypeGetFramebufferSize(number)) // MIB or None
        except lib.NVMLError:
            pass  # the type's name still gives it (vgpu_capacity.framebuffer_from_name)
        creatable = getattr(lib, "nvmlDeviceGetVgpuTypeCreatablePlacements", None)
        if creatable is not None:
            try:
                got = creatable(handle, number)
                ids = [int(got.placementIds[i]) for i in range(int(got.count))]
                placements = disjoint_placements(ids, int(got.placementSize))
            except lib.NVMLError:
                pass  # no placements (equal-size mode, a MIG-backed type): unknown
        return TypeFacts(maximum, framebuffer, placements)
