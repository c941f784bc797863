"""Benchmark: placement-serve's workers, threads and pool, and requests in flight (issue 40).

One private MariaDB; for each point (W workers, T threads per worker, P
database connections per worker, K requests in flight) a fresh database and
``placement-serve --workers W --threads T [--db-pool-size P]`` on it, on
loopback, sharing this machine's cores with the agent (this process), then:

- **unchanged cycle**: an agent of ``--nodes`` flat nodes (bench/many_nodes.py's,
  one instance each) starts, runs its next cycle, then ``--cycles`` unchanged
  cycles (two requests a node); the fastest is the point's figure;
- **cold sync**: a tree of ``--providers`` providers (bench/cold_sync.py's),
  its requests per second.

The first point is always **today's defaults**, the base of every ratio,
measured in the same run (never compare against another run's figures: the
machine is shared): 1 worker and 1 thread (Python's WSGI server, what
``placement-serve --placement-db URL`` ran before issue 40), the pool
Placement gets from oslo.db (``max_pool_size`` and ``max_overflow`` unset:
SQLAlchemy's 5 and 10), and 4 requests in flight (``[placement]
max_concurrent_requests``' default before issue 40). Ratios are speed-ups:
above 1 is better (base seconds / seconds; req/s / base req/s).

Bounded: each point's work is fixed (about 4 requests a node at start-up, 2
a node a cycle, 3 a provider in the cold sync); each cycle stops sending at
``--point-seconds`` (the agent's ``cycle_timeout``), a point skips what is
left of it past ``--point-seconds``, and the sweep skips the points left
past ``--max-seconds``.

Points: ``--points W/T/P/K ...`` (P ``default``: the pool option left out);
or, with any of ``--workers``, ``--threads``, ``--pool``, ``--in-flight``,
every combination of those lists (the others at the defaults' values).
Without either, one axis at a time around placement-serve's defaults on this
machine (:func:`around_defaults`).

Run: ``.venv/bin/python bench/serve_sweep.py`` (a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import resource
import tempfile
import time
from pathlib import Path

from cold_sync import cold_sync
from many_nodes import agent_of, close, run
from support.servers import mariadb_server, served_on

from agent.placement.options import AGENT_OPTS
from agent.placement.serve import THREADS, available_cpus
from tests.helpers.mariadb import MariaDB

DEFAULT = "default"
IN_FLIGHT: int = next(o.default for o in AGENT_OPTS if o.name == "max_concurrent_requests")


@dataclasses.dataclass(frozen=True)
class Point:
    """One server and agent setting: ``pool`` None leaves ``--db-pool-size`` out."""

    workers: int
    threads: int
    pool: int | None
    in_flight: int

    @classmethod
    def parse(cls, text: str) -> Point:
        """``W/T/P/K`` (P ``default`` or a number)."""
        try:
            w, t, p, k = text.split("/")
            return cls(int(w), int(t), None if p == DEFAULT else int(p), int(k))
        except ValueError:
            raise SystemExit(f"--points {text}: give W/T/P/K, e.g. 2/2/default/16") from None

    def options(self) -> list[str]:
        """placement-serve's options past ``--workers``."""
        pool = [] if self.pool is None else ["--db-pool-size", str(self.pool)]
        return ["--threads", str(self.threads), *pool]

    def __str__(self) -> str:
        return f"{self.workers}/{self.threads}/{self.pool or DEFAULT}/{self.in_flight}"


TODAY = Point(1, 1, None, 4)
"""The base: placement-serve's and the agent's defaults before issue 40."""


def around_defaults() -> list[Point]:
    """One axis at a time around the defaults: W = this machine's CPUs, T = 2, the
    default pool, K = ``[placement] max_concurrent_requests``' default (64)."""
    w, t, k = available_cpus(), THREADS, IN_FLIGHT
    points = [Point(w, 1, None, 4), Point(w, t, None, 4), Point(w, t, None, 16)]
    points += [Point(w, t, None, k), Point(w, 1, None, k), Point(w, 4, None, k)]
    points += [Point(n, t, None, k) for n in sorted({1, 2 * w} - {w})]
    points.append(Point(w, t, 1, k))  # fewer connections than threads
    return points


def points_from(args: argparse.Namespace) -> list[Point]:
    """The points asked for, today's defaults first."""
    if args.points:
        asked = [Point.parse(p) for p in args.points]
    elif any(v is not None for v in (args.workers, args.threads, args.pool, args.in_flight)):

        def listed(value: str | None, default: str) -> list[str]:
            return (value or default).split(",")

        grid = itertools.product(
            listed(args.workers, str(available_cpus())),
            listed(args.threads, str(THREADS)),
            listed(args.pool, DEFAULT),
            listed(args.in_flight, str(IN_FLIGHT)),
        )
        asked = [Point.parse("/".join(p)) for p in grid]
    else:
        asked = around_defaults()
    return [TODAY, *[p for p in asked if p != TODAY]]


