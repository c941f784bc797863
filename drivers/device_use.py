"""Which one-time-use PCI devices an instance holds now (:attr:`~drivers.records.PciDevice.in_use`).

nova reserves a ``one_time_use`` device in Placement while an instance holds
it (nova/compute/pci_placement_translator.py ``_handle_one_time_use``); the
layout needs that fact, which only the instances show. Drivers call
:func:`mark_in_use` with their instances when the host has such a device, so
a host without one costs no extra read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from drivers.records import HostResources, Instance, normalize_pci_address


def has_one_time_use(host: HostResources) -> bool:
    """True when a whole device of ``host`` is tagged ``one_time_use``."""
    return any(dev.one_time_use for dev in host.pci_devices)


def mark_in_use(host: HostResources, instances: Iterable[Instance]) -> HostResources:
    """``host`` with ``in_use`` set on each one-time-use device an instance holds.

    Args:
        host: the host's records.
        instances: the instances on the host (their ``pci_devices`` addresses).

    Returns:
        A new :class:`HostResources`; the other records are unchanged.
    """
    held = set()
    for instance in instances:
        for address in instance.pci_devices:
            try:
                held.add(normalize_pci_address(address))
            except ValueError:
                continue  # not a PCI address: nothing of ours
    devices = tuple(
        dataclasses.replace(dev, in_use=dev.address in held) if dev.one_time_use else dev
        for dev in host.pci_devices
    )
    return dataclasses.replace(host, pci_devices=devices)
