"""Placement inside the agent: the real openstack-placement application on SQLite.

The same idea as placement's own ``PlacementDirect`` (reshape-provider-tree
spec, "Direct Interface to Placement"): the WSGI application runs
in-process and wsgi-intercept routes the client's HTTP to it without a
socket, so the agent's ordinary client code is used unchanged. The schema is
created on first use. :func:`serve` offers the same database over real HTTP
on loopback, for ``openstack resource provider ...`` and for tests.

Placement's database engine is configured once per process (its
enginefacade is global), so one process serves one database file.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from wsgiref import simple_server

from oslo_config import cfg

from agent.exceptions import ConfigError
from agent.placement.client import PlacementClient

LOG = logging.getLogger(__name__)

DB_FILE = "placement.sqlite"
"""File name of the embedded database under ``state_path``."""

INTERCEPT_HOST = "compute-agent-embedded-placement"
NOAUTH_HEADERS = {"X-Auth-Token": "admin", "X-Roles": "admin,service"}
"""noauth2 identity: admin, plus the service role POST /reshaper needs."""

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
    global _configured_url, _app
    url = database_url(state_path)
    with _lock:
        if _configured_url is not None:
            if url != _configured_url:
                raise ConfigError(
                    f"embedded placement already uses {_configured_url}; one process serves "
                    f"one database (asked for {url})"
                )
            return _app
        # Imported here: placement is heavy and only the embedded mode needs it.
        from placement import conf as placement_conf
        from placement import db_api, deploy

        Path(state_path).mkdir(parents=True, exist_ok=True)
        pconf = cfg.ConfigOpts()
        placement_conf.register_opts(pconf)
        pconf.set_override("connection", url, group="placement_database")
        pconf.set_override("sync_on_startup", True, group="placement_database")
        pconf.set_override("auth_strategy", "noauth2", group="api")
        pconf([], project="placement", default_config_files=[])
        db_api.configure(pconf)
        _app = deploy.loadapp(pconf)
        _configured_url = url
        LOG.info("embedded placement on %s", url)
        return _app


class EmbeddedPlacement:
    """Context manager: Placement in-process, reachable through a client.

    Args:
        state_path: directory of the SQLite file.

    Example::

        with EmbeddedPlacement(conf.state_path) as placement:
            client = placement.client()
    """

    def __init__(self, state_path: str | Path, port: int = 80) -> None:
        self.state_path = Path(state_path)
        self.url = f"http://{INTERCEPT_HOST}:{port}"
        self._interceptor: Any = None

    def __enter__(self) -> EmbeddedPlacement:
        from wsgi_intercept.interceptor import RequestsInterceptor

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
    app = placement_app(state_path)
    return simple_server.make_server(host, port, app, handler_class=_QuietHandler)
