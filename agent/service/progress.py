"""Progress of long work: a rich bar on a terminal, a log line now and then otherwise.

Nothing shows for work that ends within ``delay`` seconds, so a steady
cycle prints nothing more than before. The work itself is not touched: a
watcher thread polls a counter the work keeps anyway (Placement requests
sent, files written) and draws or logs it; the hot path pays one thread
start per piece of work, never a call per step.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from oslo_context import context as oslo_context
from rich.console import Console
from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from agent.conf import logs

LOG = logging.getLogger(__name__)

DEFAULT_DELAY = 3.0
"""Seconds of work before anything is shown: "longer than a few seconds"."""
DEFAULT_INTERVAL = 10.0
"""Seconds between two log lines when there is no terminal."""


class Progress:
    """Context manager showing that ``description`` is still going on.

    Args:
        description: what is being done, e.g. ``"reshape of node cn1"``.
        count: returns how far the work is (a counter that only grows);
            None shows elapsed time only.
        unit: what ``count`` counts, e.g. ``"placement requests"``.
        delay: seconds before the bar or the first log line appears
            (:data:`DEFAULT_DELAY` when None).
        interval: seconds between log lines, no terminal (:data:`DEFAULT_INTERVAL`).
        stream: where a bar is drawn; ``sys.stderr`` by default, so that
            stdout keeps only the command's output.
        terminal: force a bar (True) or log lines (False); by default a bar
            exactly when ``stream`` is a terminal.
        logger: where the log lines go.
    """

    def __init__(
        self,
        description: str,
        count: Callable[[], int] | None = None,
        unit: str = "placement requests",
        delay: float | None = None,
        interval: float | None = None,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        logger: logging.Logger = LOG,
    ) -> None:
        self.description = description
        self.count = count
        self.unit = unit
        self.delay = DEFAULT_DELAY if delay is None else delay
        self.interval = DEFAULT_INTERVAL if interval is None else interval
        self.stream = stream or sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.logger = logger
        self.lines = 0
        """Log lines written so far (no terminal)."""
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0
        self._base = 0
        self._context: oslo_context.RequestContext | None = None

    def _so_far(self) -> int:
        return (self.count() - self._base) if self.count is not None else 0

    def __enter__(self) -> Progress:
        self._start = time.monotonic()
        self._base = self.count() if self.count is not None else 0
        # The watcher logs for the work: same request id on its lines.
        self._context = logs.current_cycle_context()
        self._thread = threading.Thread(target=self._watch, name="progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        logs.adopt_cycle_context(self._context)
        if self._done.wait(self.delay):
            return
        if self.terminal:
            self._draw()
        else:
            self._log()

    def _log(self) -> None:
        while True:
            elapsed = time.monotonic() - self._start
            what = f", {self._so_far()} {self.unit}" if self.count is not None else ""
            self.logger.info("%s: still running after %.0f s%s", self.description, elapsed, what)
            self.lines += 1
            if self._done.wait(self.interval):
                return

    def _draw(self) -> None:
        columns = [
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed:.0f} " + self.unit if self.count is not None else ""),
            TimeElapsedColumn(),
        ]
        console = Console(file=self.stream, force_terminal=True)
        with RichProgress(*columns, console=console, transient=True) as bar:
            rerouted = self._route_logs_through(sys.stderr)
            try:
                task = bar.add_task(self.description, total=None)
                while True:
                    bar.update(task, completed=self._so_far())
                    if self._done.wait(0.2):
                        return
            finally:
                for handler, stream in rerouted:
                    handler.setStream(stream)

    def _route_logs_through(self, proxy: TextIO) -> list[tuple[logging.StreamHandler, TextIO]]:
        """Point the log handlers that write where the bar is drawn at rich's proxy.

        While the bar is live, rich replaces ``sys.stderr`` with a proxy that
        prints each line above the bar; log handlers keep the stream they were
        made with, and their lines would otherwise overwrite the bar.

        Returns:
            ``(handler, its stream before)`` pairs, to put back.
        """
        if proxy is self.stream:  # not redirected: nothing to do
            return []
        rerouted: list[tuple[logging.StreamHandler, TextIO]] = []
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.FileHandler):
                continue
            if isinstance(handler, logging.StreamHandler) and handler.stream is self.stream:
                handler.setStream(proxy)
                rerouted.append((handler, self.stream))
        return rerouted
