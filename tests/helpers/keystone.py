"""A keystone stand-in on loopback (Identity API v3 as keystoneauth's password plugin talks to it).

It answers version discovery and ``POST /v3/auth/tokens``: 401 with keystone's
error body (``mode="401"``), or 201 with ``X-Subject-Token`` and a token whose
catalog has no placement endpoint (``mode="catalog"``). With ``mode="placement"``
the catalog names a Placement under ``/placement`` on the same server, which
answers the root document and an empty ``GET /resource_providers`` to a valid
token only (401 otherwise, as keystonemiddleware does); each token issued is
``tok-N`` (``server.tokens``), ``server.revoked`` are refused, and
``server.seen`` records ``(path, token)`` of each Placement request.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
            if self.path.startswith("/placement"):
                self.placement()
                return
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
            token = _token(mode, self.server.server_port)
            issued = self.server.tokens  # type: ignore[attr-defined]
            issued.append(f"tok-{len(issued) + 1}")
            self.reply(201, {"token": token}, {"X-Subject-Token": issued[-1]})

        def placement(self) -> None:
            got = self.headers.get("X-Auth-Token")
            self.server.seen.append((self.path, got))  # type: ignore[attr-defined]
            valid = set(self.server.tokens) - self.server.revoked  # type: ignore[attr-defined]
            if got not in valid:
                self.reply(401, {"error": {"code": 401, "title": "Unauthorized"}})
            elif self.path.rstrip("/") == "/placement":
                self.reply(200, {"versions": [{"id": "v1.0", "max_version": "1.39"}]})
            else:
                self.reply(200, {"resource_providers": []})

    # Port 0: the kernel picks a free one while binding (no window for another test to take it).
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.tokens = []  # type: ignore[attr-defined]
    server.revoked = set()  # type: ignore[attr-defined]
    server.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _token(mode: str, port: int) -> dict:
    """The token keystone answers: a compute endpoint, and Placement's in ``placement`` mode."""
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
                "endpoints": [{"interface": "public", "region": "RegionOne", "url": "http://n/"}],
            }
        ],
    }
    if mode == "placement":
        url = f"http://127.0.0.1:{port}/placement"
        token["catalog"].append(
            {
                "type": "placement",
                "name": "placement",
                "endpoints": [{"interface": "internal", "region": "RegionOne", "url": url}],
            }
        )
    return token
