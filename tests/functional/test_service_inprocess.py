"""The service's scheduling in-process: early cycles, hot-plug, one cycle at a time.

The service runs in a thread (no signal handlers) on the session's embedded
Placement, with the fake driver under its own nodename.
"""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import pytest

from agent.conf import config as agent_config
from agent.service import progress as progress_module
from agent.service.daemon import Service
from agent.service.exit_codes import EXIT_OK
from drivers.events import DevicesChanged
from drivers.fake import FakeDriver
from drivers.host.hotplug import HotplugMonitor
from tests.helpers.hosts import host_file
from tests.helpers.names import unique


class WatchedFakeDriver(FakeDriver):
    """The fake driver with the host driver's udev monitor, fed events by the test.

    ``start()`` (netlink) is not called: the test hands the monitor udev
    device records itself, which is the monitor's only input.
    """

    monitors: list[HotplugMonitor] = []  # noqa: RUF012 - shared with the test on purpose
    active = 0
    overlap = False

    def watch(self):
        nodename = self.get_nodenames()[0]
        monitor = HotplugMonitor(
            lambda keys: self.emit(DevicesChanged(nodename, keys, "udev")), 0.05
        )
        self.monitors.append(monitor)
        return monitor

    def get_host_resources(self, nodename):
        cls = type(self)
        cls.active += 1
        cls.overlap = cls.overlap or cls.active > 1
        try:
            time.sleep(0.2)
            return super().get_host_resources(nodename)
        finally:
            cls.active -= 1


@pytest.fixture
def service(tmp_path, embedded):
    nodename = unique("svc")
    path = host_file(tmp_path, nodename)
    ini = tmp_path / "c.conf"
    ini.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\nupdate_interval = 3600\n"
        "update_jitter = 0\n[compute]\ndriver = fake\n[metrics]\nlisten =\n"
        f"[fake]\nhost_file = {path}\n"
        # the in-process placement of the session, reached as the service would reach a
        # remote one (its interceptor is installed for the whole session)
        f"[placement]\nauth_type = admin_token\nendpoint = {embedded.url}\ntoken = admin\n"
        "noauth_roles = admin,service\nmax_concurrent_requests = 1\n"
    )
    WatchedFakeDriver.monitors = []
    svc = Service(
        lambda: agent_config.load([str(ini)]),
        driver_factory=lambda conf: WatchedFakeDriver(conf),
        install_signals=False,
    )
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("code", svc.run()), daemon=True)
    thread.start()
    yield SimpleNamespace(svc=svc, thread=thread, result=result)
    svc.stop()
    thread.join(timeout=30)


def wait_cycles(svc: Service, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while svc.cycles < n:
        assert time.monotonic() < deadline, f"only {svc.cycles} cycles, wanted {n}"
        time.sleep(0.05)


def test_request_cycle_runs_one_early_and_stop_returns_0(service):
    wait_cycles(service.svc, 1)
    assert service.svc.last_outcome.ok and service.svc.last_outcome.startup
    service.svc.request_cycle()
    wait_cycles(service.svc, 2)
    assert not service.svc.last_outcome.startup
    service.svc.stop()
    service.thread.join(timeout=30)
    assert service.result["code"] == EXIT_OK


def event_updates(svc: Service, outcome: str = "ok") -> float:
    value = svc.metrics.registry.get_sample_value(
        "compute_agent_event_updates_total", {"outcome": outcome}
    )
    return value or 0.0


def wait_event_updates(svc: Service, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while event_updates(svc) < n:
        assert time.monotonic() < deadline, f"only {event_updates(svc)} event updates, wanted {n}"
        time.sleep(0.02)


def test_udev_events_make_one_targeted_update_never_alongside_a_cycle(service):
    wait_cycles(service.svc, 1)
    (monitor,) = WatchedFakeDriver.monitors
    for i in range(20):  # a burst, as when a PF creates its VFs
        monitor.handle(
            SimpleNamespace(action="add", subsystem="pci", sys_name=f"0000:3b:02.{i % 8}")
        )
    wait_event_updates(service.svc, 1)
    time.sleep(0.5)
    # One targeted update of the node's devices, no full cycle: the burst was coalesced.
    assert event_updates(service.svc) == 1 and service.svc.cycles == 1
    samples = service.svc.metrics.registry.get_sample_value(
        "compute_agent_events_total", {"kind": "devices"}
    )
    assert samples == 1  # the debouncer made one event of twenty udev events
    # An event heard during a cycle waits for it; the cycle requested next covers it.
    service.svc.request_cycle()
    time.sleep(0.05)
    monitor.handle(SimpleNamespace(action="remove", subsystem="pci", sys_name="0000:3b:02.0"))
    service.svc.request_cycle()
    wait_cycles(service.svc, 3)
    # Then events alone again: an update, never alongside a cycle (the driver saw no overlap).
    monitor.handle(SimpleNamespace(action="add", subsystem="pci", sys_name="0000:3b:02.0"))
    service.svc.request_cycle()
    wait_cycles(service.svc, 4)
    monitor.handle(SimpleNamespace(action="add", subsystem="pci", sys_name="0000:3b:02.1"))
    wait_event_updates(service.svc, 2)
    assert not WatchedFakeDriver.overlap


def test_a_long_cycle_logs_its_progress(service, monkeypatch):
    """A cycle longer than the progress delay says it is still running (no terminal here)."""
    wait_cycles(service.svc, 1)
    monkeypatch.setattr(progress_module, "DEFAULT_DELAY", 0.05)
    monkeypatch.setattr(progress_module, "DEFAULT_INTERVAL", 0.1)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("agent.service.progress")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        service.svc.request_cycle()  # the driver takes 0.2 s per node
        wait_cycles(service.svc, 2)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    messages = [r.getMessage() for r in records]
    assert messages and messages[0].startswith("resource-tracking cycle: still running after")
    assert "placement requests" in messages[0]
