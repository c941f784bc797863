"""One request on the wire: keystoneauth for who and where, urllib3's pool for the bytes.

keystoneauth stays the authority on authentication and endpoints: the
token (fetched, cached and renewed by its auth plugin, ``Adapter.get_headers``),
the endpoint from the service catalogue or ``endpoint_override``
(``Adapter.get_endpoint``), the TLS settings and the connection pools of its
``requests`` session (``TCPKeepAliveAdapter``: keepalive and Nagle off,
sized by :func:`.http.pool_connections`), and a 401 invalidates the token
and sends once more, as ``Session.request`` does.

What is skipped is the work each request redid around the same answer.
Profiled with cProfile (CPU time) on this project's 2-core machine, a cold
sync against ``placement-serve``: of the client's CPU per request,
keystoneauth's ``Session.request`` (headers, user agent, logging set-up,
endpoint filter) took 7 %, ``requests``' ``prepare_request`` (cookie jars,
netrc look-up, settings merged from the session, URL re-quoted) 26 % and its
``send`` and ``HTTPAdapter.send`` (hooks, cookie extraction, the pool looked
up and TLS checked again, response wrapping) 22 %. Here the endpoint, the
``User-Agent`` and the pool are found once per endpoint, the token headers are
asked of the plugin each time (cheap while the token is valid; the plugin
renews it), and the request goes straight to the pool's ``urlopen``.

Where the session's settings say more than that, the request goes the whole
way through ``Adapter.request`` instead: a proxy for the endpoint (from the
session or the environment, as ``requests`` merges them), an
``original_ip``, or an adapter that is not keystoneauth's (tests' fakes).
"""

from __future__ import annotations

import json as jsonlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import requests
from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import session as ks_session
from urllib3 import exceptions as u3_exc
from urllib3.util import Timeout

from agent.placement import ks_errors

JSON_TYPE = "application/json"

LOG = logging.getLogger(__name__)


@dataclass(slots=True)
class Answer:
    """What :meth:`Transport.send` returns: the part of ``requests.Response`` the client reads.

    Attributes:
        status_code: the HTTP status.
        content: the body, decoded from its transfer and content encodings.
    """

    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        """The body as text (Placement answers UTF-8)."""
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON.

        Raises:
            ValueError: the body is not JSON.
        """
        return jsonlib.loads(self.content)


@dataclass(frozen=True, slots=True)
class _Route:
    """Where the requests of one endpoint go, found once."""

    prefix: str  # the endpoint's path, e.g. "/placement" (or "")
    pool: Any  # urllib3.HTTPConnectionPool (or HTTPSConnectionPool)
    timeout: Timeout
    headers: dict[str, str]
    base: str  # the endpoint, e.g. "https://placement.example:8778/placement"

    @property
    def origin(self) -> str:
        """Scheme, host and port, e.g. ``http://127.0.0.1:8778`` (for messages)."""
        host = f"[{self.pool.host}]" if ":" in self.pool.host else self.pool.host
        return f"{self.pool.scheme}://{host}:{self.pool.port}"


