"""The agent's logs as an operator meets them: JSON, journald, request ids, no secrets.

Each test runs the real agent process (``python -m agent.cli.main``) with the fake
driver, configured through ``[DEFAULT]`` oslo.log options exactly as
nova-compute is.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.helpers.net import free_port
from tests.helpers.paths import REPO
from tests.helpers.service import agent, last_cycle, stop, wait_for, write_conf


def test_json_log_file_with_one_request_id_per_cycle(tmp_path):
    state = tmp_path / "state"
    log_file = tmp_path / "agent.log"
    conf = write_conf(
        tmp_path / "c.conf",
        state,
        use_json="true",
        log_file=log_file,
        update_interval=1,
    )
    proc = agent("run", "--config", str(conf))
    try:

        def cycles() -> list[dict]:
            if not log_file.exists():
                return []
            lines = [json.loads(line) for line in log_file.read_text().splitlines() if line]
            return [r for r in lines if r["message"].startswith("cycle ok")]

        wait_for("three cycles", lambda: len(cycles()) >= 3, proc=proc)
    finally:
        assert stop(proc) == 0
    records = [json.loads(line) for line in log_file.read_text().splitlines() if line]
    assert all({"message", "levelname", "name", "context"} <= set(r) for r in records)
    done = [r for r in records if r["message"].startswith("cycle ok")]
    ids = [r["context"]["request_id"] for r in done]
    assert all(i and i.startswith("req-") for i in ids), ids
    assert len(set(ids)) == len(ids), "each cycle has its own request id"
    # The start-up cycle's other lines (allocations written) carry its id.
    first = [r for r in records if r["context"].get("request_id") == ids[0]]
    assert any("allocations written together" in r["message"] for r in first)
    # Library noise stays out at the default level (the embedded Placement's requests).
    assert not [r for r in records if r["name"].startswith(("placement", "alembic"))]


# -- journald ---------------------------------------------------------------


def parse_journal_datagram(data: bytes) -> dict[str, str]:
    """systemd's native journal protocol: ``KEY=value\\n`` or ``KEY\\n<le64 size><bytes>\\n``."""
    fields: dict[str, str] = {}
    i = 0
    while i < len(data):
        end = data.index(b"\n", i)
        line = data[i:end]
        if b"=" in line:
            key, _, value = line.partition(b"=")
            fields[key.decode()] = value.decode()
            i = end + 1
        else:
            (size,) = struct.unpack("<Q", data[end + 1 : end + 9])
            fields[line.decode()] = data[end + 9 : end + 9 + size].decode()
            i = end + 9 + size + 1
    return fields


def run_with_journal(tmp_path: Path, conf: Path, env: dict[str, str], stderr) -> list[dict]:
    """``run --once`` with /run/systemd/journal/socket bound by the test.

    libsystemd sends to the fixed path /run/systemd/journal/socket; the agent
    runs in a mount namespace of its own (unshare) where a fresh /run holds
    the test's directory at that path, so no journald of the machine is
    touched.
    """
    unshare = shutil.which("unshare")
    assert unshare, "unshare (util-linux) is required"
    sockdir = tmp_path / "journal"
    sockdir.mkdir()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sockdir / "socket"))
    sock.settimeout(0.5)
    script = (
        "mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal && "
        f'mount --bind "{sockdir}" /run/systemd/journal && exec "$@"'
    )
    command = [sys.executable, "-m", "agent.cli.main", "run", "--once", "--config", str(conf)]
    proc = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh", *command],
        cwd=REPO,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        timeout=120,
        check=False,
    )
    if proc.returncode not in (0, 1):
        stderr.flush()
        text = Path(stderr.name).read_text() if hasattr(stderr, "name") else ""
        raise AssertionError(
            f"the agent did not run in its own mount namespace (exit {proc.returncode}); "
            f"unshare --mount needs CAP_SYS_ADMIN (root): {text[-2000:]}"
        )
    assert proc.returncode == 1, "the cycle should fail (Placement is down)"
    messages = []
    try:
        while True:
            messages.append(parse_journal_datagram(sock.recv(1 << 20)))
    except TimeoutError:
        pass
    finally:
        sock.close()
    return messages


def placement_down(tmp_path: Path, *default: str, **options: object) -> Path:
    return write_conf(
        tmp_path / "c.conf",
        tmp_path / "state",
        f"[placement]\nauth_type = admin_token\nendpoint = http://127.0.0.1:{free_port()}\n"
        "token = admin\nrequest_retries = 0",
        **options,
    )


