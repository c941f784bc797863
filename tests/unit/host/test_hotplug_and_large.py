"""Hot-plug debouncing, and the synthetic large host the benchmark uses."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from drivers.host.device_spec import parse_device_specs
from drivers.host.discovery import discover_host
from drivers.host.hotplug import HotplugMonitor
from drivers.host.settings import HostSettings
from drivers.host.synthetic import large_host, write_sysfs


def event(action, subsystem, name):
    return SimpleNamespace(action=action, subsystem=subsystem, sys_name=name)


def test_burst_of_events_gives_one_callback():
    calls = []
    done = threading.Event()
    mon = HotplugMonitor(lambda keys: (calls.append((time.monotonic(), keys)), done.set()), 0.2)
    start = time.monotonic()
    for i in range(64):
        mon.handle(event("add", "pci", f"0000:3b:02.{i % 8}"))
    mon.handle(event("add", "net", "ens1f0v0"))
    mon.handle(event("change", "block", "sda"))  # not watched
    assert done.wait(2)
    time.sleep(0.3)
    assert len(calls) == 1 and calls[0][0] - start >= 0.2
    # One call naming every PCI function seen; the net device without a PCI parent adds none.
    assert calls[0][1] == tuple(f"0000:3b:02.{i}" for i in range(8))
    assert len(mon.events) == 65 and mon.events[-1] == ("add", "net", "ens1f0v0")


def test_a_net_event_names_the_pci_function_under_it():
    calls = []
    done = threading.Event()
    mon = HotplugMonitor(lambda keys: (calls.append(keys), done.set()), delay=0.05)
    pci = SimpleNamespace(sys_name="0000:81:00.1")
    net = SimpleNamespace(
        action="add", subsystem="net", sys_name="ens1f0v1", find_parent=lambda s: pci
    )
    mon.handle(net)
    mon.handle(event("add", "mdev", "4b20d080-1b54-4048-85b3-a6a62d165c01"))
    assert done.wait(2)
    assert calls == [("0000:81:00.1", "4b20d080-1b54-4048-85b3-a6a62d165c01")]


def test_stop_drops_pending_callback():
    calls = []
    mon = HotplugMonitor(lambda keys: calls.append(keys), delay=0.2)
    mon.handle(event("remove", "mdev", "4b20d080-1b54-4048-85b3-a6a62d165c01"))
    mon.stop()
    time.sleep(0.35)
    assert calls == []


def test_real_udev_monitor_starts_and_stops():
    mon = HotplugMonitor(lambda keys: None, delay=0.1)
    mon.start()
    assert mon._observer is not None and mon._observer.is_alive()
    mon.stop()
    assert mon._observer is None


def test_large_synthetic_host(tmp_path):
    root = write_sysfs(tmp_path / "big", large_host())
    settings = HostSettings(
        nodename="big",
        sysfs_root=str(root),
        instances_path=str(tmp_path),
        specs=parse_device_specs(['{"vendor_id": "8086", "physical_network": "physnet1"}']),
        enabled_mdev_types=("nvidia-35",),
    )
    d = discover_host(settings)
    res = d.resources
    assert d.warnings == ()
    assert (res.vcpus, len(res.numa_cells)) == (128, 4)
    assert [p.num_vfs for p in res.sriov_pfs] == [128] * 8
    assert len(res.gpus) == 8 and all(
        g.mdev_types["nvidia-35"].available_instances == 16 for g in res.gpus
    )
    assert len(d.functions) == 8 + 8 * 128 + 8


def test_host_driver_watches_udev_only_on_the_live_host(conf_for):
    from drivers.host import HostDriver

    captured = HostDriver(conf_for("two-socket"))
    assert captured.watch() is None  # a captured tree never changes
    live = HostDriver(conf_for("two-socket", host_driver={"sysfs_root": "/"}))
    monitor = live.watch()
    try:
        assert isinstance(monitor, HotplugMonitor) and monitor._observer is not None
    finally:
        monitor.stop()
