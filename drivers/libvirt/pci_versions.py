"""``[pci] device_spec`` tags that need a libvirt and QEMU version, refused as nova refuses them.

nova 34's libvirt driver refuses to start when any ``[pci] device_spec`` gives a
``live_migratable`` tag, whatever its value ("false" too), unless libvirt is at
least 10.0.0 and the hypervisor is QEMU at least 8.2.2 (nova/virt/libvirt/driver.py
``_check_pci_whitelist``, ``MIN_VFIO_PCI_VARIANT_LIBVIRT_VERSION``,
``MIN_VFIO_PCI_VARIANT_QEMU_VERSION``; ``Host.has_min_version`` with ``hv_type =
QEMU`` also wants ``virConnectGetType`` to say ``QEMU``). The agent refuses the same
configuration the same way: a :class:`~drivers.errors.ConfigError`, so ``compute-agent
run`` exits 2 at start naming the option, the versions found and those needed,
instead of reporting ``HW_PCI_LIVE_MIGRATABLE`` on a host nova cannot run on.
"""

from __future__ import annotations

from collections.abc import Sequence

from drivers.errors import ConfigError
from drivers.host.device_spec import DeviceSpec

MIN_LIBVIRT_LIVE_MIGRATABLE = 10_000_000
"""libvirt 10.0.0 as ``virConnectGetLibVersion`` encodes it (major * 1_000_000 + minor * 1000
+ micro)."""
MIN_QEMU_LIVE_MIGRATABLE = 8_002_002
"""QEMU 8.2.2 as ``virConnectGetVersion`` encodes it."""
HV_TYPE = "QEMU"


def version_text(version: int) -> str:
    """``10000000`` -> ``10.0.0``."""
    return f"{version // 1_000_000}.{version // 1000 % 1000}.{version % 1000}"


def live_migratable_specs(specs: Sequence[DeviceSpec]) -> list[DeviceSpec]:
    """The specs that give a ``live_migratable`` tag at all, whatever its value."""
    return [s for s in specs if "live_migratable" in s.tagged]


def check_live_migratable(
    specs: Sequence[DeviceSpec], lib_version: int, hv_version: int, hv_type: str
) -> None:
    """Refuse a ``live_migratable`` tag on a libvirt or QEMU too old for it (nova's rule).

    Args:
        specs: ``[pci] device_spec`` parsed.
        lib_version: ``virConnectGetLibVersion``.
        hv_version: ``virConnectGetVersion`` (the hypervisor's, QEMU's for qemu:///).
        hv_type: ``virConnectGetType`` (``QEMU`` for qemu:///system).

    Raises:
        ConfigError: a spec tags ``live_migratable`` and libvirt is older than
            10.0.0, or the hypervisor is not QEMU 8.2.2 or later.
    """
    tagged = live_migratable_specs(specs)
    if not tagged:
        return
    if (
        lib_version >= MIN_LIBVIRT_LIVE_MIGRATABLE
        and hv_version >= MIN_QEMU_LIVE_MIGRATABLE
        and hv_type == HV_TYPE
    ):
        return
    raise ConfigError(
        f"[pci] device_spec {tagged[0].text}: live_migratable needs libvirt "
        f"{version_text(MIN_LIBVIRT_LIVE_MIGRATABLE)} and QEMU "
        f"{version_text(MIN_QEMU_LIVE_MIGRATABLE)} or later, found libvirt "
        f"{version_text(lib_version)} and {hv_type} {version_text(hv_version)}; nova-compute "
        "refuses to start so (even with live_migratable set to false: "
        "LibvirtDriver._check_pci_whitelist); upgrade libvirt and QEMU, or drop the tag"
    )
