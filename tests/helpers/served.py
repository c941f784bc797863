"""Real Placement served on loopback: ``compute-agent placement-serve`` in a subprocess.

It runs the real openstack-placement application on a SQLite file under
``state``, and can be stopped and started again on the same port and
database (Placement down for a while, or an offline step in between).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.helpers.net import free_port
from tests.helpers.paths import REPO


class ServedPlacement:
    """``compute-agent placement-serve`` in a subprocess, restartable on the same port.

    Attributes:
        state: its state directory (``placement.sqlite`` lives there).
        url: ``http://127.0.0.1:PORT``.
        conf: the configuration file it is started with.
    """

    def __init__(self, state: Path) -> None:
        self.state = state
        state.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.conf = state / "serve.conf"
        self.conf.write_text(f"[DEFAULT]\nstate_path = {state}\n")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Start it and wait until it answers ``GET /``.

        Raises:
            RuntimeError: it exited, or did not answer within 60 s.
        """
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
        """SIGTERM and wait (20 s at most); a no-op when it is not running."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
            self.proc = None
