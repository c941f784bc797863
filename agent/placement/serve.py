"""Placement over HTTP on this machine: ``compute-agent placement-serve``.

Two ways, one application (the real openstack-placement WSGI app, noauth2):

* one process, one thread (SQLite's only choice, and ``--workers 1
  --threads 1``): Python's WSGI server, one request at a time, on the
  embedded SQLite file of ``state_path`` or on any database URL;
* otherwise gunicorn's pre-fork server: ``workers`` processes of ``threads``
  threads each (its threaded worker, ``gthread``), each process opening its
  own connections to a database server (MariaDB/MySQL through PyMySQL, as a
  production Placement runs). SQLite is refused there: it serves one writer
  at a time, and several writers of one file fail with "database is locked".

The defaults on a database server (:func:`settings_for`), from the 16-core
sweep of issue 40 (an H200 host, MariaDB, the agent on the same host; the
figures and the 2-core sweep of ``bench/serve_sweep.py`` are in
docs/scale.md):

* **workers = the CPUs this process may run on**: 14 workers served a cold
  sync at 853 req/s, 16 at 993-1,014; each worker served 61-63 req/s, so the
  throughput grows with the workers until the cores are spent, and Placement
  (7.9-12 ms of CPU a request) is most of what they are spent on;
* **threads = 2**: 63 req/s is 16 ms of a worker's time a request for 8-12 ms
  of its CPU, so a quarter to a half of a one-thread worker's time waits on
  MariaDB and the socket; a second thread runs then. A third or fourth
  finds the worker's GIL taken more often than not, and each holds a
  database connection of its own;
* **keep-alive 30 s**: connections kept between requests, as Apache or uWSGI
  in front of a production Placement keep them (the agent opened a TCP
  connection per request without it, issue 28); an option for a proxy in
  front whose idle timeout must stay below it;
* **database pool = max(5, threads) connections, 10 more on a burst**: what
  Placement gets today from SQLAlchemy's ``QueuePool`` (Placement leaves
  oslo.db's ``max_pool_size`` and ``max_overflow`` unset, so oslo.db passes
  none to ``create_engine``), and never fewer than the threads, so that no
  thread opens and closes a connection of its own per request.

Placement's schema is created in the embedded file on first use; a database
server's is created only when asked (``sync_schema``: placement's own
migrations, as ``placement-manage db sync`` runs them), once, before any
worker starts.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from agent.model.exceptions import ConfigError
from agent.placement.embedded import PoolSize, check_schema, placement_app_for_url, safe_url

LOG = logging.getLogger(__name__)

_MANAGE = "import sys; from placement.cmd.manage import main; sys.exit(main())"

THREADS = 2
"""Threads per worker on a database server (see the module's docstring)."""
KEEPALIVE = 30
"""Seconds an idle kept-alive connection stays open (gunicorn's ``keepalive``)."""
POOL_SIZE = 5
"""Connections each worker keeps open at least: SQLAlchemy's ``QueuePool`` default."""
MAX_OVERFLOW = 10
"""Connections a worker may open beyond its pool (closed when returned): SQLAlchemy's."""


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    """How ``placement-serve`` serves a database.

    Attributes:
        workers: processes (1 with ``threads`` 1: Python's WSGI server).
        threads: threads per process (gunicorn's ``gthread`` worker).
        keepalive: seconds an idle connection is kept open (0: closed after
            each request).
        pool: each process's database pool (oslo.db's ``[placement_database]
            max_pool_size`` and ``max_overflow``).
    """

    workers: int
    threads: int
    keepalive: int
    pool: PoolSize

    @property
    def gunicorn(self) -> bool:
        """True when gunicorn serves (more than one process or thread)."""
        return self.workers > 1 or self.threads > 1


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: a cgroup's cpuset or
    ``taskset`` narrow it), or every CPU where the platform has no mask."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def settings_for(
    url: str,
    workers: int | None = None,
    threads: int | None = None,
    keepalive: int = KEEPALIVE,
    pool_size: int | None = None,
    max_overflow: int = MAX_OVERFLOW,
) -> ServeSettings:
    """The settings to serve ``url`` with; None picks the default (the module's docstring).

    On SQLite the defaults are one worker and one thread (its one writer).

    Raises:
        ConfigError: a count below its minimum (workers, threads, pool size:
            1; keep-alive, overflow: 0), or several workers or threads on
            SQLite (:func:`check_workers`); naming the option and the fix.
    """
    sqlite = is_sqlite(url)
    workers = workers if workers is not None else (1 if sqlite else available_cpus())
    threads = threads if threads is not None else (1 if sqlite else THREADS)
    pool_size = pool_size if pool_size is not None else max(POOL_SIZE, threads)
    for flag, value, least in (
        ("--workers", workers, 1),
        ("--threads", threads, 1),
        ("--db-pool-size", pool_size, 1),
        ("--keepalive", keepalive, 0),
        ("--db-max-overflow", max_overflow, 0),
    ):
        if value < least:
            raise ConfigError(f"{flag} {value}: give {least} or more")
    check_workers(url, workers, threads)
    return ServeSettings(workers, threads, keepalive, PoolSize(pool_size, max_overflow))


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


def gunicorn_server(app_factory: Callable[[], Any], bind: str, settings: ServeSettings) -> Any:
    """A gunicorn application serving ``app_factory()`` in each of ``settings.workers`` processes.

    ``app_factory`` runs in each worker after the fork (no preloading), so
    every worker opens its own database connections.

    Returns:
        The gunicorn application; ``run()`` serves until SIGTERM or SIGINT.
    """
    from gunicorn.app.base import BaseApplication

    class PlacementServer(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            self.cfg.set("bind", bind)
            self.cfg.set("workers", settings.workers)
            # The threaded worker at any thread count: gunicorn's sync worker closes
            # each connection after one request (no keep-alive).
            self.cfg.set("worker_class", "gthread")
            self.cfg.set("threads", settings.threads)
            self.cfg.set("keepalive", settings.keepalive)
            self.cfg.set("preload_app", False)
            self.cfg.set("accesslog", None)
            self.cfg.set("loglevel", "warning")
            self.cfg.set("timeout", 120)

        def load(self) -> Any:
            return app_factory()

    return PlacementServer()


def check_workers(url: str, workers: int, threads: int = 1) -> None:
    """Refuse several worker processes or threads on SQLite.

    Raises:
        ConfigError: naming the URL (password hidden) and the fix.
    """
    if (workers > 1 or threads > 1) and is_sqlite(url):
        raise ConfigError(
            f"placement database {safe_url(url)}: SQLite serves one writer at a time; "
            "use --workers 1 --threads 1, or a database server (mysql+pymysql://...)"
        )


def serve_workers(url: str, host: str, port: int, settings: ServeSettings) -> None:
    """Serve the database at ``url`` with gunicorn until SIGTERM.

    The database is checked here, before any worker forks (the connection
    closed again): a worker that fails to boot only makes gunicorn exit 3.

    Raises:
        ConfigError: see :func:`check_workers`; or the database cannot be
            opened or holds no schema (:func:`~agent.placement.embedded.check_schema`).
    """
    check_workers(url, settings.workers, settings.threads)
    check_schema(url)
    LOG.info(
        "serving %s on http://%s:%d, %d workers x %d threads, pool %d + %d",
        safe_url(url),
        host,
        port,
        settings.workers,
        settings.threads,
        settings.pool.size,
        settings.pool.overflow,
    )
    app = lambda: placement_app_for_url(url, pool=settings.pool)  # noqa: E731
    gunicorn_server(app, f"{host}:{port}", settings).run()
