"""Placement inside the agent: the real openstack-placement application on SQLite.

The same idea as placement's own ``PlacementDirect`` (reshape-provider-tree
spec, "Direct Interface to Placement"): the WSGI application runs
in-process and wsgi-intercept routes the client's HTTP to it without a
socket, so the agent's ordinary client code is used unchanged. The schema is
created on first use. :func:`make_server` offers the same database over real HTTP
on loopback, for ``openstack resource provider ...`` and for tests.

Placement's database engine is configured once per process (its
enginefacade is global), so one process serves one database: the embedded
file, or (offline tools) the database URL given by :func:`placement_app_for_url`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple
from wsgiref import simple_server

from oslo_config import cfg

from agent.model.exceptions import ConfigError
from agent.placement.client import PlacementClient

LOG = logging.getLogger(__name__)

DB_FILE = "placement.sqlite"
"""File name of the embedded database under ``state_path``."""

INTERCEPT_HOST = "compute-agent-embedded-placement"
NOAUTH_HEADERS = {"X-Auth-Token": "admin", "X-Roles": "admin,service"}
"""noauth2 identity: admin, plus the service role POST /reshaper needs."""


class PoolSize(NamedTuple):
    """A database connection pool's bounds (oslo.db's ``[placement_database]``
    ``max_pool_size`` and ``max_overflow``, SQLAlchemy's ``pool_size`` and
    ``max_overflow``): ``size`` connections kept open, ``overflow`` more opened
    on a burst and closed when returned. SQLite's pool ignores them."""

    size: int
    overflow: int


_lock = threading.Lock()
_configured_url: str | None = None
_app: Any = None


def database_url(state_path: str | Path) -> str:
    """``sqlite:////…/placement.sqlite`` under ``state_path``."""
    return f"sqlite:///{Path(state_path).resolve() / DB_FILE}"


def placement_app(state_path: str | Path) -> Callable[..., Any]:
    """The Placement WSGI application on the SQLite file under ``state_path``.

    Creates the directory and the schema (Placement's own migrations) on
    first use. The same application is returned on later calls.

    Raises:
        ConfigError: this process already serves another database file.
    """
    Path(state_path).mkdir(parents=True, exist_ok=True)
    return placement_app_for_url(database_url(state_path), create_schema=True)


def placement_app_for_url(
    url: str, create_schema: bool = False, pool: PoolSize | None = None
) -> Callable[..., Any]:
    """The Placement WSGI application on the database at ``url`` (any SQLAlchemy URL).

    For the offline tools (``compute-agent reshape --placement-db URL``): the
    database of a stopped Placement service, used in-process as placement's
    own ``PlacementDirect`` does (reshape-provider-tree.txt, "Direct
    Interface to Placement").

    Args:
        url: e.g. ``sqlite:////var/lib/placement/placement.sqlite`` or
            ``mysql+pymysql://placement:secret@db/placement``.
        create_schema: run Placement's migrations first (the embedded mode);
            False for someone else's database, which must already hold
            Placement's schema.

    Raises:
        ConfigError: this process already serves another database; or the
            database cannot be opened or has no Placement schema.
    """
    global _configured_url, _app
    with _lock:
        if _configured_url is not None:
            if url != _configured_url:
                raise ConfigError(
                    f"embedded placement already uses {_configured_url}; one process serves "
                    f"one database (asked for {url})"
                )
            return _app
        if not create_schema:
            check_schema(url)
        # Imported here: placement is heavy and only the embedded mode needs it.
        from placement import conf as placement_conf
        from placement import db_api, deploy

        pconf = cfg.ConfigOpts()
        placement_conf.register_opts(pconf)
        pconf.set_override("connection", url, group="placement_database")
        pconf.set_override("sync_on_startup", create_schema, group="placement_database")
        if pool is not None:
            pconf.set_override("max_pool_size", pool.size, group="placement_database")
            pconf.set_override("max_overflow", pool.overflow, group="placement_database")
        pconf.set_override("auth_strategy", "noauth2", group="api")
        pconf([], project="placement", default_config_files=[])
        db_api.configure(pconf)
        _app = deploy.loadapp(pconf)
        _configured_url = url
        LOG.info("embedded placement on %s", safe_url(url))
        return _app


