"""``compute-agent placement-serve``: Placement over HTTP on loopback (embedded or a database)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from agent.cli.commands.common import add_config_args, load_conf
from agent.placement.embedded import (
    database_url,
    make_server,
    make_wsgi_server,
    placement_app_for_url,
    safe_url,
)
from agent.placement.serve import (
    KEEPALIVE,
    MAX_OVERFLOW,
    POOL_SIZE,
    THREADS,
    serve_workers,
    settings_for,
    sync_schema,
)
from agent.service.exit_codes import EXIT_OK

NAME = "placement-serve"
HELP = "serve the embedded Placement database, or another one, over HTTP (noauth2)"


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``placement-serve``."""
    parser.description = (
        "Serve the embedded Placement database (state_path/placement.sqlite), or the "
        "database of --placement-db, over HTTP in noauth2 mode, so it can be inspected with "
        "`openstack --os-placement-api-version 1.39 resource provider list` (token: admin) "
        "or used by agents and benchmarks. Loopback only by default."
    )
    add_config_args(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8778, help="port (0: any free port)")
    parser.add_argument(
        "--placement-db",
        metavar="URL",
        help="a database URL instead of the embedded file, e.g. "
        "mysql+pymysql://placement:PASSWORD@127.0.0.1/placement (MariaDB/MySQL via PyMySQL)",
    )
    parser.add_argument(
        "--sync-schema",
        action="store_true",
        help="create or upgrade Placement's schema in --placement-db first "
        "(placement-manage db sync); without it the schema must be there",
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="worker processes (gunicorn) for a database server (default: the CPUs this "
        "process may run on; 1 on SQLite, its only choice)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help=f"threads per worker process for a database server (default: {THREADS}; "
        "1 on SQLite); --workers 1 --threads 1 serves one request at a time without gunicorn",
    )
    parser.add_argument(
        "--keepalive",
        type=int,
        default=KEEPALIVE,
        metavar="SECONDS",
        help="seconds an idle connection is kept open for its next request (gunicorn; "
        "0: closed after each); keep it above the idle timeout of a proxy in front",
    )
    parser.add_argument(
        "--db-pool-size",
        type=int,
        metavar="N",
        help=f"database connections each worker keeps open (default: {POOL_SIZE}, or "
        "--threads if more; [placement_database] max_pool_size)",
    )
    parser.add_argument(
        "--db-max-overflow",
        type=int,
        default=MAX_OVERFLOW,
        metavar="N",
        help="connections a worker may open beyond its pool on a burst, closed when "
        "returned ([placement_database] max_overflow)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT.

    Raises:
        ConfigError: a count out of range, SQLite with several workers or
            threads (:func:`~agent.placement.serve.settings_for`), or a database that cannot
            be opened, holds no schema, or whose migrations failed.
    """
    conf = load_conf(args)
    url = args.placement_db or database_url(conf.state_path)
    settings = settings_for(
        url, args.workers, args.threads, args.keepalive, args.db_pool_size, args.db_max_overflow
    )
    if args.placement_db:
        if args.sync_schema:
            sync_schema(url)
        if settings.gunicorn:
            print(f"serving {safe_url(url)} on http://{args.host}:{args.port}", flush=True)
            serve_workers(url, args.host, args.port, settings)
            return EXIT_OK
        server = make_wsgi_server(
            placement_app_for_url(url, pool=settings.pool), args.host, args.port
        )
    else:
        server = make_server(conf.state_path, args.host, args.port)

    def stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() waits for serve_forever to notice, so it cannot run in the
        # handler (same thread). An exception raised here instead could land
        # inside a request and be swallowed by the WSGI stack, never stopping.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"serving {safe_url(url)} on http://{args.host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    sys.stdout.flush()
    return EXIT_OK
