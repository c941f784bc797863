"""The HTTP session under keystoneauth: the environment read once, connections kept.

Connections: ``requests``' adapters keep 10 connections per host
(``DEFAULT_POOLSIZE``); with more requests in flight than that
(``[placement] max_concurrent_requests``), urllib3 closes every connection
beyond 10 as it comes back ("Connection pool is full, discarding
connection") and the next burst opens them again. :func:`pool_connections`
sizes the pools to the bound on requests in flight.

Environment:

``requests`` looks the proxy settings up in ``os.environ`` again for every
request (``Session.merge_environment_settings`` -> ``get_environ_proxies``,
which walks the whole environment twice, for ``*_proxy`` and for
``no_proxy``). Measured on this project's machine against ``placement-serve``
(``GET /allocations/{consumer}``, 75 environment variables): about 1 ms of the
agent's 2.5-3 ms of CPU per request, a third of the agent's share of a
10,000-consumer read. A daemon's environment does not change after it
starts, so the answer is kept per destination; proxies, ``NO_PROXY`` and
``REQUESTS_CA_BUNDLE`` are honoured exactly as ``requests`` honours them,
as they were when the agent first spoke to that host.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import requests
from keystoneauth1.session import TCPKeepAliveAdapter
from requests.adapters import HTTPAdapter


def _hashable(value: Any) -> Any:
    """``value`` as a dictionary key (proxies come as dicts, certs as tuples or strings)."""
    if isinstance(value, dict):
        return tuple(sorted(value.items()))
    if isinstance(value, list):
        return tuple(value)
    return value


class _Memo:
    """``requests``' own merge, computed once per destination and settings."""

    def __init__(self, session: requests.Session) -> None:
        self.session = session
        self.merge = session.merge_environment_settings
        # No lock: a dict's get and set are atomic, and two threads merging the
        # same destination at once only compute the same answer twice.
        self.merged: dict[tuple[Any, ...], dict[str, Any]] = {}

    def __call__(
        self, url: str, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> dict[str, Any]:
        parts = urlsplit(url)
        s = self.session
        given = (parts.scheme, parts.netloc, proxies, stream, verify, cert)
        own = (s.proxies, s.verify, s.cert, s.trust_env)
        key = tuple(_hashable(v) for v in (*given, *own))
        merged = self.merged.get(key)
        if merged is None:
            # requests adds the environment's proxies to the dict it is given
            mine = dict(proxies) if proxies is not None else None
            merged = self.merged[key] = self.merge(url, mine, stream, verify, cert)
        # a fresh copy each call: requests changes what it is given
        return {**merged, "proxies": dict(merged["proxies"])}


def environment_once(session: requests.Session) -> requests.Session:
    """Make ``session`` merge the environment once per destination (module docstring).

    Same answers as ``requests`` for proxies, ``NO_PROXY`` and CA bundles
    (``requests``' own merge computes each the first time), memoised by
    scheme, host and port and by the request's and the session's proxy,
    stream, verify and cert settings. Changes to ``os.environ`` after the
    first request to a host are not seen (a restart picks them up).

    Args:
        session: keystoneauth's ``requests`` session (``ks_session.Session().session``),
            which keeps its adapters (TCP keepalive, TLS options).

    Returns:
        ``session``, changed in place.
    """
    session.merge_environment_settings = _Memo(session)  # type: ignore[method-assign]
    return session


def pool_connections(session: requests.Session, size: int) -> requests.Session:
    """Keep up to ``size`` connections per host in each of ``session``'s HTTP adapters.

    Each adapter is replaced by one of the same kind whose pools hold
    ``size`` connections (urllib3's ``maxsize``, per host: each Placement
    endpoint gets its own pool). keystoneauth's :class:`TCPKeepAliveAdapter`
    stays one, with its TLS ciphers and minimum version, so its socket
    options (TCP keepalive, Nagle off; keystoneauth bug 1323862) still apply;
    the adapter's retry policy is kept. Adapters already of that size are left alone.

    Args:
        session: a ``requests`` session (keystoneauth's ``Session().session``).
        size: connections per host, at least 1; the number of requests that may be in
            flight at once through this session.

    Returns:
        ``session``, changed in place.
    """
    size = max(1, size)
    for prefix, old in list(session.adapters.items()):
        if not isinstance(old, HTTPAdapter) or old._pool_maxsize == size:
            continue
        new: HTTPAdapter
        if isinstance(old, TCPKeepAliveAdapter):
            new = TCPKeepAliveAdapter(
                pool_connections=old._pool_connections,
                pool_maxsize=size,
                max_retries=old.max_retries,
                tls_ciphers=old.tls_ciphers,
                tls_min_version=old.tls_min_version,
            )
        else:
            new = HTTPAdapter(
                pool_connections=old._pool_connections,
                pool_maxsize=size,
                max_retries=old.max_retries,
            )
        session.mount(prefix, new)
        old.close()
    return session
