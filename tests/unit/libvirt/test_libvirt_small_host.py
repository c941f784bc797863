"""A host with no capabilities file and no node devices (fixtures/libvirt/small-host).

Here everything comes from the test driver itself: ``virNodeGetInfo`` for the
totals (its capabilities have no NUMA cell, so the CPUs are the active count),
and domains covering boot from volume, nova metadata, no metadata, USB/SCSI
hostdevs and malformed metadata. ``virDomainGetBlockInfo`` of the test driver
reports every disk as the same size (just under 1 TiB), so the "no flavor"
cases check the sum of what libvirt reports for the local disks.
"""

from __future__ import annotations

import math

from agent.cli.render import discover_record
from agent.shape.adapter import adapt
from tests.helpers.libvirt_fixtures import (
    ROOT_UUID,
    allocations_by_name,
    laid_out,
    libvirt_driver,
    tree_view,
)

UNOWNED = {"project_id": "unowned", "user_id": "unowned"}


def blockinfo_gib(driver, domain: str, target: str) -> int:
    dom = driver.connection.get().lookupByName(domain)
    return math.ceil(dom.blockInfo(target)[0] / 1024**3)


def test_tree_from_node_info_only(tmp_path):
    tree = tree_view(laid_out(libvirt_driver(tmp_path, "small-host")))
    assert set(tree) == {"cn1"}
    inv = tree["cn1"]["inv"]
    assert inv["VCPU"] == (8, 0, 8, 4.0)
    assert inv["MEMORY_MB"] == (16384, 0, 16384, 1.0)
    assert set(inv) == {"VCPU", "MEMORY_MB", "DISK_GB"}
    # i686 CPU with no model: no x86 feature traits; getInfo says 2 threads per core
    hardware = {t for t in tree["cn1"]["traits"] if not t.startswith("COMPUTE_")}
    assert hardware == {"HW_CPU_HYPERTHREADING", "HW_ARCH_I686"}


def test_every_instance_allocation(tmp_path, caplog):
    driver = libvirt_driver(tmp_path, "small-host", DEFAULT={"reserved_host_memory_mb": 0})
    tree = laid_out(driver)
    got = allocations_by_name(driver, tree)
    orphan_disk = blockinfo_gib(driver, "vm-orphan", "vda") + blockinfo_gib(
        driver, "vm-orphan", "vdb"
    )
    assert got == {
        # agent flavor, root disk (boot order 1) is rbd: boot from volume, root 0 + eph 5
        "cccccccc-0000-4000-8000-000000000001": {
            "allocations": {"cn1": {"DISK_GB": 5, "MEMORY_MB": 2048, "VCPU": 2}},
            "project_id": "p-agent-5",
            "user_id": "u-agent-5",
        },
        # nova metadata without <nova:root>: booted from volume (iSCSI block disk);
        # swap 2048 MiB = 2 GiB
        "cccccccc-0000-4000-8000-000000000002": {
            "allocations": {"cn1": {"DISK_GB": 2, "MEMORY_MB": 1024, "VCPU": 1}},
            "project_id": "p-nova-3",
            "user_id": "u-nova-3",
        },
        # nova metadata with <nova:root type="image">: rbd root is ephemeral, counted
        "cccccccc-0000-4000-8000-000000000003": {
            "allocations": {"cn1": {"DISK_GB": 20, "MEMORY_MB": 2048, "VCPU": 2}},
            "project_id": "p-nova-3",
            "user_id": "u-nova-3",
        },
        # no metadata: unowned; vda + vdb measured; the CD-ROM and the rbd disk are not
        "cccccccc-0000-4000-8000-000000000004": {
            "allocations": {"cn1": {"DISK_GB": orphan_disk, "MEMORY_MB": 512, "VCPU": 1}},
            **UNOWNED,
        },
        # USB and SCSI hostdevs hold nothing in Placement; the rest is allocated
        "cccccccc-0000-4000-8000-000000000005": {
            "allocations": {"cn1": {"DISK_GB": 1, "MEMORY_MB": 1024, "VCPU": 1}},
            "project_id": "p-agent-5",
            "user_id": "u-agent-5",
        },
        # malformed agent metadata (no user): counted, unowned, no disk
        "cccccccc-0000-4000-8000-000000000006": {
            "allocations": {"cn1": {"MEMORY_MB": 1024, "VCPU": 1}},
            **UNOWNED,
        },
    }
    assert orphan_disk == 2 * 1024
    odd = "domain vm-odd-hostdevs (cccccccc-0000-4000-8000-000000000005)"
    bad = "domain vm-bad-metadata (cccccccc-0000-4000-8000-000000000006)"
    assert sorted(driver.warnings) == sorted(
        [
            f"{odd}: <hostdev type='scsi'> is not a kind the agent accounts (pci, mdev); "
            "it is not allocated, the rest of the domain is",
            f"{odd}: <hostdev type='usb'> is not a kind the agent accounts (pci, mdev); "
            "it is not allocated, the rest of the domain is",
            f"{bad}: compute-agent metadata needs <owner project=... user=...> (both "
            "non-empty); counted under the unowned project and user",
        ]
    )
    assert bad in caplog.text and odd in caplog.text


