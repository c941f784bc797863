"""nova 34's own claim and domain XML for a flavor and an image: the judge of the agent's plan.

Run as a separate process (``python -m tests.helpers.nova_guest < CASES``, as
:mod:`tests.helpers.nova_libvirt`: nova's ``LibvirtFixture`` patches process-wide state).
CASES is JSON, ``{name: {"vcpus", "memory_mb", "root_gb", "extra_specs": {...},
"image": {property: value}}}``; the answer, on stdout, is JSON:

* ``"host"``: what nova's fakelibvirt connection serves for :data:`HOST`
  (``capabilities``: ``getCapabilities``; ``info``: ``getInfo``), so the agent's libvirt
  driver reads the same host through libvirt's test driver;
* ``"guests"``: per case, ``claim``: what nova's scheduler asks Placement for
  (``ResourceRequest.from_request_spec``, whose ``_translate_pinning_policies`` splits
  VCPU and PCPU), ``cells``: nova's own placement of the guest on the host's NUMA cells
  (``hardware.numa_get_constraints`` then ``numa_fit_instance_to_host`` on the driver's
  ``_get_host_numa_topology``: per host cell, VCPU = the cell's shared vCPUs, PCPU = its
  pinned vCPUs plus the emulator threads' reserved CPU, MEMORY_MB = its memory; empty for
  a guest without a NUMA topology), and ``xml``: the domain nova's ``LibvirtDriver``
  writes for it, put together as ``_get_guest_config`` does for the parts that bear on
  CPUs and memory: ``<memory>``, ``<vcpu>``, ``_get_guest_numa_config`` (``<cputune>``,
  ``<numatune>``, the guest's NUMA cells), ``_update_guest_cputune``,
  ``_get_guest_cpu_config`` (``<cpu>`` with its ``<numa>``), ``_get_guest_iothread``
(``<iothreads>``, which ``<iothreadpin>`` names) and ``_get_guest_config_meta``
  (nova's metadata: the flavor with its extra specs, the image with its properties, the
  owner, the root), plus a root disk.

The host (:data:`HOST`, :data:`OPTIONS`): two NUMA cells of four cores with two threads
(CPUs 0-7 and 8-15), ``[compute] cpu_shared_set = 0-3,8-11`` and ``cpu_dedicated_set =
4-7,12-15``.
"""

from __future__ import annotations

import json
import sys
from typing import Any
from unittest import mock

from tests.helpers.nova_libvirt import _fakelibvirt

HOST = {"cpu_nodes": 2, "cpu_sockets": 1, "cpu_cores": 4, "cpu_threads": 2}
OPTIONS = {"compute": {"cpu_shared_set": "0-3,8-11", "cpu_dedicated_set": "4-7,12-15"}}
PROJECT, USER = "p-judge", "u-judge"


def _uuid(index: int) -> str:
    return f"9d9d9d9d-0000-4000-8000-{index:012d}"