def test_use_journal_sends_each_line_with_its_priority_and_request_id(tmp_path):
    conf = placement_down(tmp_path, use_journal="true", use_stderr="false")
    stderr = tmp_path / "stderr"
    with open(stderr, "w") as err:
        messages = run_with_journal(tmp_path, conf, {}, err)
    by_priority: dict[str, list[str]] = {}
    for m in messages:
        by_priority.setdefault(m["PRIORITY"], []).append(m["MESSAGE"])
    # syslog priorities: 3 error, 4 warning (journalctl -p warning shows both).
    assert any("node big-host: cycle failed" in text for text in by_priority["3"]), by_priority
    assert any("cycle failed for big-host" in text for text in by_priority["4"]), by_priority
    cycle = [m for m in messages if "cycle failed for big-host" in m["MESSAGE"]]
    assert cycle[0]["REQUEST_ID"].startswith("req-")
    assert cycle[0]["SYSLOG_IDENTIFIER"]
    assert cycle[0]["LOGGER_NAME"] == "agent.tracker.cycle"
    assert stderr.read_text() == ""  # use_stderr = false: the journal only


def test_under_systemd_stderr_that_is_the_journal_is_replaced_by_native_logging(tmp_path):
    """``$JOURNAL_STREAM`` names stderr: systemd would log each line at priority info."""
    conf = placement_down(tmp_path)
    stderr = tmp_path / "stderr"
    with open(stderr, "w") as err:
        st = os.fstat(err.fileno())
        env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        messages = run_with_journal(tmp_path, conf, env, err)
    assert {m["PRIORITY"] for m in messages} >= {"3", "4"}
    assert stderr.read_text() == ""


# -- secrets ----------------------------------------------------------------

PASSWORD = "Pa55w0rd-DO-NOT-LOG-7f3a"
TOKEN = "tOkEn-DO-NOT-LOG-91c2"


class FakeKeystone(BaseHTTPRequestHandler):
    """Keystone v3 as keystoneauth's password plugin talks to it: one token, one catalog."""

    placement_url = ""
    seen_password = False

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        user = body["auth"]["identity"]["password"]["user"]
        type(self).seen_password = user["password"] == PASSWORD
        endpoints = [
            {"id": i, "interface": i, "region": "RegionOne", "region_id": "RegionOne",
             "url": self.placement_url}
            for i in ("public", "internal")
        ]  # fmt: skip
        token = {
            "token": {
                "methods": ["password"],
                "expires_at": "2099-01-01T00:00:00.000000Z",
                "issued_at": "2020-01-01T00:00:00.000000Z",
                "user": {"id": "u1", "name": "compute-agent", "domain": {"id": "default"}},
                "project": {"id": "p1", "name": "service", "domain": {"id": "default"}},
                "roles": [{"id": "r1", "name": "service"}],
                "catalog": [
                    {"id": "s1", "type": "placement", "name": "placement", "endpoints": endpoints}
                ],
            }
        }
        data = json.dumps(token).encode()
        self.send_response(201)
        self.send_header("X-Subject-Token", TOKEN)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def test_no_password_or_token_in_any_log_at_debug(tmp_path, served):
    """Keystone password auth, then Placement with the token, everything at DEBUG."""
    FakeKeystone.placement_url = served.url
    keystone = ThreadingHTTPServer(("127.0.0.1", 0), FakeKeystone)
    threading.Thread(target=keystone.serve_forever, daemon=True).start()
    log_file = tmp_path / "agent.log"
    try:
        conf = write_conf(
            tmp_path / "c.conf",
            tmp_path / "state",
            f"[placement]\nauth_type = v3password\n"
            f"auth_url = http://127.0.0.1:{keystone.server_address[1]}/v3\n"
            f"username = compute-agent\npassword = {PASSWORD}\nproject_name = service\n"
            "user_domain_id = default\nproject_domain_id = default\n"
            "noauth_roles = admin,service\nrequest_retries = 0",
            debug="true",
            log_file=log_file,
            use_stderr="true",
            # every library at DEBUG too, keystoneauth's request logging included
            default_log_levels="keystoneauth=DEBUG,urllib3=DEBUG,stevedore=DEBUG",
        )
        proc = subprocess.run(
            [sys.executable, "-m", "agent.cli.main", "run", "--once", "--config", str(conf)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        keystone.shutdown()
    assert FakeKeystone.seen_password, "the password plugin never authenticated"
    assert proc.returncode == 0, proc.stderr
    assert (last_cycle(tmp_path / "state") or {}).get("ok")
    text = log_file.read_text()
    assert "DEBUG keystoneauth" in text  # keystoneauth logged its work (the token)
    # Placement's requests: method and URL, never the headers that carry the token.
    assert "DEBUG agent.placement.transport" in text and "REQ: GET" in text
    assert "placement.password" in text  # the configuration dump names the option ...
    for output in (text, proc.stderr, proc.stdout):
        assert PASSWORD not in output  # ... never its value
        assert TOKEN not in output
