"""When a Placement request is tried again, and when no further try starts.

Transport failures and 502/503/504 answers are worth another try: a
restarting Placement or a load balancer between backends answers so for a
moment. 4xx answers never are (the request itself is wrong, or a generation
conflict that only a re-read can resolve: :mod:`agent.placement.conflicts`).
Tries stop after a bounded number, at SIGTERM, and at the cycle's deadline
(``[DEFAULT] cycle_timeout``), so a stopping agent or a late cycle never
waits on Placement.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import tenacity

from agent.placement.errors import PlacementUnavailable

RETRY_STATUSES = frozenset({502, 503, 504})
"""HTTP statuses worth another try when ``[placement] status_code_retries`` is unset."""

KEYSTONEAUTH_STATUSES = frozenset({429, 503})
"""What keystoneauth retries when ``status_code_retries`` is set and ``retriable_status_codes``
is not (``keystoneauth1/session.py`` ``_RETRIABLE_STATUS_CODES``), as nova's client does."""

FIRST_WAIT = 0.25
"""Upper bound of the first random wait between tries, seconds; it doubles per try."""


class Retry(Exception):
    """Raised inside the retry loop for an answer worth another try (status 0: no answer)."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {detail}")


def _no_answer(state: tenacity.RetryCallState) -> bool:
    """True when the failed try got no answer (a transport failure), False for a status."""
    exc = state.outcome.exception() if state.outcome is not None else None
    return getattr(exc, "status", 0) == 0


class TryLimits:
    """How many tries a request gets, how long apart, and until when.

    nova's ``[placement]`` retry options (keystoneauth's adapter options, which nova 34's
    client hands to keystoneauth: ``keystoneauth1/session.py`` ``_send_request``) are
    honoured here, by the agent's own transport: ``connect_retries`` tries after no
    answer, ``connect_retry_delay`` seconds apart; ``status_code_retries`` tries after a
    status of ``retriable_status_codes`` (keystoneauth's 429 and 503 when unset),
    ``status_code_retry_delay`` seconds apart. Unset (nova's default, where keystoneauth
    would not retry), the agent's own ``request_retries`` apply to both, after transport
    failures and 502/503/504, with full-jitter exponential waits up to ``retry_max_wait``.

    Args:
        retries: ``[placement] request_retries``.
        retry_max_wait: longest jittered wait between two tries, seconds.
        connect_retries: ``[placement] connect_retries`` (None: unset).
        connect_retry_delay: ``[placement] connect_retry_delay``, seconds (None: jittered).
        status_code_retries: ``[placement] status_code_retries`` (None: unset).
        status_code_retry_delay: ``[placement] status_code_retry_delay``, seconds.
        retriable_status_codes: ``[placement] retriable_status_codes`` (None: unset).

    Attributes:
        connect_retries: retries after no answer.
        status_retries: retries after a status of :attr:`statuses`.
        statuses: HTTP statuses worth another try.
        abort: set by the service on SIGTERM: no new try starts and a wait
            between tries ends at once.
        deadline: monotonic time after which no new try starts (the cycle's
            deadline), or None.
    """

    def __init__(
        self,
        retries: int,
        retry_max_wait: float,
        connect_retries: int | None = None,
        connect_retry_delay: float | None = None,
        status_code_retries: int | None = None,
        status_code_retry_delay: float | None = None,
        retriable_status_codes: list[int] | None = None,
    ) -> None:
        self.retries = retries
        self.retry_max_wait = retry_max_wait
        self.connect_retries = retries if connect_retries is None else connect_retries
        self.connect_delay = connect_retry_delay
        self.status_retries = retries if status_code_retries is None else status_code_retries
        self.status_delay = status_code_retry_delay
        if retriable_status_codes:
            self.statuses = frozenset(retriable_status_codes)
        elif status_code_retries is not None:
            self.statuses = KEYSTONEAUTH_STATUSES
        else:
            self.statuses = RETRY_STATUSES
        self.abort = threading.Event()
        self.deadline: float | None = None

    def check(self, method: str, path: str) -> None:
        """Refuse to start a try after SIGTERM or past the deadline.

        Raises:
            PlacementUnavailable: naming which of the two stopped it.
        """
        if self.abort.is_set():
            raise PlacementUnavailable(
                f"placement {method} {path}: not sent, the agent is stopping"
            )
        if self._past_deadline():
            raise PlacementUnavailable(
                f"placement {method} {path}: not sent, the cycle's deadline passed "
                "([DEFAULT] cycle_timeout); the next cycle carries on"
            )

    def _past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def _out_of_time(self, _state: tenacity.RetryCallState) -> bool:
        """tenacity's stop condition: no further try after SIGTERM or the deadline."""
        return self.abort.is_set() or self._past_deadline()

    def retrying(
        self, before_sleep: Callable[[tenacity.RetryCallState], None]
    ) -> tenacity.Retrying:
        """A tenacity loop that tries again after :class:`Retry`, the last one re-raised.

        Transport failures and statuses are counted apart (:attr:`connect_retries`,
        :attr:`status_retries`); a fixed delay where one is set, else full-jitter
        exponential waits (:data:`FIRST_WAIT`, doubling, at most
        :attr:`retry_max_wait`); ``before_sleep`` is told of each retry.
        """
        used = {True: 0, False: 0}  # retries so far: after no answer, after a status
        jitter = tenacity.wait_random_exponential(multiplier=FIRST_WAIT, max=self.retry_max_wait)

        def stop(state: tenacity.RetryCallState) -> bool:
            if self._out_of_time(state):
                return True
            no_answer = _no_answer(state)
            used[no_answer] += 1
            return used[no_answer] > (self.connect_retries if no_answer else self.status_retries)

        def wait(state: tenacity.RetryCallState) -> float:
            fixed = self.connect_delay if _no_answer(state) else self.status_delay
            return fixed if fixed is not None else jitter(state)

        return tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(Retry),
            stop=stop,
            wait=wait,
            # A wait that SIGTERM ends at once (Event.wait measures monotonic time).
            sleep=self.abort.wait,
            before_sleep=before_sleep,
            reraise=True,
        )