def _guest(driver: Any, index: int, name: str, case: dict[str, Any]) -> dict[str, Any]:
    from nova import objects
    from nova.scheduler import utils as scheduler_utils
    from nova.virt import driver as virt_driver
    from nova.virt import hardware
    from nova.virt.libvirt import config as vconfig

    flavor = objects.Flavor(
        name=name,
        flavorid=name,
        vcpus=case["vcpus"],
        memory_mb=case["memory_mb"],
        root_gb=case.get("root_gb", 10),
        ephemeral_gb=0,
        swap=0,
        extra_specs=dict(case.get("extra_specs", {})),
    )
    image = objects.ImageMeta.from_dict(
        {"disk_format": "raw", "properties": dict(case.get("image", {}))}
    )
    spec = objects.RequestSpec(flavor=flavor, image=image, is_bfv=False)
    claim = dict(scheduler_utils.ResourceRequest.from_request_spec(spec).merged_resources())

    wanted = hardware.numa_get_constraints(flavor, image)
    topology = None
    cells: dict[int, dict[str, int]] = {}
    if wanted is not None:
        host_topology = driver._get_host_numa_topology()
        # The scheduler's limits at nova's default ratios (NUMATopologyFilter).
        limits = objects.NUMATopologyLimits(cpu_allocation_ratio=4.0, ram_allocation_ratio=1.0)
        topology = hardware.numa_fit_instance_to_host(host_topology, wanted, None, limits)
        if topology is None:
            raise SystemExit(f"nova fits case {name} on no host cell")
        for cell in topology.cells:
            pcpus = len(cell.pcpuset) + len(cell.cpuset_reserved or ())
            amounts = {"VCPU": len(cell.cpuset), "PCPU": pcpus, "MEMORY_MB": cell.memory}
            cells[cell.id] = {rc: n for rc, n in amounts.items() if n}

    uuid = _uuid(index)
    guest = vconfig.LibvirtConfigGuest()
    guest.virt_type = "kvm"
    guest.name = f"instance-{index:08x}"
    guest.uuid = uuid
    guest.memory = flavor.memory_mb * 1024
    guest.vcpus = flavor.vcpus
    guest.os_type = "hvm"
    numa = driver._get_guest_numa_config(topology, flavor, image)
    guest.cpuset = numa.cpuset
    guest.cputune = numa.cputune
    guest.numatune = numa.numatune
    dmeta = virt_driver.InstanceDriverMetadata(
        root_type="image",
        root_id="0b1c6f7a-0e8d-4b8e-9d0c-7b5c1c9f2e11",
        instance_meta=virt_driver.NovaInstanceMeta(name=name, uuid=uuid),
        owner=virt_driver.OwnerMeta(
            userid=USER, username="alice", projectid=PROJECT, projectname="demo"
        ),
        image=virt_driver.ImageMeta(
            id="0b1c6f7a-0e8d-4b8e-9d0c-7b5c1c9f2e11",
            name="judge",
            container_format=None,
            disk_format="raw",
            min_disk=None,
            min_ram=None,
            properties=image.properties.to_dict(),
        ),
        flavor=virt_driver.FlavorMeta(
            name=flavor.name,
            flavorid=flavor.flavorid,
            memory_mb=flavor.memory_mb,
            vcpus=flavor.vcpus,
            root_gb=flavor.root_gb,
            ephemeral_gb=flavor.ephemeral_gb,
            extra_specs=flavor.extra_specs,
            swap=flavor.swap,
        ),
        network_info=[],
    )
    guest.metadata.append(driver._get_guest_config_meta(dmeta))
    driver._update_guest_cputune(guest, flavor)
    guest.cpu = driver._get_guest_cpu_config(flavor, image, numa.numaconfig, topology)
    guest.iothreads = driver._get_guest_iothread()
    disk = vconfig.LibvirtConfigGuestDisk()
    disk.source_type = "file"
    disk.source_path = f"/var/lib/nova/instances/{uuid}/disk"
    disk.target_dev = "vda"
    disk.target_bus = "virtio"
    guest.add_device(disk)
    return {"uuid": uuid, "claim": claim, "cells": cells, "xml": guest.to_xml()}


def judge(cases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """nova's claim, NUMA placement and domain XML for each case (module docstring)."""
    from nova import conf as nova_conf
    from nova import objects
    from nova.virt import fake as fake_virt
    from nova.virt.libvirt import driver as libvirt_driver

    objects.register_all()
    conf = nova_conf.CONF
    conf([], project="nova", default_config_files=[])
    # nova-compute registers these at start-up (its per-physnet NUMA affinity options).
    nova_conf.neutron.register_dynamic_opts(conf)
    for group, values in OPTIONS.items():
        for option, value in values.items():
            conf.set_override(option, value, group=group)
    fakelibvirt = _fakelibvirt()
    fixture = fakelibvirt.LibvirtFixture()
    fixture.setUp()
    conn = fakelibvirt.Connection(
        "qemu:///system",
        version=fakelibvirt.FAKE_LIBVIRT_VERSION,
        hv_version=fakelibvirt.FAKE_QEMU_VERSION,
        host_info=fakelibvirt.HostInfo(**HOST),
        hostname="compute1",
    )
    with mock.patch("nova.virt.libvirt.host.Host.get_connection", return_value=conn):
        driver = libvirt_driver.LibvirtDriver(fake_virt.FakeVirtAPI(), False)
        driver.init_host("compute1")
        guests = {
            name: _guest(driver, index, name, case)
            for index, (name, case) in enumerate(sorted(cases.items()), start=1)
        }
        host = {"capabilities": conn.getCapabilities(), "info": list(conn.getInfo())}
    fixture.cleanUp()
    return {"host": host, "guests": guests}


def main() -> int:
    """Read the cases from stdin, print nova's answer."""
    json.dump(judge(json.load(sys.stdin)), sys.stdout, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
