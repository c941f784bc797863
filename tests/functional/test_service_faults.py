"""The service under faults: a stalling Placement, SIGTERM mid-request, clock steps, bad input.

Placement is real (embedded or served on loopback) except where a test puts
a stalling listener on loopback in front of nothing: a server that accepts
the connection and never answers, which real Placement cannot be made to be.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from agent.conf import config as agent_config
from agent.placement.report import ReportClient
from agent.service.daemon import Service
from agent.state.store import StateStore, record_age
from agent.tracker.cycle import ResourceTracker
from drivers.host import HostDriver
from tests.helpers.hosts import SMALL_HOST, host_file
from tests.helpers.keystone import keystone
from tests.helpers.names import unique
from tests.helpers.paths import REPO
from tests.helpers.service import agent, last_cycle, run_cli, wait_for, write_conf

FIXTURES = REPO / "tests" / "fixtures"


class StallingListener:
    """Accepts connections on loopback and never answers (a hung Placement or proxy)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.held.append(conn)  # read nothing, answer nothing

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.fixture
def stalling():
    listener = StallingListener()
    yield listener
    listener.close()


def stalling_conf(tmp_path: Path, port: int, **default: object) -> Path:
    return write_conf(
        tmp_path / "c.conf",
        tmp_path / "state",
        f"[placement]\nauth_type = admin_token\nendpoint = http://127.0.0.1:{port}\n"
        "token = admin\ntimeout = 1\nrequest_retries = 1\nretry_max_wait = 0.5",
        **default,
    )


def test_a_placement_that_never_answers_costs_a_bounded_cycle(tmp_path, stalling):
    conf = stalling_conf(tmp_path, stalling.port)
    start = time.monotonic()
    done = run_cli("run", "--once", "--config", str(conf))
    assert done.returncode == 1, done.stderr
    # 2 tries of at most 1 s each, plus one short wait: far from forever.
    assert time.monotonic() - start < 30
    record = last_cycle(tmp_path / "state")
    assert record["status"] == "failed" and "PlacementUnavailable" in str(record)


def test_sigterm_during_a_stalled_request_stops_within_the_stop_timeout(tmp_path, stalling):
    conf = stalling_conf(tmp_path, stalling.port, stop_timeout=2)
    text = conf.read_text().replace("timeout = 1\n", "timeout = 60\n")
    conf.write_text(text)  # a request that would hang for a minute
    log = tmp_path / "run.log"
    proc = agent("run", "--config", str(conf), log=log)
    wait_for("a request in flight", lambda: stalling.held, proc=proc)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, log.read_text()
    assert time.monotonic() - sent < 10  # stop_timeout 2 s, not the 60 s request timeout
    assert "did not finish within 2 s" in log.read_text()


def inprocess_conf(tmp_path: Path, embedded, host: Path) -> Path:
    """A service configuration on the session's Placement, reached as a remote one."""
    ini = tmp_path / "c.conf"
    ini.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\nupdate_interval = 1\n"
        "update_jitter = 0\n[compute]\ndriver = fake\n[metrics]\nlisten =\n"
        f"[fake]\nhost_file = {host}\n"
        f"[placement]\nauth_type = admin_token\nendpoint = {embedded.url}\ntoken = admin\n"
        "noauth_roles = admin,service\n"
    )
    return ini


def test_a_clock_stepped_back_an_hour_changes_no_schedule(tmp_path, embedded, monkeypatch):
    conf_path = inprocess_conf(tmp_path, embedded, host_file(tmp_path, unique("clock")))
    service = Service(lambda: agent_config.load([str(conf_path)]), install_signals=False)
    real_time = time.time
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    wait_for("a first cycle", lambda: service.cycles >= 1)
    monkeypatch.setattr(time, "time", lambda: real_time() - 3600)  # the wall clock steps back
    before = service.cycles
    time.sleep(3.5)
    ran = service.cycles - before
    service.stop()
    thread.join(30)
    assert ran >= 2, f"{ran} cycles in 3.5 s at a 1 s interval after the step"
    record = last_cycle(tmp_path / "state")
    # status's age: never negative, measured on the monotonic clock.
    assert 0 <= record_age(record, real_time() - 3600, time.monotonic()) < 30
    assert record_age({"finished": real_time() + 7200}, real_time(), 0.0) == 0.0


