"""Benchmark: from an event on the host to Placement holding it (issue #15).

The real service (``agent.service.daemon.Service``, in a thread, cycles an
hour apart) on a real Placement served over HTTP on loopback by
``compute-agent placement-serve`` (another process, SQLite). After the
start-up cycle, everything that reaches Placement comes through the event
path. For each event the benchmark starts a clock, makes the change, and
polls Placement (``GET``, every 2 ms, its own HTTP connection) until the
result is visible:

- **libvirt** (``test:///default``, libvirt's in-process test driver, whose
  domains fire lifecycle events): a transient domain started -> its
  allocation visible; destroyed -> gone. ``--events`` of each.
- **fake driver**: a PCI device added -> its provider's inventory visible.
- **burst**: ``--burst`` domains started at once (one event each, one
  consumer each), and ``--burst`` events about 10 domains (start/stop
  repeated): time until all is visible, Placement requests, allocation
  writes (target: one per consumer), batches (coalescing).

Figures: p50 / p99 / max latency, requests and writes per event, and the
peak RSS of the process. Target: p99 under 1 s, at most one allocation write
per consumer and per event. Run: ``make bench`` or ``.venv/bin/python bench/events.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import requests
import yaml

from agent.conf import config
from agent.placement.client import RequestEvent
from agent.service.daemon import Service
from drivers.records import PciDevice

REPO = Path(__file__).resolve().parents[1]
HEADERS = {
    "X-Auth-Token": "admin",
    "X-Roles": "admin,service",
    "OpenStack-API-Version": "placement 1.39",
}
DOMAIN = (
    "<domain type='test'><name>b-{short}</name><uuid>{uuid}</uuid>"
    "<memory unit='KiB'>8192</memory><vcpu>1</vcpu>"
    "<os><type arch='x86_64'>hvm</type></os></domain>"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Placement:
    """``compute-agent placement-serve`` in a subprocess on a free loopback port."""

    def __init__(self, state: Path) -> None:
        state.mkdir(parents=True, exist_ok=True)
        conf = state / "serve.conf"
        conf.write_text(f"[DEFAULT]\nstate_path = {state}\n")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "agent.cli.main", "placement-serve", "--config", str(conf)]
        self.proc = subprocess.Popen(
            [*cmd, "--port", str(port)], cwd=REPO, stdout=subprocess.DEVNULL
        )
        self.http = requests.Session()
        self.http.headers.update(HEADERS)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.http.get(self.url + "/", timeout=1)
                return
            except requests.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("placement-serve did not start") from None
                time.sleep(0.1)

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        resp = self.http.get(self.url + path, params=params, timeout=10)
        resp.raise_for_status()
        return resp.json()

    def allocated(self, consumer: str) -> bool:
        return bool(self.get(f"/allocations/{consumer}").get("allocations"))

    def has_inventory(self, name: str) -> bool:
        found = self.get("/resource_providers", name=name)["resource_providers"]
        return bool(found) and bool(
            self.get(f"/resource_providers/{found[0]['uuid']}/inventories")["inventories"]
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


class Counted:
    """The service's Placement requests, and its allocation writes, counted."""

    def __init__(self) -> None:
        self.requests = 0
        self.writes = 0
        self._lock = threading.Lock()

    def __call__(self, event: RequestEvent) -> None:
        if event.kind != "answer":
            return
        with self._lock:
            self.requests += 1
            if event.template.startswith("/allocations") and event.method != "GET":
                self.writes += 1

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.requests, self.writes


def start_service(ini: Path) -> tuple[Service, Counted, threading.Thread]:
    svc = Service(lambda: config.load([str(ini)]), install_signals=False)
    counted = Counted()
    svc.metrics.on_request = counted  # type: ignore[method-assign]
    thread = threading.Thread(target=svc.run, daemon=True)
    thread.start()
    wait(lambda: svc.cycles >= 1, 120)
    return svc, counted, thread


def wait(check: Callable[[], Any], timeout: float = 30.0, poll: float = 0.002) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"not visible in Placement after {timeout} s")
        time.sleep(poll)
    return time.monotonic() - start


def ini_for(tmp: Path, placement: Placement, nodename: str, *sections: str) -> Path:
    ini = tmp / f"{nodename}.conf"
    ini.write_text(
        f"[DEFAULT]\nhost = {nodename}\nstate_path = {tmp / nodename}\nupdate_interval = 3600\n"
        "update_jitter = 0\nreserved_host_memory_mb = 0\nreserved_host_disk_mb = 0\n"
        # room for the burst: 100 one-vCPU domains on the test driver's 16 CPUs (3 GiB)
        "cpu_allocation_ratio = 16.0\n"
        f"instances_path = {tmp}\n[metrics]\nlisten =\n"
        f"[placement]\nauth_type = admin_token\nendpoint = {placement.url}\ntoken = admin\n"
        "noauth_roles = admin,service\n" + "".join(f"{s}\n" for s in sections)
    )
    return ini


