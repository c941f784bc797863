"""The libvirt connection: opened lazily, re-opened with backoff, errors that say where.

libvirtd (or virtqemud) restarts on package upgrades; the agent must not need
a restart of its own. Every call goes through :meth:`LibvirtConnection.call`:

* no connection, or one libvirt says is dead (``isAlive``): it is opened
  again, up to ``reconnect_attempts`` times with exponential backoff
  (tenacity); if that fails the cycle fails with :class:`LibvirtConnectionError`
  and the next cycle starts over;
* a call failing because the connection went away (libvirt's RPC / invalid
  connection errors) drops the connection and raises
  :class:`LibvirtConnectionError`: the cycle fails, the next one reconnects;
* any other libvirt error becomes :class:`LibvirtCallError` naming the URI
  and the call.

URIs are logged with any password removed (``qemu+tls://user:pw@host`` is
legal libvirt syntax).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import libvirt
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from drivers.errors import AgentError

LOG = logging.getLogger(__name__)
T = TypeVar("T")

# Error codes meaning "the connection is gone", not "this call was refused"
# (libvirt virterror.h; VIR_ERR_SYSTEM_ERROR from the RPC layer is a broken socket).
_LOST_CODES = frozenset(
    {
        libvirt.VIR_ERR_NO_CONNECT,
        libvirt.VIR_ERR_INVALID_CONN,
        libvirt.VIR_ERR_RPC,
        libvirt.VIR_ERR_INTERNAL_ERROR,
        libvirt.VIR_ERR_SYSTEM_ERROR,
    }
)
_LOST_DOMAINS = frozenset({libvirt.VIR_FROM_RPC, libvirt.VIR_FROM_REMOTE})
_PASSWORD_RE = re.compile(r"(//[^/:@]*):[^/@]*@")


def _silence(_ctx: object, _err: object) -> None:
    """libvirt's default handler prints every error on stderr; the agent logs its own."""


libvirt.registerErrorHandler(_silence, None)


_EVENT_IMPL = threading.Lock()
_event_impl_registered = False


def register_event_impl() -> None:
    """Register libvirt's default event loop implementation, once per process.

    libvirt delivers domain and node device events, and the close callback,
    only on connections opened *after* an event implementation was
    registered (libvirt's ``virEventRegisterDefaultImpl`` documentation), so
    every :class:`LibvirtConnection` registers it before its first open; the
    loop itself runs only while something watches
    (:mod:`drivers.libvirt.watch`). Without a running loop calls still work:
    the calling thread does its own I/O.
    """
    global _event_impl_registered
    with _EVENT_IMPL:
        if not _event_impl_registered:
            libvirt.virEventRegisterDefaultImpl()
            _event_impl_registered = True


def redact_uri(uri: str) -> str:
    """``uri`` with any password replaced by ``***`` (for logs and messages)."""
    return _PASSWORD_RE.sub(r"\1:***@", uri)


class LibvirtCallError(AgentError):
    """A libvirt call failed.

    Attributes:
        uri: the connection URI (password removed).
        call: the call, e.g. ``virConnectGetCapabilities``.
        code: libvirt's error code (``VIR_ERR_*``), or None.
        reason: libvirt's message.
    """

    def __init__(self, uri: str, call: str, reason: str, code: int | None = None) -> None:
        self.uri = uri
        self.call = call
        self.code = code
        self.reason = reason
        super().__init__(f"libvirt {uri}: {call} failed: {reason}")


class LibvirtConnectionError(LibvirtCallError):
    """The connection could not be opened, or was lost during a call.

    The cycle fails; the next one opens the connection again.
    """


def error_code(exc: libvirt.libvirtError) -> int | None:
    """libvirt's ``VIR_ERR_*`` code of ``exc`` (None when it carries none)."""
    return exc.get_error_code()


def is_connection_lost(exc: libvirt.libvirtError) -> bool:
    """True when ``exc`` means the connection itself is gone (libvirtd restarted or died)."""
    code = exc.get_error_code()
    if code in (libvirt.VIR_ERR_NO_CONNECT, libvirt.VIR_ERR_INVALID_CONN):
        return True
    return code in _LOST_CODES and exc.get_error_domain() in _LOST_DOMAINS