def test_a_sysfs_file_broken_then_fixed_costs_one_cycle_and_no_traceback(
    tmp_path, embedded, caplog
):
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "sysfs" / "two-socket", root, symlinks=True)
    nodename = f"sysfs-{time.monotonic_ns()}"
    conf = agent_config.load(
        [],
        {
            "DEFAULT": {
                "state_path": str(tmp_path / "state"),
                "host": nodename,
                "instances_path": str(tmp_path),
            },
            "compute": {"driver": "host"},
            "host_driver": {"sysfs_root": str(root)},
        },
    )
    store = StateStore(conf.state_path)
    tracker = ResourceTracker(conf, HostDriver(conf), ReportClient(embedded.client(), store), store)
    assert tracker.update_available_resource(True).ok
    meminfo = root / "proc" / "meminfo"
    good = meminfo.read_bytes()
    meminfo.write_bytes(b"MemTotal: lots of kB\n\xff\xfe")
    with caplog.at_level(logging.INFO):
        broken = tracker.update_available_resource(False)
    assert broken.status == "failed"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors and all(r.exc_info is None for r in errors)
    assert any("meminfo" in r.getMessage() for r in errors)
    meminfo.write_bytes(good)
    assert tracker.update_available_resource(False).ok  # no SIGHUP needed


def test_a_reload_with_a_broken_host_file_keeps_the_running_components(tmp_path, embedded):
    host = host_file(tmp_path, unique("reload"), SMALL_HOST)
    good = host.read_text()
    conf_path = inprocess_conf(tmp_path, embedded, host)
    service = Service(lambda: agent_config.load([str(conf_path)]), install_signals=False)
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    wait_for("a good cycle", lambda: service.last_outcome and service.last_outcome.ok)
    host.write_text("nodes: [ {nodename: ")  # garbled
    service.reload()
    time.sleep(2.5)
    assert service.last_outcome is not None and service.last_outcome.ok  # old components run
    host.write_text(good)
    service.reload()
    wait_for("a cycle after the good reload", lambda: service.last_outcome.ok)
    service.stop()
    thread.join(30)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"reserved_host_memory_mb": 99_999_999}, "reserved_host_memory_mb"),
        ({"reserved_host_cpus": 4096}, "reserved_host_cpus"),
    ],
)
def test_a_configuration_that_does_not_fit_the_host_exits_2_with_one_line(tmp_path, extra, named):
    conf = write_conf(tmp_path / "c.conf", tmp_path / "state", **extra)
    done = run_cli("run", "--once", "--config", str(conf))
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("compute-agent")]
    assert len(lines) == 1 and named in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_bad_configuration_files_exit_2_with_one_line(tmp_path):
    state_file = tmp_path / "not-a-dir"
    state_file.write_text("")
    conf = write_conf(tmp_path / "a.conf", state_file)
    done = run_cli("discover", "--config", str(conf))
    assert done.returncode == 2 and "is not a directory" in done.stderr, done.stderr
    latin1 = tmp_path / "b.conf"
    latin1.write_bytes(b"[DEFAULT]\nhost = caf\xe9\n")
    done = run_cli("discover", "--config", str(latin1))
    assert done.returncode == 2 and "not UTF-8" in done.stderr and str(latin1) in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unknown_auth_type_exits_2_with_exactly_one_line(tmp_path):
    # keystoneauth1's loader logged stevedore's "Could not load kerberos-magic" twice before
    # the agent's own line (issue 40): the name is refused before any lookup.
    conf = write_conf(
        tmp_path / "c.conf", tmp_path / "state", "[placement]\nauth_type = kerberos-magic"
    )
    done = run_cli("run", "--once", "--config", str(conf))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("compute-agent run: [placement] auth_type = 'kerberos-magic' ")
    assert "v3password" in line and "admin_token" in line


BIG_HOST_PROVIDERS = 6
"""examples/big-host.yaml, NUMA not modelled: the compute node, 2 PFs, 2 GPUs, 1 PCI device."""


