"""A vGPU type's maximum instances per GPU, from NVIDIA's NVML (``nvidia-ml-py``, optional).

The limit is per physical GPU and per type: NVIDIA's vGPU type tables,
``nvidia-smi vgpu -s -v`` "Max Instances", NVML's
``nvmlVgpuTypeGetMaxInstances(device, vgpuTypeId)``. It is never the number
of VFs: an H200 with 32 VFs holds one ``H200X-141C``.

``pynvml`` (the ``nvidia-ml-py`` package, the ``nvidia`` extra of
pyproject.toml) is imported when the first maximum is asked, so a host
without it still works; NVML itself (``libnvidia-ml.so``) comes with NVIDIA's
vGPU manager. Where either is missing, the operator's ``[devices]
vendor_vgpu_max_instances`` is the only source (:mod:`drivers.host.vendor_vgpu`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import Any

from drivers.host.nvidia import type_number

MaxInstances = Callable[[str, str], "int | None"]
"""``(PF address, type id nvidia-<ID>) -> maximum instances per GPU``, None when unknown."""


def no_maxima(pf_address: str, type_id: str) -> int | None:
    """The :data:`MaxInstances` of a host where NVML is not asked (a captured tree)."""
    return None


class NvmlMaxInstances:
    """:data:`MaxInstances` read through NVML, opened on first use and closed on exit.

    Use as a context manager around one discovery::

        with NvmlMaxInstances(warn) as maxima:
            maxima("0000:18:00.0", "nvidia-1428")   # 1 on an H200

    Args:
        warn: where a failure goes (one line naming NVML's error and the fix);
            a missing ``pynvml`` is no failure (the caller says what to set).
    """

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn
        self._lib: Any = None
        self._tried = False
        self._handles: dict[str, Any] = {}

    def __enter__(self) -> NvmlMaxInstances:
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

    def __call__(self, pf_address: str, type_id: str) -> int | None:
        """The maximum instances of ``type_id`` on the GPU at ``pf_address``, or None.

        NVML calls: ``nvmlDeviceGetHandleByPciBusId``, ``nvmlVgpuTypeGetMaxInstances``.
        An NVML error costs a warning naming the GPU and the type, and None.
        """
        lib = self._open()
        if lib is None:
            return None
        try:
            handle = self._handles.get(pf_address)
            if handle is None:
                handle = lib.nvmlDeviceGetHandleByPciBusId(pf_address.encode())
                self._handles[pf_address] = handle
            return int(lib.nvmlVgpuTypeGetMaxInstances(handle, type_number(type_id)))
        except lib.NVMLError as exc:
            self._warn(
                f"NVML: no maximum of vGPU type {type_id} on GPU {pf_address}: {exc}; set "
                f"[devices] vendor_vgpu_max_instances = {type_id}:<max instances per GPU>"
            )
            return None
