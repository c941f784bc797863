"""The fake driver: host descriptions and run-time changes."""

from __future__ import annotations

import pytest

from agent.model.exceptions import CapacityExceeded, ConfigError, HostDescriptionError
from agent.model.provider_tree import ProviderTree
from agent.shape.adapter import adapt
from drivers import load_driver
from drivers.events import DevicesChanged, DriverEvent, InstanceChanged, InstanceSpawning
from drivers.fake import FakeDriver
from drivers.fake_host import load_host_description, parse_host_description
from drivers.records import Flavor, Gpu, Instance, MdevType, PciDevice, SriovPF
from tests.helpers.paths import EXAMPLES

SMALL = EXAMPLES / "small-host.yaml"
BIG = EXAMPLES / "big-host.yaml"


def test_examples_load():
    (small,) = load_host_description(SMALL)
    assert small.host.nodename == "small-host"
    assert (small.host.vcpus, small.host.memory_mb, small.host.disk_gb) == (8, 16384, 200)
    assert len(small.instances) == 2
    (big,) = load_host_description(BIG)
    h = big.host
    assert [c.id for c in h.numa_cells] == [0, 1]
    assert (h.vcpus, h.pcpus, h.memory_mb) == (80, 16, 786432)
    assert [pf.num_vfs for pf in h.sriov_pfs] == [64, 64]
    assert h.sriov_pfs[0].vf_addresses[0] == "0000:3b:02.0"  # RID 0x3b00 + 16
    assert h.sriov_pfs[0].vf_addresses[63] == "0000:3b:09.7"
    assert len(h.gpus) == 2 and len(h.gpus[0].mdevs) == 2
    assert h.numa_cells[0].hugepages == {2048: 0, 1048576: 16}


def doc(**node):
    base = {"nodename": "n1", "memory_mb": 1024}
    base.update(node)
    return {"nodes": [base]}


@pytest.mark.parametrize(
    ("document", "where", "reason"),
    [
        ({}, "", "'nodes' is a required property"),
        ({"nodes": []}, "nodes", "should be non-empty"),
        (doc(memory_mb="lots"), "nodes[0].memory_mb", "'lots' is not of type 'integer'"),
        (doc(disk_gb=-1), "nodes[0].disk_gb", "less than the minimum"),
        (doc(colour="red"), "nodes[0]", "Additional properties"),
        (
            doc(numa_cells=[{"id": 0, "memory_mb": 512}]),
            "nodes[0].memory_mb",
            "differs from the sum over numa_cells (512)",
        ),
        (
            doc(numa_cells=[{"id": 0, "memory_mb": 512}, {"id": 0, "memory_mb": 512}]),
            "nodes[0].numa_cells",
            "repeat",
        ),
        (
            doc(pci_devices=[{"address": "zz:00.0", "vendor_id": "8086", "product_id": "0a54"}]),
            "nodes[0].pci_devices[0]",
            "not a PCI address",
        ),
        (
            doc(pci_devices=[{"address": "0000:3b:02.0", "vendor_id": "8086", "product_id": "1"}]),
            "nodes[0].pci_devices[0].product_id",
            "does not match",
        ),
        (
            doc(
                sriov_pfs=[{"address": "0000:3b:00.0", "total_vfs": 4, "vf_offset": 16}],
                pci_devices=[
                    {"address": "0000:3b:02.1", "vendor_id": "8086", "product_id": "0a54"}
                ],
            ),
            "nodes[0].sriov_pfs[0] VF 1",
            "already used at nodes[0].pci_devices[0]",
        ),
        (
            doc(sriov_pfs=[{"address": "0000:3b:00.0", "total_vfs": 4, "num_vfs": 8}]),
            "nodes[0].sriov_pfs[0]",
            "num_vfs 8 exceeds total_vfs 4",
        ),
        (
            doc(
                gpus=[
                    {
                        "address": "0000:af:00.0",
                        "mdev_types": [{"id": "nvidia-35", "available_instances": 2}],
                        "mdevs": [{"uuid": "7f0b3c1e-0a3d-4a4b-9f8a-1c2d3e4f5a01", "type": "x"}],
                    }
                ]
            ),
            "nodes[0].gpus[0].mdevs[0]",
            "mdev type 'x' is not offered",
        ),
        (
            doc(
                instances=[
                    {
                        "uuid": "not-a-uuid",
                        "project_id": "p",
                        "user_id": "u",
                        "flavor": {"vcpus": 1, "memory_mb": 1},
                    }
                ]
            ),
            "nodes[0].instances[0]",
            "'not-a-uuid' is not a UUID",
        ),
        (
            doc(
                instances=[
                    {
                        "uuid": "4f7d1e2a-5b6c-4d8e-9f01-a2b3c4d5e601",
                        "project_id": "p",
                        "user_id": "u",
                        "flavor": {"vcpus": 1, "memory_mb": 1},
                        "pci_devices": ["0000:01:00.0"],
                    }
                ]
            ),
            "nodes[0].instances[0]",
            "uses 0000:01:00.0, which is neither",
        ),
        (
            {"nodes": [{"nodename": "a", "memory_mb": 1}, {"nodename": "a", "memory_mb": 1}]},
            "nodes[1].nodename",
            "repeats",
        ),
    ],
)
def test_malformed_descriptions_name_the_place(document, where, reason):
    with pytest.raises(HostDescriptionError) as err:
        parse_host_description(document, "h.yaml")
    assert err.value.where == where
    assert reason in err.value.reason
    assert "\n" not in str(err.value)