class Transport:
    """Sends the client's requests through ``adapter``'s session (module docstring).

    Args:
        adapter: the keystoneauth Adapter of the Placement service, or any
            object with its ``request(url, method, **kw)`` (then used for
            every request).
    """

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self._route: _Route | None = None
        self._whole_way = not (
            isinstance(adapter, ks_adapter.Adapter)
            and isinstance(adapter.session, ks_session.Session)
            and not adapter.session.original_ip
        )
        self._lock = threading.Lock()
        self._base = ""  # the endpoint, for messages, on the whole-way path

    def send(
        self,
        path: str,
        method: str,
        json: Any,
        params: Mapping[str, Any] | None,
        headers: dict[str, str],
    ) -> Any:
        """Send one request; an :class:`Answer` (or ``requests.Response`` the whole way).

        Args:
            path: the path under the endpoint, e.g. ``/resource_providers``.
            method: HTTP method.
            json: the body, encoded as JSON (None: no body).
            params: query parameters (sequences repeat the key, as ``requests`` does).
            headers: headers of this request (the microversion, noauth2's).

        Raises:
            keystoneauth1.exceptions.ConnectFailure, ConnectTimeout,
                RequestTimeout, SSLError: as ``Session.request`` raises them.
            keystoneauth1.exceptions.ClientException: authentication or the
                catalogue failed (keystoneauth's own).
        """
        route = None if self._whole_way else self._find_route()
        if route is None:
            return self.adapter.request(
                path,
                method,
                json=json,
                params=dict(params) if params else None,
                headers=headers,
                raise_exc=False,
                # keystoneauth's Adapter otherwise queues every request behind a
                # FairSemaphore scheduled by the wall clock (time.time): after the
                # clock steps back, each request waits as long as the step
                # (measured with keystoneauth1 5.18.1). The agent sets no rate limit.
                rate_semaphore=_NoLimit(),
            )
        url = route.prefix + path  # the pool knows the host: the request line has the path
        if params:
            url += "?" + urlencode(params, doseq=True)
        body = None
        sent = {**route.headers, **headers}
        if json is not None:
            body = jsonlib.dumps(json, separators=(",", ":")).encode()
            sent["Content-Type"] = JSON_TYPE
        authenticated = self._authenticated()
        debug = LOG.isEnabledFor(logging.DEBUG)
        if debug:  # method and URL only: headers carry the token (never logged)
            LOG.debug("REQ: %s %s", method, url)
        answer = self._urlopen(route, method, url, body, sent, authenticated)
        # keystoneauth's rule: a refused token is dropped and fetched again, once
        if answer.status_code == 401 and authenticated and self.adapter.invalidate():
            answer = self._urlopen(route, method, url, body, sent, authenticated)
        if debug:
            LOG.debug("RESP: %s %s -> %d", method, url, answer.status_code)
        return answer

    def prepare(self) -> None:
        """Get the token and find the endpoint (cached after the first time): Keystone's part.

        Called before a request is counted or sent, so that a failure here is told
        apart from Placement's: nothing went to Placement yet.

        Raises:
            KeystoneFailure: Keystone unreachable, the credentials refused, its
                certificate not trusted, or no Placement endpoint in the catalog
                (:func:`.ks_errors.keystone_failure`).
        """
        if not isinstance(self.adapter, ks_adapter.Adapter):
            return  # a test's fake adapter: no Keystone
        try:
            if self._whole_way or self._find_route() is None:
                self._base = self._base or (self.adapter.get_endpoint() or "")
            if self._authenticated():
                self.adapter.session.get_auth_headers(self.adapter.auth)
        except ks_exc.ClientException as exc:
            raise ks_errors.keystone_failure(exc, self.adapter) from exc

    @property
    def endpoint(self) -> str:
        """Placement's endpoint with scheme and port (``http://127.0.0.1:8778/placement``), or
        ``(endpoint not found yet)``."""
        route = self._route
        base = route.base if route is not None else self._base
        if not base and isinstance(self.adapter, ks_adapter.Adapter):
            base = self.adapter.endpoint_override or ""
        return ks_errors.with_port(base) if base else "(endpoint not found yet)"

    def reset(self) -> None:
        """Find the endpoint and pool again on the next request (the session's pools changed)."""
        with self._lock:
            self._route = None

    def _urlopen(
        self,
        route: _Route,
        method: str,
        url: str,
        body: bytes | None,
        headers: dict[str, str],
        authenticated: bool,
    ) -> Answer:
        if authenticated:
            # the plugin renews the token when it is about to expire
            try:
                auth = self.adapter.session.get_auth_headers(self.adapter.auth)
            except ks_exc.ClientException as exc:
                raise ks_errors.keystone_failure(exc, self.adapter) from exc
            headers = {**headers, **(auth or {})}
        try:
            resp = route.pool.urlopen(
                method,
                url,
                body=body,
                headers=headers,
                redirect=False,
                assert_same_host=False,
                preload_content=True,
                decode_content=True,
                retries=False,
                timeout=route.timeout,
            )
        except u3_exc.HTTPError as exc:
            raise _keystoneauth_error(exc, method, route.origin + url) from exc
        except OSError as exc:
            where = f"{method} {route.origin}{url}"
            raise ks_exc.ConnectFailure(
                f"Unable to establish connection to {where}: {exc}"
            ) from exc
        return Answer(resp.status, resp.data or b"")

    def _authenticated(self) -> bool:
        """True when an auth plugin gives the requests a token (none in noauth2 mode)."""
        return self.adapter.auth is not None or self.adapter.session.auth is not None

    def _find_route(self) -> _Route | None:
        """The endpoint's route, found on first use; None when a proxy applies."""
        route = self._route
        if route is not None and route.pool.pool is not None:  # not closed
            return route
        with self._lock:
            if (self._route is None or self._route.pool.pool is None) and not self._whole_way:
                self._route = _route_for(self.adapter)
                self._whole_way = self._route is None
            return self._route


class _NoLimit:
    """A context manager that does nothing (keystoneauth's ``rate_semaphore``)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_exc: object) -> None:
        return None


def _route_for(adapter: ks_adapter.Adapter) -> _Route | None:
    """Endpoint, pool, timeout and user agent of ``adapter``; None when a proxy applies.

    Raises:
        keystoneauth1.exceptions.EndpointNotFound: the catalogue has no Placement.
    """
    base = adapter.get_endpoint()
    if not base:  # keystoneauth raises EndpointNotFound itself; an empty URL is as bad
        raise ks_exc.EndpointNotFound("no endpoint for service type placement")
    base = base.rstrip("/")
    ks = adapter.session
    rs: requests.Session = ks.session
    settings = rs.merge_environment_settings(base + "/", {}, False, ks.verify, ks.cert)
    if requests.utils.select_proxy(base + "/", settings["proxies"]):
        return None
    prepared = requests.PreparedRequest()
    prepared.prepare(method="GET", url=base + "/")
    http = rs.get_adapter(prepared.url)
    pool = http.get_connection_with_tls_context(
        prepared, settings["verify"], settings["proxies"], settings["cert"]
    )
    http.cert_verify(pool, prepared.url, settings["verify"], settings["cert"])
    timeout = Timeout(connect=ks.timeout, read=ks.timeout)
    # requests' defaults (Accept, Accept-Encoding, keep-alive), keystoneauth's user agent
    headers = {**requests.utils.default_headers()}
    headers["User-Agent"] = ks.user_agent or ks_session.DEFAULT_USER_AGENT
    return _Route(urlsplit(base).path, pool, timeout, headers, base)


def _keystoneauth_error(exc: Exception, method: str, url: str) -> Exception:
    """urllib3's failure as the keystoneauth exception ``Session.request`` raises for it."""
    reason = exc.reason if isinstance(exc, u3_exc.MaxRetryError) and exc.reason else exc
    where = f"{method} {url}"
    if isinstance(reason, u3_exc.SSLError):
        return ks_exc.SSLError(f"SSL exception connecting to {where}: {reason}")
    if isinstance(reason, u3_exc.ConnectTimeoutError) and not isinstance(
        reason, u3_exc.NewConnectionError
    ):
        return ks_exc.ConnectTimeout(f"Request to {where} timed out")
    if isinstance(reason, u3_exc.ReadTimeoutError):
        return ks_exc.RequestTimeout(f"Request to {where} timed out")
    return ks_exc.ConnectFailure(f"Unable to establish connection to {where}: {reason}")