@dataclasses.dataclass
class Figures:
    """What one point measured (None: not reached within its time)."""

    unchanged: float | None = None
    unchanged_requests: int = 0
    cold_rps: float | None = None
    note: str = ""


def measure(db: MariaDB, point: Point, args: argparse.Namespace) -> Figures:
    """The two workloads on a fresh database served as ``point`` says."""
    figures = Figures()
    start = time.monotonic()
    print(f"point {point} (workers/threads/pool/in flight):", flush=True)
    with (
        served_on(db, point.workers, point.options()) as served,
        tempfile.TemporaryDirectory() as t,
    ):
        tmp = Path(t)
        tracker, _driver = agent_of(
            tmp, served.client(), args.nodes, "sw", point.in_flight, args.point_seconds
        )
        try:
            cycles = [("start-up", True), ("next cycle", False)]
            cycles += [("unchanged cycle", False)] * args.cycles
            for label, startup in cycles:
                if time.monotonic() - start > args.point_seconds:
                    figures.note = f"stopped after {args.point_seconds:.0f} s"
                    return figures
                requests, seconds, ok = run(tracker, label, startup=startup)
                if not ok:
                    figures.note = f"{label} NOT OK"
                    return figures
                if label == "unchanged cycle":
                    figures.unchanged = min(seconds, figures.unchanged or seconds)
                    figures.unchanged_requests = requests
        finally:
            close(tracker)
        if time.monotonic() - start > args.point_seconds:
            figures.note = f"no cold sync: past {args.point_seconds:.0f} s"
            return figures
        seconds, requests, _name = cold_sync(served, t, args.providers, point.in_flight)
        figures.cold_rps = requests / seconds
        print(f"  cold sync              {requests:>6} requests {seconds:8.2f} s", flush=True)
    return figures


def ratio(value: float | None, base: float | None, higher_is_better: bool) -> str:
    """``1.23x`` against ``base``, or ``-`` when either is missing."""
    if not value or not base:
        return "-"
    return f"{(value / base if higher_is_better else base / value):.2f}x"


def table(results: list[tuple[Point, Figures]], args: argparse.Namespace) -> None:
    """The figures and each point's ratio against the first (today's defaults)."""
    base = results[0][1]
    print(
        f"\n{args.nodes} nodes unchanged (best of {args.cycles}), cold sync of "
        f"{args.providers} providers; ratios against {TODAY} (today's defaults):"
    )
    print("| workers | threads | pool | in flight | unchanged s | ratio | cold req/s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for point, f in results:
        unchanged = f"{f.unchanged:.2f}" if f.unchanged is not None else "-"
        cold = f"{f.cold_rps:.0f}" if f.cold_rps is not None else "-"
        print(
            f"| {point.workers} | {point.threads} | {point.pool or DEFAULT} | {point.in_flight} "
            f"| {unchanged} | {ratio(f.unchanged, base.unchanged, False)} | {cold} "
            f"| {ratio(f.cold_rps, base.cold_rps, True)} |" + (f" {f.note}" if f.note else "")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100, help="nodes of the agent")
    parser.add_argument("--cycles", type=int, default=2, help="unchanged cycles a point")
    parser.add_argument("--providers", type=int, default=200, help="providers of the cold sync")
    parser.add_argument("--points", nargs="+", metavar="W/T/P/K", help="the points to measure")
    parser.add_argument("--workers", help="workers to combine, comma-separated")
    parser.add_argument("--threads", help="threads to combine, comma-separated")
    parser.add_argument("--pool", help="pool sizes to combine, comma-separated (or default)")
    parser.add_argument("--in-flight", help="requests in flight to combine, comma-separated")
    parser.add_argument("--point-seconds", type=float, default=120.0, help="a point's bound")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="the sweep's bound")
    args = parser.parse_args()
    points = points_from(args)
    print(
        f"{len(points)} points on {available_cpus()} CPUs (shared: compare ratios within "
        "this run only); Placement on MariaDB, loopback"
    )
    start = time.monotonic()
    results: list[tuple[Point, Figures]] = []
    with mariadb_server() as db:
        for point in points:
            if time.monotonic() - start > args.max_seconds:
                results.append((point, Figures(note=f"skipped: past {args.max_seconds:.0f} s")))
                continue
            results.append((point, measure(db, point, args)))
    table(results, args)
    print(f"sweep {time.monotonic() - start:.0f} s")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