def served_conf(tmp_path: Path, url: str, name: str, **default: object) -> Path:
    return write_conf(
        tmp_path / f"{name}.conf",
        tmp_path / "state",
        f"[placement]\nauth_type = admin_token\nendpoint = {url}\ntoken = admin\n"
        "noauth_roles = admin,service\nrequest_retries = 0",
        **default,
    )


def owned_names(url: str) -> dict[str, bool]:
    """``{provider name: carries the owner trait}`` of every provider Placement holds."""
    from agent.shape.layout import OWNER_TRAIT
    from tests.helpers.placement_http import http_get

    out = {}
    for p in http_get(url, "/resource_providers")["resource_providers"]:
        traits = http_get(url, f"/resource_providers/{p['uuid']}/traits")["traits"]
        out[p["name"]] = OWNER_TRAIT in traits
    return out


def test_sigkill_of_the_agent_mid_cold_sync_then_a_restart_converges(tmp_path, served):
    """A real SIGKILL, at whatever instant the first provider has just appeared."""
    conf = served_conf(tmp_path, served.url, "kill")
    proc = agent("run", "--config", str(conf), log=tmp_path / "killed.log")
    wait_for("the first provider", lambda: owned_names(served.url), proc=proc, timeout=60)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    done = run_cli("run", "--once", "--config", str(conf))
    assert done.returncode == 0, done.stderr
    names = owned_names(served.url)
    assert len(names) == BIG_HOST_PROVIDERS and all(names.values()), names
    assert last_cycle(tmp_path / "state")["status"] == "ok"


def test_placement_stopped_mid_cold_sync_then_back_converges(tmp_path, served):
    conf = served_conf(tmp_path, served.url, "stop", update_interval=1)
    proc = agent("run", "--config", str(conf), log=tmp_path / "run.log")
    try:
        wait_for("the first provider", lambda: owned_names(served.url), proc=proc, timeout=60)
        served.stop()
        served.start()
        state = tmp_path / "state"

        def converged() -> bool:
            names = owned_names(served.url)
            record = last_cycle(state) or {}
            ours = len(names) == BIG_HOST_PROVIDERS and all(names.values())
            return ours and record.get("status") == "ok"

        wait_for("a converged cycle", converged, proc=proc, timeout=120)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_keystone_refusing_the_credentials_is_named_with_the_options_to_fix(tmp_path):
    server = keystone("401")
    try:
        conf = write_conf(
            tmp_path / "c.conf",
            tmp_path / "state",
            f"[placement]\nauth_type = v3password\n"
            f"auth_url = http://127.0.0.1:{server.server_port}/identity\n"
            "username = compute-agent\npassword = wrong-secret-123\nproject_name = service\n"
            "user_domain_id = default\nproject_domain_id = default\nrequest_retries = 0",
        )
        done = run_cli("run", "--once", "--config", str(conf))
    finally:
        server.shutdown()
    assert done.returncode == 1
    error = json.dumps(last_cycle(tmp_path / "state"))
    assert "refused the credentials (401" in error and "Keystone at" in error
    assert "[placement]" in error and "password" in error
    assert "wrong-secret-123" not in error + done.stderr + done.stdout


def test_status_names_why_the_last_cycle_is_stale(tmp_path):
    conf = write_conf(tmp_path / "c.conf", tmp_path / "state")
    assert run_cli("run", "--once", "--config", str(conf)).returncode == 0
    time.sleep(1.1)
    stopped = run_cli("status", "--config", str(conf), "--max-age", "1")
    assert stopped.returncode == 1 and "is not running" in stopped.stdout, stopped.stdout
    # The record of a service that is still running (this test's own pid): wedged.
    record = last_cycle(tmp_path / "state")
    record["pid"] = os.getpid()
    (tmp_path / "state" / "last_cycle.json").write_text(json.dumps(record))
    wedged = run_cli("status", "--config", str(conf), "--max-age", "1")
    assert wedged.returncode == 1 and "wedged" in wedged.stdout, wedged.stdout
    # A file in place of the state directory: refused, naming it.
    shutil.rmtree(tmp_path / "state")
    (tmp_path / "state").write_text("")
    gone = run_cli("status", "--config", str(conf), "--max-age", "1")
    assert gone.returncode == 2 and "is not a directory" in gone.stderr, gone.stderr