class Phase:
    """Latencies of one kind of event, and the requests and writes the service made for them."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.requests = 0
        self.writes = 0

    @contextlib.contextmanager
    def event(self, counted: Counted) -> Iterator[None]:
        """Time one event, from just before the change to the result visible in Placement."""
        before = counted.snapshot()
        t0 = time.monotonic()
        yield
        self.seconds.append(time.monotonic() - t0)
        after = counted.snapshot()
        self.requests += after[0] - before[0]
        self.writes += after[1] - before[1]

    def print(self, label: str) -> None:
        n = len(self.seconds)
        ordered = sorted(self.seconds)
        p99 = ordered[max(0, math.ceil(0.99 * n) - 1)]
        print(
            f"{label:<36} n={n:<4} p50 {statistics.median(ordered) * 1000:6.1f} ms  "
            f"p99 {p99 * 1000:6.1f} ms  max {ordered[-1] * 1000:6.1f} ms  "
            f"{self.requests / n:.2f} requests/event  {self.writes / n:.2f} allocation writes/event"
        )
        SUMMARY.append((label, p99))


SUMMARY: list[tuple[str, float]] = []


def libvirt_bench(tmp: Path, placement: Placement, events: int, burst: int) -> None:
    ini = ini_for(
        tmp,
        placement,
        "bench-libvirt",
        "[compute]\ndriver = libvirt",
        "[libvirt]\nconnection_uri = test:///default",
    )
    svc, counted, thread = start_service(ini)
    assert svc.tracker is not None
    conn = svc.tracker.driver.connection.get()  # type: ignore[attr-defined]
    started, stopped = Phase(), Phase()
    for _ in range(events):
        consumer = str(uuid.uuid4())
        with started.event(counted):
            dom = conn.createXML(DOMAIN.format(short=consumer[:8], uuid=consumer), 0)
            wait(lambda c=consumer: placement.allocated(c))
        with stopped.event(counted):
            dom.destroy()
            wait(lambda c=consumer: not placement.allocated(c))
    started.print("libvirt domain started -> allocated")
    stopped.print("libvirt domain destroyed -> removed")
    burst_of_consumers(placement, conn, counted, svc, burst)
    burst_on_few(placement, conn, counted, svc, burst)
    svc.stop()
    thread.join(30)


def _batches(svc: Service) -> float:
    value = svc.metrics.registry.get_sample_value(
        "compute_agent_event_updates_total", {"outcome": "ok"}
    )
    return value or 0.0


def burst_of_consumers(
    placement: Placement, conn: Any, counted: Counted, svc: Service, n: int
) -> None:
    consumers = [str(uuid.uuid4()) for _ in range(n)]
    before, batches = counted.snapshot(), _batches(svc)
    t0 = time.monotonic()
    domains = [conn.createXML(DOMAIN.format(short=c[:8], uuid=c), 0) for c in consumers]
    wait(lambda: all(placement.allocated(c) for c in consumers), 60, 0.01)
    seconds = time.monotonic() - t0
    after = counted.snapshot()
    print(
        f"burst: {n} domains started at once    all visible after {seconds * 1000:.0f} ms; "
        f"{after[0] - before[0]} requests, {after[1] - before[1]} allocation writes "
        f"(target: at most {n}, one per consumer) in {_batches(svc) - batches:.0f} batch(es)"
    )
    for dom in domains:
        dom.destroy()
    wait(lambda: not any(placement.allocated(c) for c in consumers), 60, 0.01)


def burst_on_few(placement: Placement, conn: Any, counted: Counted, svc: Service, n: int) -> None:
    few = [str(uuid.uuid4()) for _ in range(min(10, n))]
    domains = [conn.defineXML(DOMAIN.format(short=c[:8], uuid=c)) for c in few]
    wait(lambda: all(placement.allocated(c) for c in few), 60, 0.01)
    time.sleep(0.3)
    before, batches = counted.snapshot(), _batches(svc)
    t0 = time.monotonic()
    for i in range(n // 2):  # started and stopped: n lifecycle events about len(few) domains
        domains[i % len(few)].create()
        domains[i % len(few)].destroy()
    wait(lambda: not svc.events.pending, 30, 0.01)
    time.sleep(0.3)
    after = counted.snapshot()
    print(
        f"burst: {n} events about {len(few)} domains   settled after "
        f"{(time.monotonic() - t0 - 0.3) * 1000:.0f} ms; {after[0] - before[0]} requests, "
        f"{after[1] - before[1]} allocation writes (target 0: nothing changed) in "
        f"{_batches(svc) - batches:.0f} batch(es)"
    )
    for dom in domains:
        dom.undefine()


def fake_bench(tmp: Path, placement: Placement, events: int) -> None:
    nodename = "bench-fake"
    host = tmp / "fake-host.yaml"
    host.write_text(
        yaml.safe_dump(
            {
                "nodes": [
                    {"nodename": nodename, "cpu": {"vcpus": 16}, "memory_mb": 65536, "disk_gb": 500}
                ]
            }
        )
    )
    ini = ini_for(
        tmp, placement, nodename, "[compute]\ndriver = fake", f"[fake]\nhost_file = {host}"
    )
    svc, counted, thread = start_service(ini)
    driver = svc.tracker.driver  # type: ignore[union-attr]
    added = Phase()
    for i in range(events):
        address = f"0000:{0xA0 + i // 32:02x}:{i % 32:02x}.0"
        name = f"{nodename}_pci_{address.replace(':', '_').replace('.', '_')}"
        with added.event(counted):
            driver.add_device(nodename, PciDevice(address, "10de", "1db4"))  # type: ignore[attr-defined]
            wait(lambda n=name: placement.has_inventory(n))
    added.print("fake device added -> inventory")
    svc.stop()
    thread.join(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200, help="events of each kind")
    parser.add_argument("--burst", type=int, default=100, help="events in a burst")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        placement = Placement(tmp / "placement")
        try:
            libvirt_bench(tmp, placement, args.events, args.burst)
            fake_bench(tmp, placement, args.events)
        finally:
            placement.stop()
    worst = max(p99 for _label, p99 in SUMMARY)
    verdict = "met" if worst < 1 else "MISSED"
    print(f"target p99 < 1000 ms: worst p99 {worst * 1000:.1f} ms -> {verdict}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
