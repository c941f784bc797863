"""The fake host file's edits as events (drivers/fake_watch.py), and libvirt's node device names."""

from __future__ import annotations

import copy
import time

from drivers.events import DevicesChanged, HostResync, InstanceChanged
from drivers.fake import FakeDriver
from drivers.libvirt.watch import address_of_node_device
from tests.helpers.hosts import HostDescription, host_file

NEW = "11111111-2222-4333-8444-555555555555"
NEW_INSTANCE = {
    "uuid": NEW,
    "project_id": "p",
    "user_id": "u",
    "flavor": {"vcpus": 1, "memory_mb": 256},
}


def conf_for(path):
    from agent.conf import config

    return config.load([], {"fake": {"host_file": str(path), "watch_delay": 0.01}})


def test_edits_become_the_events_libvirt_would_send(tmp_path):
    path = host_file(tmp_path, "n1")
    driver = FakeDriver(conf_for(path))
    host = HostDescription.load(path)
    first = host.node()["instances"][0]["uuid"]
    host.node()["instances"].pop(0)
    changed = host.node()["instances"][0]
    changed["flavor"] = {**changed["flavor"], "vcpus": changed["flavor"]["vcpus"] + 1}
    host.add("instances", NEW_INSTANCE)
    host.add("pci_devices", {"address": "0000:99:00.0", "vendor_id": "10de", "product_id": "1db4"})
    host.write(path)
    events = driver.reload()
    assert events[0] == DevicesChanged("n1", ("0000:99:00.0",), "file")
    assert sorted(e.instance_uuid for e in events[1:]) == sorted([first, changed["uuid"], NEW])
    assert {e.what for e in events[1:]} == {"added", "removed", "changed"}
    assert driver.reload() == []  # read again, nothing differs


def test_nodes_added_ask_for_a_full_cycle(tmp_path):
    path = host_file(tmp_path, "n1")
    driver = FakeDriver(conf_for(path))
    host = HostDescription.load(path)
    host.nodes.append(copy.deepcopy(host.node()) | {"nodename": "n2", "instances": []})
    host.write(path)
    assert driver.reload() == [HostResync("fake host file: nodes added or removed")]


def test_the_watch_emits_after_an_editor_renames_its_copy_over_the_file(tmp_path):
    path = host_file(tmp_path, "n1")
    driver = FakeDriver(conf_for(path))
    heard = []
    driver.subscribe(heard.append)
    watch = driver.watch()
    try:
        host = HostDescription.load(path)
        host.add("instances", NEW_INSTANCE)
        host.write(tmp_path / "n1.yaml.swp").rename(path)
        deadline = time.monotonic() + 5
        while not heard and time.monotonic() < deadline:
            time.sleep(0.01)
        assert heard == [InstanceChanged("n1", NEW, "added")]
    finally:
        watch.stop()


def test_node_device_names_become_addresses():
    assert address_of_node_device("pci_0000_81_00_1") == "0000:81:00.1"
    uuid = "4b20d080-1b54-4048-85b3-a6a62d165c01"
    assert address_of_node_device("mdev_" + uuid.replace("-", "_")) == uuid
    assert address_of_node_device("mdev_" + uuid.replace("-", "_") + "_0000_3b_00_0") == uuid
    assert address_of_node_device("net_ens1f0_00_11_22") == "net_ens1f0_00_11_22"
