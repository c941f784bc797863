"""The one generation-conflict retry: re-read, then write again (tenacity).

Placement refuses a write based on a stale provider or consumer generation
with 409 ``placement.concurrent_update`` (:class:`GenerationConflict`). The
answer is always the same: wait a little (full jitter, so two agents racing
for one consumer drift apart), read what Placement holds now, decide again
what to write and send it, a bounded number of times (DESIGN.md "Placement
facts": generations are optimistic concurrency, never to be overwritten).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import tenacity

from agent.placement.errors import GenerationConflict

LOG = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_WAIT = 0.1
"""Upper bound of the first random wait, seconds; each further retry doubles it."""


def retry_on_conflict(
    attempt: Callable[[], T],
    *,
    retries: int,
    sleep: Callable[[float], None],
    what: str,
    reread: Callable[[], None] | None = None,
    is_conflict: Callable[[BaseException], bool] | None = None,
) -> T:
    """Run ``attempt``; after a generation conflict wait, ``reread`` and run it again.

    Args:
        attempt: one read-decide-write (or decide-write after ``reread``);
            its value is returned.
        retries: tries after the first; the last conflict is raised.
        sleep: how to wait, seconds (tests pass a no-op); the wait before
            retry ``n`` (from 1) is uniform in ``[0, FIRST_WAIT * 2**(n-1)]``.
        what: what conflicted, for the log (``"provider UUID"``, ``"consumer UUID"``).
        reread: refreshes what ``attempt`` bases its write on, called after
            the wait and before each retry; None when ``attempt`` reads itself.
        is_conflict: which exceptions are a generation conflict, when not
            only :class:`GenerationConflict` itself (``POST /reshaper`` wraps it
            in ``ReshapeFailed``).

    Raises:
        GenerationConflict: still conflicting after ``retries`` retries (or
            what ``is_conflict`` accepts).
        Whatever else ``attempt`` or ``reread`` raise, at once.
    """

    def before(state: tenacity.RetryCallState) -> None:
        if reread is not None and state.attempt_number > 1:
            reread()

    def log(_state: tenacity.RetryCallState) -> None:
        LOG.info("generation conflict on %s; re-reading and retrying", what)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(is_conflict or _is_generation_conflict),
        stop=tenacity.stop_after_attempt(retries + 1),
        wait=tenacity.wait_random_exponential(multiplier=FIRST_WAIT),
        sleep=sleep,
        before=before,
        before_sleep=log,
        reraise=True,
    )
    return retrying(attempt)


def _is_generation_conflict(exc: BaseException) -> bool:
    return isinstance(exc, GenerationConflict)
