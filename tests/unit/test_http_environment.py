"""The HTTP session reads the proxy environment once per host (agent/placement/http.py).

The proxy cases run the agent's client (keystoneauth, ``requests``) in a
process of its own against a real HTTP server on loopback standing in for
the proxy: what arrives there is what a proxy would see (an absolute URI in
the request line).
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import requests

from agent.placement.http import environment_once

REPO = Path(__file__).resolve().parents[2]


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.path)
        body = b'{"versions": [{"id": "v1.0", "max_version": "1.39", "min_version": "1.0"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[str]:
    """An HTTP server on loopback that records the request lines it gets."""
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _merge(session: requests.Session, url: str) -> dict[str, object]:
    return session.merge_environment_settings(url, {}, None, None, None)


def test_same_answers_as_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "placement.internal")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/cloud-ca.pem")
    plain, once = requests.Session(), environment_once(requests.Session())
    for url in (
        "http://placement.internal:8778/resource_providers",
        "http://placement.example/resource_providers",
        "https://keystone.example/v3/auth/tokens",
    ):
        assert _merge(once, url) == _merge(plain, url)
    assert _merge(once, "http://placement.example/x")["proxies"]["http"] == (  # type: ignore[index]
        "http://proxy.example:3128"
    )
    assert _merge(once, "https://keystone.example/")["verify"] == "/etc/ssl/cloud-ca.pem"


def test_environment_read_once_per_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    session = requests.Session()
    calls: list[str] = []
    real = session.merge_environment_settings

    def counted(url: str, *args: object) -> dict[str, object]:
        calls.append(url)
        return real(url, *args)

    session.merge_environment_settings = counted  # type: ignore[method-assign]
    environment_once(session)
    for i in range(5):
        _merge(session, f"http://placement.example/allocations/{i}")
    _merge(session, "http://other.example/")
    assert calls == ["http://placement.example/allocations/0", "http://other.example/"]
    # a later change of the environment is not seen for a host already reached
    monkeypatch.setenv("HTTP_PROXY", "http://elsewhere.example:3128")
    assert _merge(session, "http://placement.example/y")["proxies"]["http"] == (  # type: ignore[index]
        "http://proxy.example:3128"
    )


def test_answers_are_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    session = environment_once(requests.Session())
    first = _merge(session, "http://placement.example/")
    first["proxies"]["http"] = "changed"  # type: ignore[index]
    assert _merge(session, "http://placement.example/")["proxies"]["http"] == (  # type: ignore[index]
        "http://proxy.example:3128"
    )


CLIENT = """
import sys
from agent.placement.client import PlacementClient
client = PlacementClient.for_endpoint(sys.argv[1], retries=0)
client.get("/resource_providers")
client.get("/resource_providers")
"""


def run_client(endpoint: str, **env: str) -> None:
    """The agent's client in a process of its own, with ``env`` as its environment's proxies.

    A separate process: the test session's in-process Placement patches
    urllib3's connection classes (wsgi-intercept), which cannot speak to a proxy.
    """
    clean = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, endpoint],
        env={**clean, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_client_goes_through_the_proxy_from_the_environment(proxy: str) -> None:
    run_client("http://placement.invalid:8778", HTTP_PROXY=proxy)
    # every request (the root document included) went to the proxy, by absolute URI
    assert _Recorder.seen[-2:] == ["http://placement.invalid:8778/resource_providers"] * 2
    assert all(p.startswith("http://placement.invalid:8778/") for p in _Recorder.seen)


def test_client_bypasses_the_proxy_for_no_proxy_hosts(proxy: str) -> None:
    # the proxy named is unreachable: a request sent to it would fail
    run_client(proxy, HTTP_PROXY="http://proxy.invalid:3128", NO_PROXY="127.0.0.1")
    # straight to the server (a relative request line), never to the proxy
    assert _Recorder.seen[-2:] == ["/resource_providers"] * 2
    assert all(p.startswith("/") for p in _Recorder.seen)
