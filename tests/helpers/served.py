"""Real Placement served on loopback: ``compute-agent placement-serve`` in a subprocess.

It runs the real openstack-placement application on a SQLite file under
``state``, and can be stopped and started again on the same port and
database (Placement down for a while, or an offline step in between).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import requests

from agent.placement.client import PlacementClient
from agent.placement.embedded import NOAUTH_HEADERS
from tests.helpers.net import free_port, terminate
from tests.helpers.paths import REPO


class ServedPlacement:
    """``compute-agent placement-serve`` in a subprocess, restartable on the same port.

    Args:
        state: its state directory (``placement.sqlite`` lives there).
        database: a database URL holding Placement's schema instead (MariaDB).
        workers: worker processes (several: a database server only; gunicorn);
            None: placement-serve's default (one per CPU on a database server).
        options: more of ``placement-serve``'s options (``--threads 2``,
            ``--db-pool-size 4`` ...); without them a database server gets
            ``workers`` processes of one thread (one: Python's WSGI server).

    Attributes:
        state: its state directory.
        url: ``http://127.0.0.1:PORT``.
        conf: the configuration file it is started with.
    """

    def __init__(
        self,
        state: Path,
        database: str | None = None,
        workers: int | None = 1,
        options: Sequence[str] = ("--threads", "1"),
    ) -> None:
        self.database = database
        self.workers = workers
        self.options = list(options)
        self.state = state
        state.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.conf = state / "serve.conf"
        self.log = state / "serve.log"
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
                *(["--placement-db", self.database] if self.database else []),
                # Given even when 1: placement-serve's own default on a database
                # server is one worker per CPU.
                *(["--workers", str(self.workers)] if self.workers is not None else []),
                *self.options,
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            # A file, not a pipe nobody reads: a chatty server would block on a full pipe.
            stderr=open(self.log, "ab"),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError(f"placement-serve exited: {self.log.read_text()[-2000:]}")
            try:
                requests.get(self.url + "/", timeout=1)
                return
            except (requests.ConnectionError, requests.Timeout):
                time.sleep(0.1)
        self.stop()  # no fixture teardown runs after a failed start: do not leave it behind
        raise RuntimeError("placement-serve did not answer within 60 s")

    def stop(self) -> None:
        """SIGTERM and wait (20 s at most, then SIGKILL); a no-op when it is not running."""
        terminate(self.proc, 20)
        self.proc = None

    def client(self, retries: int = 0, retry_max_wait: float = 0.0) -> PlacementClient:
        """A client of this Placement (noauth2 admin, as the agent's tests use)."""
        return PlacementClient.for_endpoint(self.url, retries, retry_max_wait, NOAUTH_HEADERS)
