"""Placement over HTTP on this machine: ``compute-agent placement-serve``.

Two ways, one application (the real openstack-placement WSGI app, noauth2):

* one process (the default): Python's WSGI server, one request at a time,
  on the embedded SQLite file of ``state_path`` or on any database URL;
* ``workers`` > 1: gunicorn's pre-fork server with that many worker
  processes, each opening its own connections to a database server
  (MariaDB/MySQL through PyMySQL, as a production Placement runs). SQLite
  is refused there: it serves one writer at a time, and several processes
  writing one file fail with "database is locked".

Placement's schema is created in the embedded file on first use; a database
server's is created only when asked (``sync_schema``: placement's own
migrations, as ``placement-manage db sync`` runs them), once, before any
worker starts.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from agent.model.exceptions import ConfigError
from agent.placement.embedded import placement_app_for_url, safe_url

LOG = logging.getLogger(__name__)

_MANAGE = "import sys; from placement.cmd.manage import main; sys.exit(main())"


def is_sqlite(url: str) -> bool:
    """True for a ``sqlite://`` URL."""
    return url.split(":", 1)[0].split("+", 1)[0] == "sqlite"


def sync_schema(url: str) -> None:
    """Create or upgrade Placement's schema at ``url`` (``placement-manage db sync``).

    Run in a child process: Placement's database configuration is global to
    a process, and the workers must not inherit an open connection.

    Raises:
        ConfigError: the migrations failed; naming the URL (password hidden)
            and the database's answer.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as conf:
        conf.write(f"[placement_database]\nconnection = {url}\n")
        conf.flush()
        done = subprocess.run(
            [sys.executable, "-c", _MANAGE, "--config-file", conf.name, "db", "sync"],
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).split())[-400:]
        raise ConfigError(
            f"placement database {safe_url(url)}: schema not created ({tail}); check the "
            "URL, that the server runs and that the user may create tables"
        )


def gunicorn_server(app_factory: Callable[[], Any], bind: str, workers: int) -> Any:
    """A gunicorn application serving ``app_factory()`` in each of ``workers`` processes.

    ``app_factory`` runs in each worker after the fork (no preloading), so
    every worker opens its own database connections.

    Returns:
        The gunicorn application; ``run()`` serves until SIGTERM or SIGINT.
    """
    from gunicorn.app.base import BaseApplication

    class PlacementServer(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            self.cfg.set("bind", bind)
            self.cfg.set("workers", workers)
            # Connections kept between requests (HTTP/1.1 keep-alive), as Apache or
            # uWSGI in front of a production Placement keep them: the sync worker
            # closes each after one request, so every request opened a new one.
            self.cfg.set("worker_class", "gthread")
            self.cfg.set("threads", 1)
            self.cfg.set("keepalive", 30)
            self.cfg.set("preload_app", False)
            self.cfg.set("accesslog", None)
            self.cfg.set("loglevel", "warning")
            self.cfg.set("timeout", 120)

        def load(self) -> Any:
            return app_factory()

    return PlacementServer()


def check_workers(url: str, workers: int) -> None:
    """Refuse several worker processes on SQLite.

    Raises:
        ConfigError: naming the URL (password hidden) and the fix.
    """
    if workers > 1 and is_sqlite(url):
        raise ConfigError(
            f"placement database {safe_url(url)}: SQLite serves one writer at a time; "
            "use --workers 1, or a database server (mysql+pymysql://...)"
        )


def serve_workers(url: str, host: str, port: int, workers: int) -> None:
    """Serve the database at ``url`` with gunicorn's ``workers`` processes until SIGTERM.

    Raises:
        ConfigError: see :func:`check_workers`.
    """
    check_workers(url, workers)
    LOG.info("serving %s on http://%s:%d, %d workers", safe_url(url), host, port, workers)
    gunicorn_server(lambda: placement_app_for_url(url), f"{host}:{port}", workers).run()
