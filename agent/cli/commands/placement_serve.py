"""``compute-agent placement-serve``: Placement over HTTP on loopback (embedded or a database)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from agent.cli.commands.common import add_config_args, load_conf
from agent.model.exceptions import ConfigError
from agent.placement.embedded import (
    database_url,
    make_server,
    make_wsgi_server,
    placement_app_for_url,
    safe_url,
)
from agent.placement.serve import check_workers, serve_workers, sync_schema
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
        default=1,
        help="worker processes (gunicorn) for a database server; 1: one process "
        "(the only choice on SQLite)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT.

    Raises:
        ConfigError: SQLite with several workers, or a database that cannot
            be opened, holds no schema, or whose migrations failed.
    """
    conf = load_conf(args)
    url = args.placement_db or database_url(conf.state_path)
    if args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: give 1 or more worker processes")
    if args.placement_db:
        check_workers(url, args.workers)
        if args.sync_schema:
            sync_schema(url)
        if args.workers > 1:
            print(f"serving {safe_url(url)} on http://{args.host}:{args.port}", flush=True)
            serve_workers(url, args.host, args.port, args.workers)
            return EXIT_OK
        server = make_wsgi_server(placement_app_for_url(url), args.host, args.port)
    else:
        check_workers(url, args.workers)
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
