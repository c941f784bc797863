"""The HTTP client of Placement: one place that talks HTTP.

- Sessions and endpoints come from keystoneauth1 (``[placement]`` options).
- Microversion: the root document's ``max_version``, capped at
  :data:`.answers.MAX_MICROVERSION`; a server below :data:`.answers.MIN_MICROVERSION`
  is refused (consumer generations need 1.28, the 1.30 reshaper is what makes
  shape changes safe).
- Transport errors and 502/503/504 are retried with tenacity (exponential
  backoff with jitter, bounded; :mod:`agent.placement.tries`); 4xx never.
- Every request is counted by method and path template (``/resource_providers/{uuid}``)
  for benchmarks and metrics; :attr:`PlacementClient.observers` are told of
  each answer (with its latency), each retry and each generation conflict.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import requests
import tenacity
from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import session as ks_session

from agent.placement import answers, ks_errors
from agent.placement.answers import choose_microversion
from agent.placement.errors import (
    GenerationConflict,
    KeystoneFailure,
    PlacementTLSError,
    PlacementUnavailable,
    parse_error,
)
from agent.placement.http import environment_once, pool_connections
from agent.placement.transport import Answer, Transport
from agent.placement.tries import Retry, TryLimits

LOG = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """Something that happened to one request, for :attr:`PlacementClient.observers`.

    Attributes:
        kind: ``"answer"`` (one try ended: answered, or no answer),
            ``"retry"`` (another try follows), ``"conflict"`` (Placement
            answered 409 ``placement.concurrent_update``) or ``"keystone"``
            (Keystone failed the request before it was sent to Placement).
        method: HTTP method.
        template: the path template, e.g. ``/resource_providers/{uuid}/inventories``.
        status: the HTTP status as text, or ``"transport"`` when nothing came back;
            for ``"keystone"`` the cause (:attr:`.errors.KeystoneFailure.cause`).
        seconds: how long the try took (``"answer"`` only; 0 otherwise).
    """

    kind: Literal["answer", "retry", "conflict", "keystone"]
    method: str
    template: str
    status: str
    seconds: float = 0.0


class PlacementClient:
    """Requests to one Placement service.

    Args:
        adapter: a keystoneauth1 Adapter for service type ``placement``
            (``raise_exc=False``: errors are turned into typed ones here).
        retries: retries after the first try of a request (transport errors,
            502/503/504).
        retry_max_wait: longest wait between two tries, seconds.
        extra_headers: headers sent on every request (``X-Roles`` in noauth2 mode).
        limits: the tries of each request, when more than ``retries`` and
            ``retry_max_wait`` say (nova's retry options: :class:`TryLimits`).

    Attributes:
        counts: requests sent to Placement by ``(method, template)`` (each try counts).
        keystone_refused: requests Keystone failed before they were sent, by cause
            (``unreachable``, ``credentials``, ``tls``, ``catalog``, ``error``); not
            in :attr:`counts`.
    """

    def __init__(
        self,
        adapter: ks_adapter.Adapter,
        retries: int = 4,
        retry_max_wait: float = 8.0,
        extra_headers: Mapping[str, str] | None = None,
        limits: TryLimits | None = None,
    ) -> None:
        self.adapter = adapter
        self.transport = Transport(adapter)
        self.extra_headers = dict(extra_headers or {})
        self.limits = limits or TryLimits(retries, retry_max_wait)
        # Set by the service on SIGTERM: no new try starts and retry waits end at once.
        self.abort = self.limits.abort
        self.counts: Counter[tuple[str, str]] = Counter()
        # (method, HTTP status or "transport"): what the metrics endpoint shows.
        self.statuses: Counter[tuple[str, str]] = Counter()
        self.keystone_refused: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self._microversion: str | None = None
        self._negotiate_lock = threading.Lock()
        self.observers: list[Callable[[RequestEvent], None]] = []
        """Called in the requesting thread after each try, retry and conflict; keep them cheap."""
        self._in_flight: threading.BoundedSemaphore | None = None

    def limit_in_flight(self, requests: int) -> None:
        """Let at most ``requests`` of this client's requests be on the wire at once.

        Every thread that sends through this client shares the bound (the
        writer's and the audit's pools, nodes synced in parallel), so
        ``[placement] max_concurrent_requests`` holds however the work is split;
        the session keeps as many connections per host (:func:`.http.pool_connections`).
        """
        self._in_flight = threading.BoundedSemaphore(max(1, requests))
        if isinstance(session := getattr(self.adapter, "session", None), ks_session.Session):
            pool_connections(session.session, requests)
            self.transport.reset()

    @property
    def deadline(self) -> float | None:
        """Monotonic time after which no new try starts (the cycle's deadline), or None."""
        return self.limits.deadline

    @deadline.setter
    def deadline(self, value: float | None) -> None:
        self.limits.deadline = value

    def _tell(self, event: RequestEvent) -> None:
        for observer in self.observers:
            observer(event)

    @classmethod
    def for_endpoint(
        cls,
        url: str,
        retries: int = 0,
        retry_max_wait: float = 0.0,
        extra_headers: Mapping[str, str] | None = None,
    ) -> PlacementClient:
        """A client for the Placement at ``url`` with no Keystone (noauth2 or embedded).

        Args:
            url: the service's root, e.g. ``http://127.0.0.1:8778``.
            retries: as for the constructor.
            retry_max_wait: as for the constructor.
            extra_headers: e.g. the noauth2 identity headers.
        """
        session = ks_session.Session(auth=None)
        environment_once(session.session)
        adapter = ks_adapter.Adapter(session, service_type="placement", endpoint_override=url)
        return cls(adapter, retries, retry_max_wait, extra_headers)

    # -- microversion -----------------------------------------------------

    @property
    def microversion(self) -> str:
        """The microversion in use, negotiated on first need.

        Raises:
            MicroversionTooLow: the server's maximum is below 1.30.
            PlacementUnavailable: the root document could not be read.
        """
        if self._microversion is None:
            with self._negotiate_lock:  # threads starting together negotiate once
                if self._microversion is None:
                    self._microversion = self.negotiate()
        return self._microversion

    def negotiate(self) -> str:
        """Read the root document and pick the highest version up to 1.39.

        Raises:
            MicroversionTooLow: naming the server's version and the one needed.
            PlacementUnavailable: the root document could not be read.
        """
        return choose_microversion(self._send("GET", "/", "/", None, None, microversion=None))

    def at_least(self, major: int, minor: int) -> bool:
        """True when the negotiated microversion is at least ``major.minor``."""
        return answers.version(self.microversion) >= (major, minor)

    # -- requests --------------------------------------------------------------

    def request(
        self,
        method: str,
        template: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        at_most: tuple[int, int] | None = None,
        **path_args: str,
    ) -> Any:
        """Send one request and return the decoded JSON body (None for 204).

        Args:
            method: HTTP method.
            template: the path with ``{name}`` placeholders, e.g.
                ``/resource_providers/{uuid}/inventories``; requests are
                counted by it.
            json: request body.
            params: query parameters.
            at_most: the highest microversion for this request (the
                negotiated one when lower): a request whose meaning changes
                at a later microversion (``POST /reshaper`` at 1.38).
            **path_args: values of the placeholders.

        Raises:
            GenerationConflict, InventoryInUse, DuplicateName, Conflict,
            NotFound, BadRequest, PlacementError: Placement's error answers.
            PlacementUnavailable: no answer, or 502/503/504, after the retries.
        """
        path = template.format(**path_args) if path_args else template
        version = self.microversion
        if at_most is not None and answers.version(version) > at_most:
            version = "{}.{}".format(*at_most)
        return self._send(method, template, path, json, params, version)

    def get(self, template: str, **kw: Any) -> Any:
        """``request("GET", ...)``."""
        return self.request("GET", template, **kw)

    def put(self, template: str, **kw: Any) -> Any:
        """``request("PUT", ...)``."""
        return self.request("PUT", template, **kw)

    def post(self, template: str, **kw: Any) -> Any:
        """``request("POST", ...)``."""
        return self.request("POST", template, **kw)

    def delete(self, template: str, **kw: Any) -> Any:
        """``request("DELETE", ...)``."""
        return self.request("DELETE", template, **kw)

    def total_requests(self) -> int:
        """Requests sent to Placement so far (each retry counts; not those Keystone failed)."""
        with self._count_lock:
            return sum(self.counts.values())

    def keystone_failures(self) -> int:
        """Requests Keystone failed before they could be sent to Placement, so far."""
        with self._count_lock:
            return sum(self.keystone_refused.values())

    def _retrying(
        self, method: str, template: str, path: str, state: tenacity.RetryCallState
    ) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        code = getattr(exc, "status", 0)
        status = str(code) if code else "transport"
        self._tell(RequestEvent("retry", method, template, status))
        LOG.warning(
            "Placement at %s: %s %s failed (%s); retrying",
            self.transport.endpoint,
            method,
            path,
            exc,
        )

    def _send(
        self,
        method: str,
        template: str,
        path: str,
        json: Any,
        params: Mapping[str, Any] | None,
        microversion: str | None,
    ) -> Any:
        """One request, tried as :attr:`limits` allow; the decoded answer (:func:`_decode`)."""
        headers = dict(self.extra_headers)
        if microversion:
            headers["OpenStack-API-Version"] = f"placement {microversion}"
        retrying = self.limits.retrying(lambda state: self._retrying(method, template, path, state))
        try:
            resp = retrying(self._try_once, method, template, path, json, params, headers)
        except Retry as exc:
            tries = retrying.statistics.get("attempt_number", 1)
            raise PlacementUnavailable(
                f"Placement at {self.transport.endpoint}: {method} {path}: no usable answer "
                f"after {tries} {'try' if tries == 1 else 'tries'} (last: {exc}); is Placement "
                "running and reachable at its endpoint (the catalog's, or [placement] "
                "endpoint_override)? Tries: [placement] connect_retries, status_code_retries "
                "(unset: request_retries)"
            ) from None
        except ks_exc.SSLError as exc:
            raise PlacementTLSError(ks_errors.placement_tls(exc, self.transport.endpoint)) from None
        except ks_exc.ClientException as exc:
            # Keystone's, on the path through keystoneauth's Adapter.request; never the token
            raise ks_errors.keystone_failure(exc, self.adapter) from None
        return _decode(resp, method, template, path, self._tell, self.transport.endpoint)

    def _try_once(
        self,
        method: str,
        template: str,
        path: str,
        json: Any,
        params: Mapping[str, Any] | None,
        headers: dict[str, str],
    ) -> Answer | requests.Response:
        """Send one try, counted and told to the observers.

        Raises:
            Retry: no answer, or an answer worth another try (502/503/504).
            PlacementUnavailable: SIGTERM or the deadline came first (:meth:`TryLimits.check`).
        """
        self.limits.check(method, path)
        try:
            self.transport.prepare()  # Keystone's part: nothing is sent to Placement yet
        except KeystoneFailure as exc:
            self._keystone_failed(method, template, exc)
            raise
        with self._count_lock:
            self.counts[(method, template)] += 1
        start = time.monotonic()
        try:
            with self._in_flight or contextlib.nullcontext():
                resp = self.transport.send(path, method, json, params, headers)
        except KeystoneFailure as exc:  # Placement refused the token; getting another failed
            self._answered(method, template, "401", start)
            self._keystone_failed(method, template, exc)
            raise
        except (ks_exc.ConnectFailure, ks_exc.ConnectTimeout, ks_exc.RequestTimeout) as exc:
            self._answered(method, template, "transport", start)
            raise Retry(0, f"{type(exc).__name__}: {_no_secrets(exc)}") from exc
        except ks_exc.SSLError:
            self._answered(method, template, "transport", start)
            raise
        self._answered(method, template, str(resp.status_code), start)
        if resp.status_code in self.limits.statuses:
            raise Retry(resp.status_code, answers.detail(resp, method, path))
        return resp

    def _keystone_failed(self, method: str, template: str, exc: KeystoneFailure) -> None:
        """Count a request Keystone failed apart from Placement's, and tell the observers."""
        with self._count_lock:
            self.keystone_refused[exc.cause] += 1
        self._tell(RequestEvent("keystone", method, template, exc.cause))

    def _answered(self, method: str, template: str, status: str, start: float) -> None:
        """Count one try's outcome by status and tell the observers, with its latency."""
        with self._count_lock:
            self.statuses[(method, status)] += 1
        self._tell(RequestEvent("answer", method, template, status, time.monotonic() - start))


def _decode(
    resp: Answer | requests.Response,
    method: str,
    template: str,
    path: str,
    tell: Callable[[RequestEvent], None],
    endpoint: str = "",
) -> Any:
    """The decoded JSON body of an answer (None for 204 or no body).

    Raises:
        PlacementError (typed by :func:`parse_error`): a 4xx/5xx answer; a
            generation conflict is also told to the observers.
        PlacementUnavailable: a success whose body is not JSON.
    """
    if resp.status_code >= 400:
        try:
            body: Any = resp.json()
        except ValueError:
            body = resp.text
        error = parse_error(resp.status_code, body, method, path)
        if resp.status_code == 403:
            error = answers.forbidden(error, template, endpoint)
        if isinstance(error, GenerationConflict):
            tell(RequestEvent("conflict", method, template, str(resp.status_code)))
        raise error
    if resp.status_code == 204 or not resp.content:
        return None
    try:
        return resp.json()
    except ValueError:
        raise PlacementUnavailable(
            f"placement {method} {path}: answered {resp.status_code} with a body that is not JSON"
        ) from None


def _no_secrets(exc: BaseException) -> str:
    """The first line of an exception's text, cut short; keystoneauth's never carry secrets."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text[:200]
