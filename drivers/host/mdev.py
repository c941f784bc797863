"""vGPUs through mediated devices (mdev).

Kernel ABI (Documentation/driver-api/vfio-mediated-device.rst): every parent
device is listed in ``/sys/class/mdev_bus/``; each type it can create is a
directory ``mdev_supported_types/<type>`` holding ``name`` (optional),
``available_instances`` and ``device_api``. Existing mdevs are listed in
``/sys/bus/mdev/devices/<uuid>``, a link into their parent's directory, where
``<uuid>/mdev_type`` links to the type.

A GPU's VGPU total is its existing mdevs of the offered type plus that
type's ``available_instances`` (the layout computes it; DESIGN.md tree shape).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import MappingProxyType

from drivers.host.sysfs import Root, SysfsError, SysfsReader, as_reader
from drivers.records import Gpu, Mdev, MdevType, normalize_pci_address

MDEV_BUS_DIR = "sys/class/mdev_bus"
MDEV_DEVICES_DIR = "sys/bus/mdev/devices"
_ANY_RE = re.compile(r"[^.].*")
_UUID_RE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def _numa(text: str) -> int | None:
    value = int(text)
    return None if value < 0 else value


def read_mdev_types(reader: SysfsReader, parent: str) -> dict[str, MdevType]:
    """The types parent ``parent`` supports, by id.

    Raises:
        SysfsError: a type's files are missing, unreadable or garbled.
    """
    base = f"{MDEV_BUS_DIR}/{parent}/mdev_supported_types"
    types = {}
    for type_id in reader.listdir(base, _ANY_RE) or ():
        d = f"{base}/{type_id}"
        available = reader.integer(f"{d}/available_instances")
        if available < 0:
            raise SysfsError(reader.path(f"{d}/available_instances"), "garbled (negative)")
        types[type_id] = MdevType(
            id=type_id,
            name=reader.optional_text(f"{d}/name") or type_id,
            available_instances=available,
            device_api=reader.text(f"{d}/device_api"),
        )
    return types


def read_mdevs(root: Root) -> tuple[Mdev, ...]:
    """Existing mdevs (``/sys/bus/mdev/devices``), sorted by UUID.

    An mdev whose links are unreadable is warned about and left out.
    """
    reader = as_reader(root)
    try:
        names = reader.listdir(MDEV_DEVICES_DIR, _UUID_RE) or []
    except SysfsError as exc:
        reader.skip(exc, "existing mdevs")
        return ()
    out = []
    for uuid in names:
        try:
            parent = reader.link_name(f"{MDEV_DEVICES_DIR}/{uuid}", depth=2)
            if parent is None:
                continue
            type_link = f"{MDEV_BUS_DIR}/{parent}/{uuid}/mdev_type"
            type_id = reader.link_name(type_link)
            if type_id is None:
                # Name the link followed too: it may be the one at fault.
                raise SysfsError(
                    reader.path(f"{MDEV_DEVICES_DIR}/{uuid}"),
                    f"links to parent {parent!r}, but {reader.path(type_link)} is missing",
                )
            address = normalize_pci_address(parent)
        except SysfsError as exc:
            reader.skip(exc, f"mdev {uuid}")
            continue
        except ValueError:
            reader.warn(
                f"{reader.path(f'{MDEV_DEVICES_DIR}/{uuid}')}: parent {parent!r} is not a PCI "
                f"device; mdev {uuid} left out"
            )
            continue
        out.append(Mdev(uuid=uuid.lower(), type_id=type_id, parent=address))
    return tuple(out)


def keep_types(types: dict[str, MdevType], enabled: Iterable[str] | None) -> dict[str, MdevType]:
    """``types`` restricted to ``enabled`` (all when ``enabled`` is None)."""
    if enabled is None:
        return types
    wanted = set(enabled)
    return {k: v for k, v in types.items() if k in wanted}


def discover_mdevs(root: Root, enabled: Iterable[str] | None = None) -> tuple[Gpu, ...]:
    """Physical GPUs that can create mdevs, with their types and existing mdevs.

    Args:
        root: sysfs root or reader.
        enabled: ``[devices] enabled_mdev_types``; types outside it are
            dropped; None keeps every type.

    Returns:
        :class:`Gpu` records sorted by address: those with an enabled type
        or an existing mdev. A parent whose files are missing or garbled is
        warned about and left out, as is a parent that is not a PCI device.
    """
    reader = as_reader(root)
    enabled = None if enabled is None else tuple(enabled)
    try:
        parents = reader.listdir(MDEV_BUS_DIR, _ANY_RE) or []
    except SysfsError as exc:
        reader.skip(exc, "every mdev-capable GPU")
        return ()
    mdevs = read_mdevs(reader)
    gpus = []
    for parent in parents:
        try:
            address = normalize_pci_address(parent)
        except ValueError:
            reader.warn(f"{reader.path(f'{MDEV_BUS_DIR}/{parent}')}: not a PCI device; left out")
            continue
        try:
            types = read_mdev_types(reader, parent)
            numa = reader.parse(f"{MDEV_BUS_DIR}/{parent}/numa_node", _numa, optional=True)
        except SysfsError as exc:
            reader.skip(exc, f"GPU {address}")
            continue
        own = tuple(m for m in mdevs if m.parent == address)
        kept = keep_types(types, enabled)
        if kept or own:
            gpus.append(Gpu(address, MappingProxyType(kept), own, numa))
    return tuple(gpus)