def test_unreadable_and_bad_yaml(tmp_path):
    with pytest.raises(HostDescriptionError) as err:
        load_host_description(tmp_path / "missing.yaml")
    assert "cannot read the file" in str(err.value)
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - nodename: a\n   memory_mb: [\n")
    with pytest.raises(HostDescriptionError) as err:
        load_host_description(bad)
    assert str(err.value).startswith(f"{bad} at line ")
    assert "not valid YAML" in str(err.value)


def test_driver_needs_a_host_file(conf_factory):
    with pytest.raises(ConfigError) as err:
        FakeDriver(conf_factory())
    assert "[fake] host_file" in str(err.value)


def test_load_driver_by_name(conf_factory):
    conf = conf_factory(compute={"driver": "fake"}, fake={"host_file": str(SMALL)})
    driver = load_driver(conf.compute.driver, conf)
    assert isinstance(driver, FakeDriver)
    assert driver.get_nodenames() == ["small-host"]
    with pytest.raises(ConfigError) as err:
        load_driver("vmware", conf)
    assert "'vmware' is not a known driver" in str(err.value)
    with pytest.raises(ConfigError):
        load_driver(None, conf)


@pytest.fixture
def driver(conf_factory) -> FakeDriver:
    return FakeDriver(conf_factory(devices={"enabled_mdev_types": ["nvidia-35"]}), BIG)


def tree_for(driver: FakeDriver) -> ProviderTree:
    tree = ProviderTree()
    tree.new_root("big-host", "9542d607-1120-5a0a-ad15-9f99a7af6211")
    adapt(driver, driver.conf).update_provider_tree(tree, "big-host")
    return tree


NEW = "0d6e3c8a-1f2b-4c5d-9e8f-7a6b5c4d3e2f"


def test_spawn_and_destroy(driver):
    i = Instance(
        NEW, "p", "u", Flavor(vcpus=2, memory_mb=2048, root_gb=10), pci_devices=("0000:d8:03.0",)
    )
    driver.spawn("big-host", i)
    assert driver.list_instances("big-host")[-1] == i
    allocs = adapt(driver, driver.conf).expected_allocations(tree_for(driver), "big-host")
    assert NEW in allocs
    with pytest.raises(HostDescriptionError):
        driver.spawn("big-host", i)  # same UUID twice
    clash = Instance(
        "1d6e3c8a-1f2b-4c5d-9e8f-7a6b5c4d3e2f",
        "p",
        "u",
        Flavor(1, 1),
        pci_devices=("0000:d8:03.0",),
    )
    with pytest.raises(HostDescriptionError) as err:
        driver.spawn("big-host", clash)
    assert "assigned to both" in str(err.value)
    assert driver.destroy(NEW) == i
    assert NEW not in adapt(driver, driver.conf).expected_allocations(tree_for(driver), "big-host")
    with pytest.raises(KeyError):
        driver.destroy(NEW)


def test_spawn_and_destroy_emit_events_and_a_listener_can_veto(driver):
    """drivers.events: spawning is heard before the add (a raise vetoes), destroyed after."""
    heard: list[tuple[str, bool]] = []

    def listener(event: DriverEvent) -> None:
        uuid = event.instance_uuid if isinstance(event, InstanceChanged) else event.instance.uuid
        present = any(i.uuid == uuid for i in driver.list_instances("big-host"))
        heard.append((type(event).__name__, present))
        if isinstance(event, InstanceSpawning) and event.instance.flavor.vcpus > 100:
            raise CapacityExceeded("VCPU", 101, 0, 100, "too big")

    driver.subscribe(listener)
    fits = Instance(NEW, "p", "u", Flavor(vcpus=2, memory_mb=2048, root_gb=10))
    driver.spawn("big-host", fits)
    assert driver.destroy(NEW) == fits
    # The claim events around the change, then what libvirt would say happened.
    assert heard == [
        ("InstanceSpawning", False),
        ("InstanceChanged", True),
        ("InstanceDestroyed", False),
        ("InstanceChanged", False),
    ]
    with pytest.raises(CapacityExceeded):
        driver.spawn("big-host", Instance(NEW, "p", "u", Flavor(vcpus=101, memory_mb=1)))
    assert NEW not in {i.uuid for i in driver.list_instances("big-host")}
    assert len(heard) == 5  # a vetoed spawn says nothing happened
    driver.unsubscribe(listener)
    driver.spawn("big-host", fits)
    assert len(heard) == 5
    with pytest.raises(ValueError):
        driver.unsubscribe(listener)


def test_change_totals(driver):
    driver.update_host("big-host", disk_gb=100)
    assert tree_for(driver).data("big-host").inventory["DISK_GB"].total == 100


def test_device_and_total_changes_emit_devices_changed(driver):
    heard: list[DriverEvent] = []
    driver.subscribe(heard.append)
    driver.add_device("big-host", PciDevice("0000:87:00.0", "10de", "1db4"))
    driver.remove_device("big-host", "0000:87:00.0")
    driver.update_host("big-host", disk_gb=100)
    assert heard == [
        DevicesChanged("big-host", ("0000:87:00.0",), "add"),
        DevicesChanged("big-host", ("0000:87:00.0",), "remove"),
        DevicesChanged("big-host", (), "change"),
    ]


def test_add_and_remove_devices(driver):
    driver.add_device("big-host", PciDevice("0000:87:00.0", "10de", "1db4"))
    driver.add_device(
        "big-host", SriovPF("0000:88:00.0", total_vfs=4, vf_addresses=("0000:88:02.0",))
    )
    driver.add_device("big-host", Gpu("0000:89:00.0", {"nvidia-35": MdevType("nvidia-35", "g", 4)}))
    tree = tree_for(driver)
    assert tree.data("big-host_pci_0000_87_00_0").inventory["CUSTOM_PCI_10DE_1DB4"].total == 1
    assert tree.data("big-host_pci_0000_88_00_0").inventory["SRIOV_NET_VF"].total == 1
    assert tree.data("big-host_pci_0000_89_00_0").inventory["VGPU"].total == 4
    with pytest.raises(HostDescriptionError):
        driver.add_device("big-host", PciDevice("0000:3b:02.0", "8086", "154c"))  # a VF
    driver.remove_device("big-host", "0000:af:00.0")
    assert not tree_for(driver).exists("big-host_pci_0000_af_00_0")
    with pytest.raises(KeyError):
        driver.remove_device("big-host", "0000:af:00.0")


def test_reload_keeps_state_on_error(driver, tmp_path):
    good = tmp_path / "h.yaml"
    good.write_text("nodes: [{nodename: a, memory_mb: 1024}]\n")
    driver.host_file = str(good)
    driver.reload()
    assert driver.get_nodenames() == ["a"]
    good.write_text("nodes: [{nodename: a}]\n")
    with pytest.raises(HostDescriptionError):
        driver.reload()
    assert driver.get_nodenames() == ["a"]
