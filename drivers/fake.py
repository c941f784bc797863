"""The fake driver: a host described in a YAML file, changeable at run time.

Functional tests and labs use it to play a hypervisor: the description gives
the hardware and the instances (docs/fake-host.md); the methods below add or
remove instances and devices and change totals while the agent runs, the way
real hardware and real instances come and go.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from oslo_config import cfg

from drivers.base import ComputeDriver
from drivers.errors import ConfigError, HostDescriptionError
from drivers.events import (
    DevicesChanged,
    DriverEvent,
    InstanceChanged,
    InstanceDestroyed,
    InstanceSpawning,
)
from drivers.fake_host import load_host_description
from drivers.fake_host.nodes import FakeNode, check_instances
from drivers.fake_watch import HostFileWatch, changes
from drivers.records import Gpu, HostResources, Instance, PciDevice, SriovPF, normalize_pci_address

LOG = logging.getLogger(__name__)


class FakeDriver(ComputeDriver):
    """A driver whose host comes from a description file.

    Args:
        conf: loaded configuration.
        host_file: the description; defaults to ``[fake] host_file``.

    Raises:
        ConfigError: no host file is given.
        HostDescriptionError: the file is unreadable or malformed.
    """

    def __init__(self, conf: cfg.ConfigOpts, host_file: str | Path | None = None) -> None:
        super().__init__(conf)
        path = host_file or conf.fake.host_file
        if not path:
            raise ConfigError(
                "the fake driver needs a host description: set [fake] host_file or pass "
                "--fake-host FILE"
            )
        self.host_file = str(path)
        self._lock = threading.Lock()
        self._nodes: dict[str, FakeNode] = {}
        self.reload()

    def reload(self) -> list[DriverEvent]:
        """Read the description file again, replacing hardware and instances.

        Returns:
            What changed, as events (:func:`drivers.fake_watch.changes`); not emitted.

        Raises:
            HostDescriptionError: the file is malformed; the driver keeps its
                previous state.
        """
        nodes = {n.host.nodename: n for n in load_host_description(self.host_file)}
        with self._lock:
            old, self._nodes = self._nodes, nodes
        return changes(old, nodes)

    def watch(self) -> HostFileWatch:
        """Emit events when the host file is edited (inotify; ``[fake] watch_delay``).

        See :mod:`drivers.fake_watch`. Instances spawned and devices added
        through the methods below are replaced by the file's content on its
        next edit: while watched, the file is the host.

        Returns:
            The started watch (``stop()`` it).

        Raises:
            OSError: inotify cannot watch the file's directory.
        """
        watch = HostFileWatch(self.host_file, self._file_changed, self.conf.fake.watch_delay)
        watch.start()
        return watch

    def _file_changed(self) -> None:
        try:
            events = self.reload()
        except HostDescriptionError as exc:
            LOG.warning("%s; the previous description stays until the file is fixed", exc)
            return
        for event in events:
            self.emit(event)

    # -- ComputeDriver ---------------------------------------------------------

    def get_nodenames(self) -> list[str]:
        """Nodenames in file order."""
        with self._lock:
            return list(self._nodes)

    def _node(self, nodename: str) -> FakeNode:
        try:
            return self._nodes[nodename]
        except KeyError:
            raise KeyError(f"node {nodename!r} is not in {self.host_file}") from None

    def get_host_resources(self, nodename: str) -> HostResources:
        """The node's hardware as it is now (see :meth:`update_host`).

        Waits ``[fake] discovery_delay`` seconds first, as slow discovery would.
        """
        if self.conf.fake.discovery_delay:
            time.sleep(self.conf.fake.discovery_delay)
        with self._lock:
            return self._node(nodename).host

    def list_instances(self, nodename: str) -> list[Instance]:
        """The node's instances, in the order they were added."""
        with self._lock:
            return list(self._node(nodename).instances.values())

    # -- run-time changes ----------------------------------------------------------

    def _check(self, nodename: str, host: HostResources, instances: list[Instance]) -> None:
        def fail(where: str, reason: str) -> HostDescriptionError:
            return HostDescriptionError(f"fake node {nodename}", where, reason)

        check_instances(host, instances, fail)

    def spawn(self, nodename: str, instance: Instance) -> None:
        """Add an instance to a node, after telling listeners it is spawning.

        Emits :class:`~drivers.events.InstanceSpawning` once the instance is
        known to fit the description; a subscribed tracker claims its
        resources then, the path a real compute service takes. Then, the
        instance added, :class:`~drivers.events.InstanceChanged` (``started``),
        as libvirt's lifecycle event would.

        Raises:
            KeyError: unknown node.
            HostDescriptionError: the UUID is taken, or the instance names a
                device, mdev or NUMA cell the node does not have, or one
                already assigned.
            CapacityExceeded: a listener's claim failed (any exception a
                listener raises vetoes the spawn); the instance is not added.
        """
        with self._lock:
            node = self._node(nodename)
            for other in self._nodes.values():
                if instance.uuid in other.instances:
                    raise HostDescriptionError(
                        f"fake node {nodename}", "", f"instance {instance.uuid} already exists"
                    )
            self._check(nodename, node.host, [*node.instances.values(), instance])
        # Outside the driver's lock: a claim lays the node out, which reads it.
        self.emit(InstanceSpawning(nodename, instance))
        with self._lock:
            node.instances[instance.uuid] = instance
        self.emit(InstanceChanged(nodename, instance.uuid, "started"))

    def destroy(self, instance_uuid: str) -> Instance:
        """Remove an instance wherever it runs, then tell listeners it is gone.

        Emits :class:`~drivers.events.InstanceDestroyed`; a subscribed tracker
        gives the instance's claim back then; then
        :class:`~drivers.events.InstanceChanged` (``undefined``).

        Returns:
            The removed instance.

        Raises:
            KeyError: no such instance.
            Exception: whatever a listener raised; the instance stays removed.
        """
        with self._lock:
            nodename = next(
                (n for n, node in self._nodes.items() if instance_uuid in node.instances), None
            )
            if nodename is None:
                raise KeyError(f"no instance {instance_uuid} on any fake node")
            instance = self._nodes[nodename].instances.pop(instance_uuid)
        self.emit(InstanceDestroyed(nodename, instance))
        self.emit(InstanceChanged(nodename, instance_uuid, "undefined"))
        return instance

    def update_host(self, nodename: str, **changes: Any) -> HostResources:
        """Change fields of a node's :class:`HostResources` (``memory_mb=...``, ``vcpus=...``).

        Emits :class:`~drivers.events.DevicesChanged` naming no device.

        Instances are not checked against the new values: hardware can shrink
        under running instances and the agent must cope.

        Raises:
            KeyError: unknown node.
            TypeError: an unknown field.
        """
        with self._lock:
            node = self._node(nodename)
            node.host = host = replace(node.host, **changes)
        self.emit(DevicesChanged(nodename, (), "change"))
        return host

    def add_device(self, nodename: str, device: PciDevice | SriovPF | Gpu) -> None:
        """Hot-plug a whole PCI device, an SR-IOV PF or a GPU.

        Emits :class:`~drivers.events.DevicesChanged` naming its address.

        Raises:
            KeyError: unknown node.
            HostDescriptionError: the address is already in use.
        """
        with self._lock:
            node = self._node(nodename)
            host = node.host
            taken = (
                {d.address for d in host.pci_devices}
                | {p.address for p in host.sriov_pfs}
                | {g.address for g in host.gpus}
                | set(host.pf_of_vf())
            )
            new = {device.address} | set(getattr(device, "vf_addresses", ()))
            clash = sorted(new & taken)
            if clash:
                raise HostDescriptionError(
                    f"fake node {nodename}", "", f"PCI address {clash[0]} is already in use"
                )
            if isinstance(device, PciDevice):
                node.host = replace(host, pci_devices=(*host.pci_devices, device))
            elif isinstance(device, SriovPF):
                node.host = replace(host, sriov_pfs=(*host.sriov_pfs, device))
            else:
                node.host = replace(host, gpus=(*host.gpus, device))
        self.emit(DevicesChanged(nodename, (device.address,), "add"))

    def remove_device(self, nodename: str, address: str) -> None:
        """Hot-unplug the device, PF or GPU at ``address``.

        Emits :class:`~drivers.events.DevicesChanged` naming its address.

        Instances keep naming it: that is what happens on real hardware, and
        the agent must not drop allocations from under them.

        Raises:
            KeyError: unknown node or no device at that address.
        """
        address = normalize_pci_address(address)
        with self._lock:
            node = self._node(nodename)
            host = node.host
            kept = (
                tuple(d for d in host.pci_devices if d.address != address),
                tuple(p for p in host.sriov_pfs if p.address != address),
                tuple(g for g in host.gpus if g.address != address),
            )
            before = len(host.pci_devices) + len(host.sriov_pfs) + len(host.gpus)
            if sum(map(len, kept)) == before:
                raise KeyError(f"no device at {address} on fake node {nodename}")
            node.host = replace(host, pci_devices=kept[0], sriov_pfs=kept[1], gpus=kept[2])
        self.emit(DevicesChanged(nodename, (address,), "remove"))
