"""Keystone failures named by cause and option (agent/placement/ks_errors.py).

A small keystone stand-in on loopback answers version discovery and
``POST /v3/auth/tokens`` as keystone does (Identity API v3: 401 with an
error body, or 201 with ``X-Subject-Token`` and a token whose catalog has no
placement endpoint); the agent's real client (keystoneauth1 password
plugin, nova's ``[placement]`` block) talks to it.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent import config as agent_config
from agent.placement.errors import PlacementUnavailable
from agent.placement.session import client_from_conf
from tests.functional.conftest import free_port


def keystone(mode: str) -> ThreadingHTTPServer:
    """A keystone stand-in: ``mode`` ``401`` refuses the credentials, ``catalog`` has none."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def reply(self, status: int, body: dict, headers: dict | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            base = f"http://127.0.0.1:{self.server.server_port}/identity/v3/"
            version = {"id": "v3.14", "status": "stable", "links": [{"rel": "self", "href": base}]}
            if self.path.rstrip("/").endswith("/v3"):
                self.reply(200, {"version": version})
            else:
                self.reply(300, {"versions": {"values": [version]}})

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if mode == "401":
                error = {"code": 401, "title": "Unauthorized", "message": "bad password"}
                self.reply(401, {"error": error})
                return
            token = {
                "methods": ["password"],
                "expires_at": "2099-01-01T00:00:00.000000Z",
                "user": {"id": "u", "name": "placement", "domain": {"id": "default"}},
                "project": {"id": "p", "name": "service", "domain": {"id": "default"}},
                "roles": [{"id": "r", "name": "service"}],
                "catalog": [
                    {
                        "type": "compute",
                        "name": "nova",
                        "endpoints": [
                            {"interface": "public", "region": "RegionOne", "url": "http://n/"}
                        ],
                    }
                ],
            }
            self.reply(201, {"token": token}, {"X-Subject-Token": "tok"})

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def client_for(tmp_path, auth_url: str):
    path = tmp_path / "nova.conf"
    path.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[placement]\nauth_type = password\n"
        f"auth_url = {auth_url}\nusername = placement\npassword = secret\n"
        "user_domain_name = Default\nproject_name = service\nproject_domain_name = Default\n"
        "region_name = RegionOne\nrequest_retries = 0\n"
    )
    return client_from_conf(agent_config.load([str(path)]))


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("401", "refused the credentials (401); check [placement] username, password"),
        (
            "catalog",
            "no placement endpoint in keystone's catalog (service_type placement, interfaces "
            "internal,public, region RegionOne); check [placement] service_type",
        ),
    ],
)
def test_keystone_answers_are_named(tmp_path, mode, said):
    server = keystone(mode)
    try:
        client = client_for(tmp_path, f"http://127.0.0.1:{server.server_port}/identity")
        with pytest.raises(PlacementUnavailable) as err:
            client.get("/resource_providers")
    finally:
        server.shutdown()
    assert said in str(err.value)
    assert "secret" not in str(err.value)


def test_unreachable_keystone_is_named(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/identity"
    with pytest.raises(PlacementUnavailable) as err:
        client_for(tmp_path, url).get("/resource_providers")
    assert f"keystone at {url} is unreachable" in str(err.value)
    assert "check [placement] auth_url" in str(err.value)
