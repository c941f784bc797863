"""Signals of the service: SIGTERM and SIGINT stop it, SIGHUP reloads the configuration.

Handlers only set flags and wake the worker (the service's ``stop`` and
``reload``): the running cycle is never interrupted from a handler. Python
runs them in the main thread, so only a service running there installs them;
tests running the service in a thread call ``stop`` and ``reload`` instead.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from types import FrameType

LOG = logging.getLogger(__name__)

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def install(stop: Callable[[], None], reload: Callable[[], None]) -> None:
    """Make SIGTERM and SIGINT call ``stop``, SIGHUP call ``reload``.

    Raises:
        ValueError: not called from the main thread (Python's rule for handlers).
    """

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            LOG.info("SIGHUP: reloading the configuration")
            reload()
        else:
            LOG.info("%s: stopping after the current cycle", signal.Signals(signum).name)
            stop()

    for signum in HANDLED:
        signal.signal(signum, on_signal)
