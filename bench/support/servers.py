"""Placement on MariaDB under gunicorn, for the scale benchmarks (issue #16).

The same private ``mariadbd`` and ``placement-serve`` the functional tests
start (tests/helpers/mariadb.py, tests/helpers/served.py): one code for
both, so a benchmark measures the server the tests check.
"""

from __future__ import annotations

import contextlib
import resource
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.helpers.mariadb import MariaDB  # noqa: E402
from tests.helpers.served import ServedPlacement  # noqa: E402


@contextlib.contextmanager
def placement_on_mariadb(
    workers: int, options: Sequence[str] = ("--threads", "1")
) -> Iterator[ServedPlacement]:
    """``placement-serve --placement-db mysql+pymysql://... --workers N`` on a fresh MariaDB.

    ``options``: more of placement-serve's options (one thread per worker
    without them). The server's ``mariadb`` attribute is the database
    server (its ``proc`` for :func:`cpu_seconds`).
    """
    with mariadb_server() as db, served_on(db, workers, options) as served:
        yield served


@contextlib.contextmanager
def mariadb_server() -> Iterator[MariaDB]:
    """A private ``mariadbd`` on a temporary directory, stopped at the end."""
    with tempfile.TemporaryDirectory() as tmp:
        db = MariaDB(Path(tmp) / "mariadb")
        db.start()
        try:
            yield db
        finally:
            db.stop()


@contextlib.contextmanager
def served_on(
    db: MariaDB, workers: int, options: Sequence[str] = ("--threads", "1")
) -> Iterator[ServedPlacement]:
    """``placement-serve`` with ``workers`` and ``options`` on a new database of ``db``
    (Placement's schema in it), stopped at the end."""
    with tempfile.TemporaryDirectory() as tmp:
        served = ServedPlacement(
            Path(tmp) / "placement", database=db.database(), workers=workers, options=options
        )
        served.mariadb = db  # type: ignore[attr-defined]
        try:
            served.start()
            yield served
        finally:
            served.stop()


def server_cpu_seconds(served: ServedPlacement) -> float:
    """CPU seconds used so far by the Placement server's processes (master and workers)."""
    assert served.proc is not None
    return cpu_seconds(served.proc.pid)


def database_cpu_seconds(served: ServedPlacement) -> float:
    """CPU seconds used so far by the MariaDB server under ``served``."""
    return cpu_seconds(served.mariadb.proc.pid)  # type: ignore[attr-defined]


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its children so far."""
    proc = psutil.Process(pid)
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def own_cpu_seconds() -> float:
    """CPU seconds (user + system) this process, the agent's side, used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class CpuSplit:
    """CPU used by Placement, MariaDB and this process (the agent) since construction."""

    def __init__(self, served: ServedPlacement) -> None:
        self.served = served
        self.start = self._now()

    def _now(self) -> tuple[float, float, float]:
        served = self.served
        return server_cpu_seconds(served), database_cpu_seconds(served), own_cpu_seconds()

    def per_request(self, requests: int) -> tuple[float, float, float]:
        """``(Placement, MariaDB, agent)`` CPU ms per request since construction."""
        now = self._now()
        return tuple(  # type: ignore[return-value]
            (b - a) * 1000 / max(requests, 1) for a, b in zip(self.start, now, strict=True)
        )
