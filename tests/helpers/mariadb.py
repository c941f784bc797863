"""A private MariaDB server for Placement, the database production Placement runs on.

The fixture starts its own ``mariadbd`` (Debian's ``mariadb-server``, which
``make test`` installs) on a fresh data directory under a temporary
directory, listening on a unix socket and on a free loopback port
(127.0.0.1 only), and stops it at the end. Each test gets a database of its
own, created with a user, and Placement's schema put in it by placement's
own ``placement-manage db sync``; the agent reaches it through PyMySQL
(``mysql+pymysql://``), as a Placement service configured for MariaDB does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.net import free_port, terminate

MARIADB_GROUP = pytest.mark.xdist_group("mariadb")
"""The xdist group of the tests on the session's MariaDB server (``make test`` runs
``pytest -n auto --dist loadgroup``): one worker runs them all and starts one server,
where each worker would start its own. tests/functional/conftest.py puts each test that
uses the ``mariadb`` fixture in it; a test that asks for the server at run time
(``request.getfixturevalue("served_mariadb")``) is marked with it by hand."""

USER = "placement"
PASSWORD = "placement-test-pw"


class MariaDB:
    """``mariadbd`` on ``root``: :meth:`start`, :meth:`database`, :meth:`stop`.

    Attributes:
        port: its loopback TCP port.
        socket: its unix socket.
    """

    def __init__(self, root: Path) -> None:
        self.server = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
        if not Path(self.server).exists():
            # make test installs it: a missing server is a broken set-up, not a reason to skip.
            pytest.fail("mariadbd is not installed: run make test, which installs mariadb-server")
        self.root = root
        self.data = root / "data"
        self.socket = root / "mysqld.sock"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._count = 0

    def start(self) -> None:
        """Initialise the data directory and start the server (60 s at most).

        Raises:
            RuntimeError: it did not start; its log's end is in the message.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        log = self.root / "mariadb.log"
        subprocess.run(
            [
                "mariadb-install-db",
                f"--datadir={self.data}",
                "--user=root",
                "--skip-test-db",
                "--auth-root-authentication-method=socket",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=open(log, "ab"),
        )
        self.proc = subprocess.Popen(
            [
                self.server,
                "--no-defaults",
                f"--datadir={self.data}",
                f"--socket={self.socket}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                "--user=root",
                f"--pid-file={self.root / 'mariadb.pid'}",
                f"--log-error={log}",
                # A test server: durability traded for speed, as in CI databases.
                "--innodb-flush-log-at-trx-commit=2",
                "--max-connections=500",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while self.sql("SELECT 1", check=False).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mariadbd did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)

    def sql(self, statement: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``statement`` as root over the socket."""
        return subprocess.run(
            ["mariadb", f"--socket={self.socket}", "-uroot", "-e", statement],
            capture_output=True,
            text=True,
            check=check,
        )

    def database(self, sync: bool = True) -> str:
        """A new database and its URL; with ``sync``, Placement's schema in it.

        Returns:
            ``mysql+pymysql://placement:...@127.0.0.1:PORT/NAME``.
        """
        self._count += 1
        name = f"placement_{self._count}"
        self.sql(
            f"CREATE DATABASE {name}; "
            f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'; "
            f"GRANT ALL PRIVILEGES ON {name}.* TO '{USER}'@'127.0.0.1';"
        )
        url = f"mysql+pymysql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{name}"
        if sync:
            db_sync(url, self.root / f"{name}.conf")
        return url

    def stop(self) -> None:
        """SIGTERM and wait (30 s at most, then SIGKILL)."""
        terminate(self.proc)
        self.proc = None


def db_sync(url: str, conf: Path) -> None:
    """``placement-manage db sync`` on ``url`` (placement's own migrations).

    Raises:
        subprocess.CalledProcessError: it failed (its output is in the error).
    """
    conf.write_text(f"[placement_database]\nconnection = {url}\n")
    manage = Path(sys.executable).with_name("placement-manage")
    subprocess.run(
        [str(manage), "--config-file", str(conf), "db", "sync"],
        check=True,
        capture_output=True,
        text=True,
    )
