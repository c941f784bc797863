"""``compute-agent run`` and ``status`` as processes, against a real Placement.

Each test starts the real console entry point (``python -m agent.cli.main``) with
the fake driver; Placement is either embedded in that process (its own
SQLite file) or the ``served`` fixture on loopback, which a test can stop and
start again.
"""

from __future__ import annotations

import json
import signal
import socket
import time

import requests

from tests.helpers.net import free_port
from tests.helpers.placement_http import http_get
from tests.helpers.service import agent, last_cycle, run_cli, stop, wait_for, write_conf


def test_run_once_then_status_codes(tmp_path):
    state = tmp_path / "state"
    conf = write_conf(tmp_path / "c.conf", state)
    done = run_cli("run", "--once", "--config", str(conf))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cycle ok: 1 node(s), 6 providers, allocations written 4" in done.stderr
    ok = run_cli("status", "--config", str(conf))
    assert ok.returncode == 0 and ok.stdout.startswith("OK"), ok.stdout
    time.sleep(1.1)
    stale = run_cli("status", "--config", str(conf), "--max-age", "1")
    assert stale.returncode == 1 and stale.stdout.startswith("STALE"), stale.stdout
    record = last_cycle(state)
    record["ok"] = False
    record["nodes"][0].update(ok=False, error="PlacementUnavailable: connection refused")
    (state / "last_cycle.json").write_text(json.dumps(record))
    failed = run_cli("status", "--config", str(conf))
    assert failed.returncode == 2, failed.stdout
    assert "big-host: PlacementUnavailable: connection refused" in failed.stdout
    empty = write_conf(tmp_path / "e.conf", tmp_path / "nothing")
    unknown = run_cli("status", "--config", str(empty))
    assert unknown.returncode == 3 and unknown.stdout.startswith("UNKNOWN")


def test_sigterm_mid_cycle_lets_the_cycle_finish_and_exits_0(tmp_path):
    state = tmp_path / "state"
    conf = write_conf(tmp_path / "c.conf", state, "[fake]\ndiscovery_delay = 3")
    log = tmp_path / "run.log"
    proc = agent("run", "--config", str(conf), log=log)
    wait_for("the scheduler", lambda: "compute-agent running" in log.read_text(), proc=proc)
    time.sleep(0.5)  # the start-up cycle is now inside the driver's 3 s discovery
    assert last_cycle(state) is None
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log.read_text()
    assert time.monotonic() - sent > 1.5  # it waited for the cycle
    record = last_cycle(state)
    assert record and record["ok"] and record["startup"], log.read_text()
    assert "SIGTERM: stopping after the current cycle" in log.read_text()


def test_placement_down_for_several_cycles_then_back(tmp_path, served):
    state = tmp_path / "state"
    port = free_port()
    conf = write_conf(
        tmp_path / "c.conf",
        state,
        f"[placement]\nauth_type = admin_token\nendpoint = {served.url}\ntoken = admin\n"
        "noauth_roles = admin,service\nrequest_retries = 0",
        f"[metrics]\nlisten = 127.0.0.1:{port}",
        update_interval=1,
    )
    log = tmp_path / "run.log"
    proc = agent("run", "--config", str(conf), log=log)
    try:
        wait_for("a first good cycle", lambda: (last_cycle(state) or {}).get("ok"), proc=proc)
        metrics_url = f"http://127.0.0.1:{port}/metrics"

        def failed_cycles() -> float:
            text = requests.get(metrics_url, timeout=5).text
            for line in text.splitlines():
                if line.startswith(
                    'compute_agent_cycles_total{nodename="big-host",outcome="failed"}'
                ):
                    return float(line.split()[-1])
            return 0.0

        served.stop()
        wait_for("three failed cycles", lambda: failed_cycles() >= 3, proc=proc)
        assert not last_cycle(state)["ok"]
        assert "PlacementUnavailable" in json.dumps(last_cycle(state))
        served.start()
        wait_for("a good cycle again", lambda: (last_cycle(state) or {}).get("ok"), proc=proc)
        text = requests.get(metrics_url, timeout=5).text
        assert 'compute_agent_placement_requests_total{method="GET",status="transport"}' in text
        assert 'compute_agent_placement_requests_total{method="GET",status="200"}' in text
        assert "compute_agent_last_success_timestamp_seconds" in text
    finally:
        assert stop(proc) == 0, log.read_text()
    # Nothing lost: every instance still holds its allocation.
    consumer = http_get(served.url, "/allocations/4f7d1e2a-5b6c-4d8e-9f01-a2b3c4d5e604")
    assert sum(r for a in consumer["allocations"].values() for r in a["resources"].values())


def test_reshape_needed_outside_startup_stops_the_service_with_exit_4(tmp_path):
    """SIGHUP with NUMA modelling turned on: the tree must change shape mid-life."""
    state = tmp_path / "state"
    conf = write_conf(tmp_path / "c.conf", state, update_interval=3600)
    log = tmp_path / "run.log"
    proc = agent("run", "--config", str(conf), log=log)
    wait_for("the start-up cycle", lambda: (last_cycle(state) or {}).get("ok"), proc=proc)
    write_conf(conf, state, "[numa]\nmodel_in_placement = true", update_interval=3600)
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=60) == 4, log.read_text()
    assert "CRITICAL" in log.read_text() and "restart the service" in log.read_text()
    status = run_cli("status", "--config", str(conf))
    assert status.returncode == 2 and "fatal" in status.stdout
    # The restart systemd would do: the start-up cycle reshapes.
    again = run_cli("run", "--once", "--config", str(conf))
    assert again.returncode == 0, again.stderr


def test_systemd_notify_ready_status_watchdog_reload_stopping(tmp_path):
    """The sd_notify datagram protocol, read from a socket the test binds as systemd would."""
    state = tmp_path / "state"
    conf = write_conf(tmp_path / "c.conf", state, update_interval=3600)
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.2)
    messages: list[str] = []

    def drain() -> list[str]:
        while True:
            try:
                messages.append(sock.recv(4096).decode())
            except TimeoutError:
                return messages

    log = tmp_path / "run.log"
    proc = agent(
        "run",
        "--config",
        str(conf),
        env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000000"},
        log=log,
    )
    try:
        wait_for("READY=1", lambda: "READY=1" in drain(), proc=proc)
        status = [m for m in messages if m.startswith("STATUS=")]
        assert status and status[0].startswith("STATUS=cycle ok")
        assert messages.index(status[0]) < messages.index("READY=1")  # ready after start-up
        wait_for("watchdog pings", lambda: drain().count("WATCHDOG=1") >= 3, proc=proc)
        conf.write_text("[DEFAULT]\nupdate_interval = -5\n")  # broken: kept running
        proc.send_signal(signal.SIGHUP)
        wait_for("RELOADING=1", lambda: "RELOADING=1" in drain(), proc=proc)
        wait_for("READY=1 again", lambda: drain().count("READY=1") >= 2, proc=proc)
        assert proc.poll() is None
        assert "configuration not reloaded, the previous one stays" in log.read_text()
        assert stop(proc) == 0, log.read_text()
        assert "STOPPING=1" in drain()
    finally:
        stop(proc)
        sock.close()
