"""``compute-agent placement-serve``: the embedded Placement over HTTP on loopback."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from agent.cli.commands.common import add_config_args, load_conf
from agent.placement.embedded import database_url, make_server
from agent.service.exit_codes import EXIT_OK

NAME = "placement-serve"
HELP = "serve the embedded Placement database over HTTP (for the openstack client)"


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``placement-serve``."""
    parser.description = (
        "Serve the embedded Placement database (state_path/placement.sqlite) over HTTP in "
        "noauth2 mode, so it can be inspected with `openstack --os-placement-api-version "
        "1.39 resource provider list` (token: admin). Loopback only by default."
    )
    add_config_args(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8778, help="port (0: any free port)")


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT."""
    conf = load_conf(args)
    server = make_server(conf.state_path, args.host, args.port)

    def stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() waits for serve_forever to notice, so it cannot run in the
        # handler (same thread). An exception raised here instead could land
        # inside a request and be swallowed by the WSGI stack, never stopping.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(
        f"serving {database_url(conf.state_path)} on http://{args.host}:{server.server_port}",
        flush=True,
    )
    try:
        server.serve_forever()
    finally:
        server.server_close()
    sys.stdout.flush()
    return EXIT_OK
