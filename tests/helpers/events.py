"""The service running in a thread with a watching driver, and the requests it sends.

Events tests (tests/functional/test_events.py) and ``bench/events.py`` run the
real service (:class:`agent.service.daemon.Service`, no signal handlers) with
the interval set to an hour, so whatever reaches Placement in the meantime
came through the event path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.conf import config as agent_config
from agent.placement.client import RequestEvent
from agent.service.daemon import Service
from drivers.base import ComputeDriver
from tests.helpers.placement_http import http_get


def service_ini(
    path: Path, state: Path, placement_url: str, *sections: str, **default: Any
) -> Path:
    """An INI for the service on ``placement_url`` (noauth2 admin), cycles an hour apart.

    Args:
        sections: more INI text (``"[compute]\\ndriver = fake"``...).
        default: more ``[DEFAULT]`` options.
    """
    lines = [
        f"[DEFAULT]\nstate_path = {state}\nupdate_interval = 3600\nupdate_jitter = 0\n",
        *(f"{k} = {v}\n" for k, v in default.items()),
        "[metrics]\nlisten =\n",
        f"[placement]\nauth_type = admin_token\nendpoint = {placement_url}\ntoken = admin\n"
        # The session's in-process Placement is SQLite behind wsgi-intercept, in
        # this process: one request at a time, as the embedded mode sends.
        "noauth_roles = admin,service\nmax_concurrent_requests = 1\n",
        *(f"{s.strip()}\n" for s in sections),
    ]
    path.write_text("".join(lines))
    return path


class Requests:
    """Every Placement request the service's client answered, as ``(method, template)``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __call__(self, event: RequestEvent) -> None:
        if event.kind == "answer":
            with self._lock:
                self.seen.append((event.method, event.template))

    def count(self, method: str | None = None, template: str | None = None) -> int:
        """Requests of ``method`` to ``template`` (None: any)."""
        with self._lock:
            return sum(
                1
                for m, t in self.seen
                if (method is None or m == method) and (template is None or t == template)
            )

    def allocation_writes(self) -> int:
        """Allocation writes sent: ``PUT`` and ``DELETE /allocations/{consumer}``, and
        ``POST /allocations`` (several consumers in one)."""
        one = self.count("PUT", "/allocations/{consumer}")
        return (
            one
            + self.count("DELETE", "/allocations/{consumer}")
            + self.count("POST", "/allocations")
        )


class ThreadedService:
    """``compute-agent run`` in a thread of this process.

    Args:
        ini: its configuration file.
        driver_factory: builds the driver (None: ``[compute] driver``).

    Attributes:
        svc: the service.
        requests: the Placement requests it sent.
        result: ``{"code": exit code}`` once :meth:`Service.run` returned.
    """

    def __init__(
        self, ini: Path, driver_factory: Callable[[Any], ComputeDriver] | None = None
    ) -> None:
        self.svc = Service(
            lambda: agent_config.load([str(ini)]),
            driver_factory=driver_factory,
            install_signals=False,
        )
        self.requests = Requests()
        self.svc.metrics.on_request = self._observe  # type: ignore[method-assign]
        self.result: dict[str, int] = {}
        self.thread = threading.Thread(
            target=lambda: self.result.setdefault("code", self.svc.run()), daemon=True
        )

    def _observe(self, event: RequestEvent) -> None:
        self.requests(event)
        self.svc.metrics.placement.on_request(event)

    def start(self, cycles: int = 1) -> ThreadedService:
        """Start it and wait for its first ``cycles`` cycles."""
        self.thread.start()
        self.wait_cycles(cycles)
        return self

    def wait_cycles(self, n: int, timeout: float = 60.0) -> None:
        wait_until(lambda: self.svc.cycles >= n, timeout, f"{n} cycle(s)", self.thread)

    def event_updates(self, outcome: str = "ok") -> float:
        """Batches of targeted updates made, by outcome (the service's metric)."""
        value = self.svc.metrics.registry.get_sample_value(
            "compute_agent_event_updates_total", {"outcome": outcome}
        )
        return value or 0.0

    def stop(self) -> int | None:
        self.svc.stop()
        self.thread.join(timeout=30)
        return self.result.get("code")


def wait_until(
    check: Callable[[], Any], timeout: float, what: str, thread: threading.Thread | None = None
) -> float:
    """Poll ``check`` every 10 ms until it is true; the seconds it took.

    Raises:
        AssertionError: ``timeout`` seconds passed, or ``thread`` ended meanwhile.
    """
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, f"timed out after {timeout} s waiting for {what}"
        assert thread is None or thread.is_alive(), f"the service stopped while waiting for {what}"
        time.sleep(0.01)
    return time.monotonic() - start


def held_on(base: str, consumer: str) -> dict[str, dict[str, int]]:
    """``{provider UUID: {resource class: amount}}`` Placement holds for ``consumer``."""
    body = http_get(base, f"/allocations/{consumer}")
    return {rp: a["resources"] for rp, a in body.get("allocations", {}).items()}
