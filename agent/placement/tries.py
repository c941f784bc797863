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
"""HTTP statuses worth another try."""

FIRST_WAIT = 0.25
"""Upper bound of the first random wait between tries, seconds; it doubles per try."""


class Retry(Exception):
    """Raised inside the retry loop for an answer worth another try (status 0: no answer)."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {detail}")


class TryLimits:
    """How many tries a request gets, how long apart, and until when.

    Args:
        retries: retries after the first try.
        retry_max_wait: longest wait between two tries, seconds.

    Attributes:
        abort: set by the service on SIGTERM: no new try starts and a wait
            between tries ends at once.
        deadline: monotonic time after which no new try starts (the cycle's
            deadline), or None.
    """

    def __init__(self, retries: int, retry_max_wait: float) -> None:
        self.retries = retries
        self.retry_max_wait = retry_max_wait
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

        Waits are full-jitter exponential (:data:`FIRST_WAIT`, doubling, at
        most :attr:`retry_max_wait`); ``before_sleep`` is told of each retry.
        """
        return tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(Retry),
            stop=tenacity.stop_after_attempt(self.retries + 1) | self._out_of_time,
            wait=tenacity.wait_random_exponential(multiplier=FIRST_WAIT, max=self.retry_max_wait),
            # A wait that SIGTERM ends at once (Event.wait measures monotonic time).
            sleep=self.abort.wait,
            before_sleep=before_sleep,
            reraise=True,
        )
