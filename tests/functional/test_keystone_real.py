"""The agent against a real Keystone 30 and a Keystone-backed Placement 16 (issue 35).

One Keystone (SQLite, fernet) and one Placement with ``[api] auth_strategy = keystone``
for the whole run (``conftest.py``'s ``keystone``, tests/helpers/keystone_server.py), each
also served over https by a throwaway CA. The agent is configured with nova's
``[placement]`` options (``auth_type = password``, the catalog, no ``endpoint_override``);
every failure is asserted by its message: the service at fault with its URL, the cause
and the option that fixes it.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.conf import config as agent_config
from agent.placement.client import PlacementClient
from agent.placement.errors import (
    Forbidden,
    KeystoneFailure,
    PlacementTLSError,
    PlacementUnavailable,
)
from agent.placement.session import client_from_conf
from agent.service.metrics import AgentMetrics
from tests.helpers.keystone_server import AGENT_PASSWORD, MEMBER_PASSWORD, TOKEN_LIFE, Keystone
from tests.helpers.net import free_port
from tests.helpers.paths import EXAMPLES, REPO
from tests.helpers.service import last_cycle, run_cli, write_conf

# One Keystone for the run: under pytest-xdist every test of this module goes to one worker.
pytestmark = pytest.mark.xdist_group("keystone")


@pytest.fixture(autouse=True)
def real_https():
    """urllib3's own HTTPS connections for these tests, whatever ran before in this process.

    The session's in-process Placement (``embedded``) routes requests through
    wsgi-intercept, which replaces urllib3's connection classes process-wide; its HTTPS
    class cannot pass a request to a real TLS server (``HTTPSConnection.__init__() got an
    unexpected keyword argument 'cert_reqs'``). These tests speak TLS to a real Keystone
    and Placement, so the real class is put back for each and the intercept after it.
    """
    from urllib3.connection import HTTPSConnection
    from urllib3.connectionpool import HTTPSConnectionPool

    held = HTTPSConnectionPool.ConnectionCls
    HTTPSConnectionPool.ConnectionCls = HTTPSConnection
    try:
        yield
    finally:
        HTTPSConnectionPool.ConnectionCls = held


def placement_section(keystone: Keystone, **options: object) -> str:
    """nova.conf's ``[placement]`` for the agent's service user, ``options`` replacing any."""
    values: dict[str, object] = {
        "auth_type": "password",
        "auth_url": keystone.url + "/v3",
        "username": keystone.users.agent,
        "password": AGENT_PASSWORD,
        "project_name": "service",
        "user_domain_name": "Default",
        "project_domain_name": "Default",
        "region_name": "RegionOne",
        "request_retries": 0,
    }
    values.update(options)
    lines = [f"{k} = {v}" for k, v in values.items() if v is not None]
    return "[placement]\n" + "\n".join(lines) + "\n"


def client_for(tmp_path, keystone: Keystone, **options: object) -> PlacementClient:
    path = tmp_path / "nova.conf"
    section = placement_section(keystone, **options)
    path.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n{section}")
    return client_from_conf(agent_config.load([str(path)]))


def failure(client: PlacementClient, kind: type[Exception] = PlacementUnavailable) -> str:
    with pytest.raises(kind) as err:
        client.get("/resource_providers")
    return str(err.value)


# -- the catalog path ----------------------------------------------------------------


def test_the_catalog_gives_placement_and_a_token_that_expires_is_renewed(tmp_path, keystone):
    client = client_for(tmp_path, keystone)
    assert "resource_providers" in client.get("/resource_providers")
    assert client.microversion == "1.39"
    assert client.transport.endpoint == keystone.placement_url  # the catalog's, RegionOne
    first = client.adapter.auth.auth_ref.auth_token
    time.sleep(TOKEN_LIFE - 120 + 0.2)  # it expires within 120 s: keystoneauth fetches another
    assert "resource_providers" in client.get("/resource_providers")
    assert client.adapter.auth.auth_ref.auth_token != first
    assert client.keystone_failures() == 0


def test_rotated_fernet_keys_refuse_the_token_and_a_new_one_is_fetched(tmp_path, keystone):
    client = client_for(tmp_path, keystone)
    assert client.microversion == "1.39"
    client.adapter.invalidate()
    first = client.adapter.get_token()  # a fresh token, seconds from its renewal
    keystone.rotate_keys()  # the key that signed ``first`` is gone: Placement answers 401
    # keystoneauth would not renew it yet: only Placement's 401 makes the client fetch another
    assert not client.adapter.auth.auth_ref.will_expire_soon(120)
    assert "resource_providers" in client.get("/resource_providers")
    assert client.adapter.auth.auth_ref.auth_token != first
    assert client.statuses == {("GET", "200"): 2} and client.keystone_failures() == 0


# -- credentials and roles ------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"password": "not-the-password-5c1"},
        {"username": "nobody-here"},
        {"project_name": "no-such-project"},
    ],
    ids=["wrong password", "unknown user", "wrong project"],
)
def test_refused_credentials_name_keystone_and_the_options(tmp_path, keystone, options):
    client = client_for(tmp_path, keystone, request_retries=3, **options)
    said = failure(client, KeystoneFailure)
    assert said.startswith(f"Keystone at {keystone.url}/v3 refused the credentials (401")
    assert "check [placement] username, password, project_name" in said
    assert "not-the-password" not in said and AGENT_PASSWORD not in said
    # never sent to Placement, never retried, counted apart
    assert client.total_requests() == 0 and client.keystone_refused == {"credentials": 1}


def test_a_member_only_user_is_told_the_role_placement_wants(tmp_path, keystone):
    client = client_for(
        tmp_path, keystone, username=keystone.users.member, password=MEMBER_PASSWORD
    )
    said = failure(client, Forbidden)
    assert "placement GET /resource_providers: 403" in said
    assert "default policy placement:resource_providers:list wants role admin or service" in said
    assert "the service role" in said and "[placement] username" in said
    assert client.keystone_failures() == 0


def test_a_wrong_service_name_is_named(tmp_path, keystone):
    said = failure(client_for(tmp_path, keystone, service_name="nova-placement"), KeystoneFailure)
    assert "no placement endpoint in Keystone's catalog" in said
    assert "[placement] service_name = nova-placement matches none of its names (placement)" in (
        said
    )
    assert f"internal in RegionOne (placement) {keystone.placement_url}" in said


# -- Keystone down ---------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["/v3", ""], ids=["versioned", "unversioned"])
def test_keystone_down_is_keystone_not_placement_and_not_retried(tmp_path, keystone, suffix):
    url = f"http://127.0.0.1:{free_port()}{suffix}"
    client = client_for(tmp_path, keystone, auth_url=url, request_retries=3, connect_retries=3)
    metrics = AgentMetrics()
    client.observers.append(metrics.on_request)
    start = time.monotonic()
    said = failure(client, KeystoneFailure)
    assert time.monotonic() - start < 2  # one try: no backoff on Keystone
    assert said.startswith(f"Keystone at {url} is unreachable")
    assert "check [placement] auth_url" in said
    assert "Placement" not in said and "no usable answer" not in said
    assert client.total_requests() == 0 and client.keystone_refused == {"unreachable": 1}
    value = metrics.registry.get_sample_value
    assert value("compute_agent_keystone_failures_total", {"method": "GET", "cause": "unreachable"})
    assert not value(
        "compute_agent_placement_requests_total", {"method": "GET", "status": "transport"}
    )


# -- TLS -----------------------------------------------------------------------------------


def test_keystone_over_tls_needs_cafile(tmp_path, keystone):
    auth_url = keystone.tls_url + "/v3"
    said = failure(client_for(tmp_path, keystone, auth_url=auth_url), KeystoneFailure)
    assert said.startswith(f"Keystone at {auth_url}: certificate verify failed")
    assert "certificate verify failed (unable to get local issuer certificate)" in said
    assert "set [placement] cafile" in said
    plain = f"https://127.0.0.1:{keystone.port}/v3"  # https to Keystone's plain http port
    said = failure(client_for(tmp_path, keystone, auth_url=plain), KeystoneFailure)
    assert said.startswith(f"Keystone at {plain}: TLS failed (wrong version number)")
    assert "check the scheme of [placement] auth_url" in said
    client = client_for(tmp_path, keystone, auth_url=auth_url, cafile=keystone.cafile)
    assert "resource_providers" in client.get("/resource_providers")


def test_placement_over_tls_needs_cafile_and_is_named(tmp_path, keystone):
    said = failure(client_for(tmp_path, keystone, region_name="RegionTLS"), PlacementTLSError)
    assert said.startswith(f"Placement at {keystone.placement_tls_url}: certificate verify failed")
    assert "set [placement] cafile" in said and "Keystone" not in said
    client = client_for(tmp_path, keystone, region_name="RegionTLS", cafile=keystone.cafile)
    assert "resource_providers" in client.get("/resource_providers")
    assert client.transport.endpoint == keystone.placement_tls_url


# -- nova's [placement] options ------------------------------------------------------------


def test_nova_version_options_are_ignored_as_nova_ignores_them(tmp_path, keystone, caplog):
    client = client_for(tmp_path, keystone, min_version="1.0", max_version="1.39")
    with caplog.at_level(logging.WARNING, logger="agent.placement.session"):
        client = client_for(tmp_path, keystone, version="1.0")
    assert "[placement] version ignored, as nova 34 ignores them" in caplog.text
    assert "resource_providers" in client.get("/resource_providers")
    client = client_for(tmp_path, keystone, min_version="1.0", max_version="1.39")
    assert "resource_providers" in client.get("/resource_providers")


def test_connect_retries_are_honoured_with_their_delay(tmp_path, keystone):
    down = f"http://127.0.0.1:{free_port()}"
    client = client_for(
        tmp_path, keystone, endpoint_override=down, connect_retries=2, connect_retry_delay=0.3
    )
    start = time.monotonic()
    said = failure(client)
    assert time.monotonic() - start >= 0.6
    assert client.statuses[("GET", "transport")] == 3
    assert said.startswith(f"Placement at {down}: GET /: no usable answer")  # the first request
    assert "after 3 tries" in said and f"Unable to establish connection to GET {down}/" in said


def unavailable_placement() -> ThreadingHTTPServer:
    """Placement's 503 when keystonemiddleware cannot reach Keystone, as Placement writes it.

    A stand-in: producing it for real needs a second Placement whose Keystone is down.
    """
    body = json.dumps(
        {
            "errors": [
                {
                    "status": 503,
                    "title": "Service Unavailable",
                    "detail": "The server is currently unavailable. Please try again at a later "
                    "time.\n\n The Keystone service is temporarily unavailable.  ",
                    "request_id": "req-7d9c0b6e-2f1f-4a0c-9d8e-2a6d1c3e4f50",
                }
            ]
        }
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_status_code_retries_are_honoured_and_the_503_text_is_whole(tmp_path, keystone):
    server = unavailable_placement()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        client = client_for(
            tmp_path,
            keystone,
            endpoint_override=url,
            status_code_retries=2,
            status_code_retry_delay=0.2,
        )
        start = time.monotonic()
        said = failure(client)
    finally:
        server.shutdown()
    assert time.monotonic() - start >= 0.4
    assert client.statuses[("GET", "503")] == 3
    assert "after 3 tries (last: HTTP 503: The server is currently unavailable." in said
    assert said.count("The Keystone service is temporarily unavailable.") == 1


# -- the service: counted apart, said once ----------------------------------------------------


def small_host(path):
    path.write_text(path.read_text().replace("big-host.yaml", "small-host.yaml"))
    return path


def test_a_cycle_through_the_catalog_and_one_keystone_refused(tmp_path, keystone):
    state = tmp_path / "state"
    good = small_host(write_conf(tmp_path / "good.conf", state, placement_section(keystone)))
    assert (EXAMPLES / "small-host.yaml").exists()
    done = run_cli("run", "--once", "--config", str(good))
    assert done.returncode == 0, done.stderr[-2000:]
    record = last_cycle(state)
    assert record["status"] == "ok" and record["requests"] > 0
    assert record["keystone_refused"] == 0

    down = f"http://127.0.0.1:{free_port()}/v3"
    bad = small_host(
        write_conf(tmp_path / "bad.conf", state, placement_section(keystone, auth_url=down))
    )
    done = run_cli("run", "--once", "--config", str(bad))
    assert done.returncode == 1
    record = last_cycle(state)
    assert record["requests"] == 0 and record["keystone_refused"] >= 1
    assert f"({record['keystone_refused']} more failed at Keystone, not sent)" in record["summary"]
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert errors, done.stderr[-2000:]
    for line in errors:  # one ERROR line says a thing once
        assert line.count(f"Keystone at {down} is unreachable") <= 1, line
        assert "agent.placement.errors" not in line, line
    assert any(f"Keystone at {down} is unreachable" in line for line in errors)
    status = run_cli("status", "--config", str(bad))
    assert "failed at Keystone, not sent" in status.stdout + status.stderr
    everything = done.stdout + done.stderr + json.dumps(record) + status.stdout
    assert AGENT_PASSWORD not in everything


# -- nova 34 as the judge -----------------------------------------------------------------------


def nova_does(tmp_path, keystone: Keystone, **options: object) -> dict:
    """What nova 34's own client does with the same ``[placement]`` (nova_placement_probe.py)."""
    path = tmp_path / "nova-only.conf"
    options = {"request_retries": None, **options}  # the agent's own option: not nova's
    path.write_text(placement_section(keystone, **options))
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.nova_placement_probe", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_nova_reads_the_same_placement_section_the_same_way(tmp_path, keystone):
    """nova's version options ignored, its catalog endpoint, its connect retries: the agent's
    reading of the same section matches what nova 34's client does."""
    nova = nova_does(tmp_path, keystone, version="1.0")
    client = client_for(tmp_path, keystone, version="1.0")
    client.get("/resource_providers")
    assert nova["status"] == 200
    assert nova["endpoint"].rstrip("/") == client.transport.endpoint == keystone.placement_url

    down = f"http://127.0.0.1:{free_port()}"
    retries = {"endpoint_override": down, "connect_retries": 2, "connect_retry_delay": 0.3}
    nova = nova_does(tmp_path, keystone, **retries)
    assert nova["error"] == "ConnectFailure" and nova["seconds"] >= 0.6  # two waits of 0.3 s
    client = client_for(tmp_path, keystone, **retries)
    with pytest.raises(PlacementUnavailable):
        client.get("/resource_providers")
    assert client.statuses[("GET", "transport")] == 3  # a try and nova's two retries
