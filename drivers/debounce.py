"""One call after a burst: events that come in hundreds (udev, inotify) become one callback."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

LOG = logging.getLogger(__name__)


class Debouncer:
    """Calls ``callback(keys)`` once, ``delay`` seconds after the last :meth:`trigger`.

    Args:
        callback: called with the keys triggered since the last call, sorted,
            on a timer thread.
        delay: seconds of quiet required (0 calls at once, on the timer thread).
    """

    def __init__(self, callback: Callable[[tuple[str, ...]], None], delay: float) -> None:
        self._callback = callback
        self._delay = delay
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._keys: set[str] = set()

    def trigger(self, key: str = "") -> None:
        """Restart the quiet period, adding ``key`` (empty adds none) to the next call's."""
        with self._lock:
            if key:
                self._keys.add(key)
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self._delay, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            self._timer = None
            keys, self._keys = tuple(sorted(self._keys)), set()
        try:
            self._callback(keys)
        except Exception:  # a failing callback must not kill the monitor thread
            LOG.exception("debounced callback failed")

    def cancel(self) -> None:
        """Drop a pending call."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._keys = set()