def check_embedded_database(state_path: str | Path) -> None:
    """Raise unless this process can serve the embedded database of ``state_path``.

    Raises:
        ConfigError: the process already serves another database (one per process).
    """
    url = database_url(state_path)
    with _lock:
        if _configured_url is not None and _configured_url != url:
            raise ConfigError(
                f"embedded placement already uses {safe_url(_configured_url)}; one process "
                f"serves one database (asked for {safe_url(url)}): restart the service to "
                "change state_path"
            )


def safe_url(url: str) -> str:
    """``url`` without its password, for logs and messages."""
    import sqlalchemy.engine

    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # any unparsable URL is shown as given
        return url


def check_schema(url: str) -> None:
    """Refuse a database that cannot be opened or holds no Placement tables.

    Raises:
        ConfigError: naming the URL (password hidden) and the fix.
    """
    import sqlalchemy

    try:
        parsed = sqlalchemy.engine.make_url(url)
    except Exception as exc:  # any parse error: the URL is unusable
        raise ConfigError(f"placement database URL {url!r} is not a database URL: {exc}") from None
    # SQLite would create an empty file for a mistyped path: refuse it first.
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        if not Path(parsed.database).is_file():
            raise ConfigError(
                f"placement database {url}: no such file {parsed.database}; give the "
                "path of Placement's SQLite file (sqlite:////absolute/path)"
            )
    try:
        engine = sqlalchemy.create_engine(url)
        try:
            tables = set(sqlalchemy.inspect(engine).get_table_names())
        finally:
            engine.dispose()
    except Exception as exc:  # any driver error means "cannot open"
        raise ConfigError(
            f"placement database {safe_url(url)} cannot be opened: "
            f"{' '.join(str(exc).split())[:300]}"
        ) from None
    if not {"resource_providers", "inventories", "allocations"} <= tables:
        raise ConfigError(
            f"placement database {safe_url(url)} holds no Placement schema; give the URL of "
            "Placement's database ([placement_database] connection in placement.conf)"
        )


class EmbeddedPlacement:
    """Context manager: Placement in-process, reachable through a client.

    Args:
        state_path: directory of the SQLite file.
        port: port of the intercepted URL (several interceptors may coexist).
        database: instead of ``state_path``'s file, this database URL, which
            must already hold Placement's schema (see :func:`placement_app_for_url`).

    Example::

        with EmbeddedPlacement(conf.state_path) as placement:
            client = placement.client()
    """

    def __init__(
        self, state_path: str | Path, port: int = 80, *, database: str | None = None
    ) -> None:
        self.state_path = Path(state_path)
        self.database = database
        self.url = f"http://{INTERCEPT_HOST}:{port}"
        self._interceptor: Any = None

    def __enter__(self) -> EmbeddedPlacement:
        from wsgi_intercept.interceptor import RequestsInterceptor

        if self.database is not None:
            app = placement_app_for_url(self.database)
        else:
            app = placement_app(self.state_path)
        self._interceptor = RequestsInterceptor(lambda: app, url=self.url)
        self._interceptor.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._interceptor is not None:
            self._interceptor.__exit__(None, None, None)
            self._interceptor = None

    def client(self, retries: int = 0, retry_max_wait: float = 0.0) -> PlacementClient:
        """A client whose requests reach this embedded service."""
        return PlacementClient.for_endpoint(self.url, retries, retry_max_wait, NOAUTH_HEADERS)


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        LOG.debug("%s %s", self.address_string(), format % args)


def make_server(state_path: str | Path, host: str, port: int) -> simple_server.WSGIServer:
    """An HTTP server (not yet serving) for the embedded database on ``host:port``.

    ``port`` 0 picks a free port: read it from ``server.server_port``.

    Raises:
        OSError: the address is in use.
        ConfigError: as :func:`placement_app`.
    """
    return make_wsgi_server(placement_app(state_path), host, port)


class _Server(simple_server.WSGIServer):
    # socketserver listens with a backlog of 5: an agent's window of requests in
    # flight ([placement] max_concurrent_requests, at most 256) connecting at once
    # would have its SYNs dropped past 5 and retried a second or more later; here
    # they wait their turn in the kernel's accept queue.
    request_queue_size = 256


def make_wsgi_server(app: Callable[..., Any], host: str, port: int) -> simple_server.WSGIServer:
    """Python's one-request-at-a-time WSGI server for ``app`` on ``host:port`` (not serving yet).

    Raises:
        OSError: the address is in use.
    """
    return simple_server.make_server(
        host, port, app, server_class=_Server, handler_class=_QuietHandler
    )