class LibvirtConnection:
    """One libvirt connection, re-opened when it is lost.

    Args:
        uri: the connection URI (``[libvirt] connection_uri``).
        attempts: opening attempts before giving up (``reconnect_attempts``).
        min_delay: seconds before the second attempt, doubled each time.
        max_delay: longest wait between attempts, seconds.
        opener: the function that opens a connection (``libvirt.open``); a
            read-only caller may pass ``libvirt.openReadOnly``.
    """

    def __init__(
        self,
        uri: str,
        attempts: int = 5,
        min_delay: float = 0.5,
        max_delay: float = 8.0,
        opener: Callable[[str], libvirt.virConnect] = libvirt.open,
    ) -> None:
        self.uri = uri
        self.safe_uri = redact_uri(uri)
        self.attempts = attempts
        self.min_delay = min_delay
        self.max_delay = max_delay
        self._opener = opener
        self._conn: libvirt.virConnect | None = None
        self._lock = threading.Lock()
        self.opened = 0
        """How many times a connection was opened (1 + reconnections)."""
        self.on_open: list[Callable[[libvirt.virConnect, int], None]] = []
        """Called with each newly opened connection and :attr:`opened` (1 first, then
        more after each reconnection), outside the lock: the event watcher
        registers its callbacks there (:mod:`drivers.libvirt.watch`)."""
        register_event_impl()

    def _open_once(self) -> libvirt.virConnect:
        conn = self._opener(self.uri)
        if conn is None:  # old bindings returned None instead of raising
            raise libvirt.libvirtError(f"virConnectOpen returned no connection for {self.uri}")
        return conn

    def _alive(self, conn: libvirt.virConnect) -> bool:
        try:
            return conn.isAlive() == 1
        except libvirt.libvirtError:
            return False

    def get(self) -> libvirt.virConnect:
        """An open connection, opening (or re-opening) it with backoff when needed.

        Raises:
            LibvirtConnectionError: every attempt failed; the message has the
                URI, the attempts made and libvirt's last error.
        """
        conn, opened = self._get()
        if opened:
            for hook in list(self.on_open):
                hook(conn, opened)
        return conn

    def _get(self) -> tuple[libvirt.virConnect, int]:
        """The connection, and the new :attr:`opened` count when it was opened now (else 0)."""
        with self._lock:
            if self._conn is not None and self._alive(self._conn):
                return self._conn, 0
            if self._conn is not None:
                LOG.warning("libvirt %s: connection lost; reconnecting", self.safe_uri)
                self._drop()
            retrying = Retrying(
                stop=stop_after_attempt(self.attempts),
                wait=wait_exponential(multiplier=self.min_delay, max=self.max_delay),
                retry=retry_if_exception_type(libvirt.libvirtError),
                before_sleep=lambda rs: LOG.warning(
                    "libvirt %s: cannot connect (attempt %d of %d): %s",
                    self.safe_uri,
                    rs.attempt_number,
                    self.attempts,
                    rs.outcome.exception() if rs.outcome else "",
                ),
                reraise=False,
            )
            try:
                self._conn = retrying(self._open_once)
            except RetryError as exc:
                last = exc.last_attempt.exception()
                code = error_code(last) if isinstance(last, libvirt.libvirtError) else None
                raise LibvirtConnectionError(
                    self.safe_uri,
                    "virConnectOpen",
                    f"{last} (after {self.attempts} attempts; is libvirtd running and "
                    "[libvirt] connection_uri right?)",
                    code,
                ) from None
            self.opened += 1
            if self.opened > 1:
                LOG.warning("libvirt %s: reconnected", self.safe_uri)
            return self._conn, self.opened

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except libvirt.libvirtError:
                pass  # already gone: nothing left to release

    def mark_lost(self) -> None:
        """Forget the connection: the next :meth:`get` opens a new one."""
        with self._lock:
            self._drop()

    def call(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` (a libvirt binding), turning its errors into agent errors.

        Args:
            name: the libvirt API called, for messages (``virConnectListAllDomains``).
            fn: the bound method to call.
            args: its arguments.

        Raises:
            LibvirtConnectionError: the connection was lost (it is dropped).
            LibvirtCallError: libvirt refused the call.
        """
        try:
            return fn(*args)
        except libvirt.libvirtError as exc:
            message = exc.get_error_message() or str(exc)
            if is_connection_lost(exc):
                self.mark_lost()
                raise LibvirtConnectionError(
                    self.safe_uri, name, f"{message}; the next cycle reconnects", error_code(exc)
                ) from None
            raise LibvirtCallError(self.safe_uri, name, message, error_code(exc)) from None

    def close(self) -> None:
        """Close the connection (the next :meth:`get` opens one again)."""
        self.mark_lost()


def listed_xml(
    connection: LibvirtConnection,
    call: str,
    xml_desc: Callable[[int], str],
    what: str,
    vanished: int,
    fate: str,
    warn: Callable[[str], None],
) -> str | None:
    """The XML of an object libvirt listed (a domain, a node device), or None when unusable.

    Objects come and go between the listing and the read (a domain destroyed,
    an mdev removed): that one is warned about and skipped, the rest of the
    cycle goes on.

    Args:
        connection: the connection the call goes through.
        call: libvirt's name of the call, for errors (``virDomainGetXMLDesc``).
        xml_desc: the object's ``XMLDesc`` method.
        what: the object as warnings name it (``domain vm-1 (UUID)``).
        vanished: the error code meaning the object is gone (``VIR_ERR_NO_DOMAIN``).
        fate: what becomes of the object, ending the warning (``left out``).
        warn: where the warning goes.

    Returns:
        The XML text, or None after a warning when the object vanished or the
        call failed.

    Raises:
        LibvirtConnectionError: the connection was lost meanwhile.
    """
    try:
        return connection.call(call, xml_desc, 0)
    except LibvirtConnectionError:
        raise
    except LibvirtCallError as exc:
        if exc.code == vanished:
            warn(f"{what} vanished after it was listed; {fate}")
        else:
            warn(f"{what}: {exc}; {fate}")
        return None
