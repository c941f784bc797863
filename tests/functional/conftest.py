"""Real Placement for functional tests: in-process (wsgi-intercept) and served on loopback.

Both run the real openstack-placement application on SQLite. The in-process
one is shared by the session (Placement's database engine is global to a
process), so tests there use their own nodenames; the served one is a
subprocess per test (``compute-agent placement-serve``) that can be stopped
and started again on the same port and database.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from agent.placement.embedded import EmbeddedPlacement
from tests.conftest import REPO

HEADERS = {
    "X-Auth-Token": "admin",
    "X-Roles": "admin,service",
    "OpenStack-API-Version": "placement 1.39",
}


@pytest.fixture(scope="session")
def embedded(tmp_path_factory) -> EmbeddedPlacement:
    with EmbeddedPlacement(tmp_path_factory.mktemp("embedded-placement")) as placement:
        yield placement


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServedPlacement:
    """``compute-agent placement-serve`` in a subprocess, restartable on the same port."""

    def __init__(self, state: Path) -> None:
        self.state = state
        state.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.conf = state / "serve.conf"
        self.conf.write_text(f"[DEFAULT]\nstate_path = {state}\n")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agent.cli.main",
                "placement-serve",
                "--config",
                str(self.conf),
                "--port",
                str(self.port),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"placement-serve exited: {self.proc.stderr.read().decode()}")
            try:
                requests.get(self.url + "/", timeout=1)
                return
            except requests.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("placement-serve did not answer within 60 s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
            self.proc = None


@pytest.fixture
def served(tmp_path) -> ServedPlacement:
    placement = ServedPlacement(tmp_path / "served")
    placement.start()
    yield placement
    placement.stop()


def http_get(base: str, path: str, **params) -> dict:
    """Plain HTTP read-back, independent of the agent's client."""
    resp = requests.get(base + path, headers=HEADERS, params=params, timeout=10)
    resp.raise_for_status()
    return resp.json()