def test_unowned_project_and_user_are_configurable(tmp_path):
    driver = libvirt_driver(
        tmp_path,
        "small-host",
        libvirt={"unowned_project_id": "p-ops", "unowned_user_id": "u-ops"},
    )
    inst = {i.uuid: i for i in driver.list_instances("cn1")}
    orphan = inst["cccccccc-0000-4000-8000-000000000004"]
    assert (orphan.project_id, orphan.user_id) == ("p-ops", "u-ops")
    assert orphan.name == "vm-orphan" and orphan.flavor.root_gb == 1024
    assert orphan.flavor.ephemeral_gb == 1024 and not orphan.boot_from_volume


def test_warnings_are_logged_once_per_driver(tmp_path, caplog):
    driver = libvirt_driver(tmp_path, "small-host")
    driver.list_instances("cn1")
    driver.list_instances("cn1")
    assert len(driver.warnings) == 3  # every read records them
    assert caplog.text.count("vm-odd-hostdevs") == 2  # usb and scsi, logged once each


def test_domain_vanished_between_list_and_read(tmp_path, caplog):
    driver = libvirt_driver(tmp_path, "small-host")
    listed = driver.instances.list_domains()
    gone = driver.connection.get().lookupByName("vm-orphan")
    gone.undefine()  # persistent -> transient
    gone.destroy()  # a stopped transient domain is gone
    instances = driver.instances.read(listed)
    assert "cccccccc-0000-4000-8000-000000000004" not in {i.uuid for i in instances}
    assert len(instances) == 5
    line = "domain vm-orphan (cccccccc-0000-4000-8000-000000000004) vanished after it was listed"
    assert any(w.startswith(line) for w in driver.warnings)
    assert line in caplog.text


def test_inactive_defined_domain_is_counted(tmp_path):
    driver = libvirt_driver(tmp_path, "small-host")
    conn = driver.connection.get()
    dom = conn.defineXML(
        "<domain type='test'><name>vm-defined</name>"
        "<uuid>cccccccc-0000-4000-8000-0000000000ff</uuid>"
        "<memory unit='GiB'>3</memory><vcpu>3</vcpu>"
        "<os><type arch='x86_64'>hvm</type></os></domain>"
    )
    assert dom.isActive() == 0
    tree = laid_out(driver)
    typed = adapt(driver, driver.conf).expected_allocations(tree, "cn1")[
        "cccccccc-0000-4000-8000-0000000000ff"
    ]
    alloc = discover_record(typed)
    assert alloc["allocations"] == {ROOT_UUID: {"resources": {"MEMORY_MB": 3072, "VCPU": 3}}}
    assert alloc["consumer_type"] == "INSTANCE"
