"""``compute-agent run``: the service (periodic resource tracking)."""

from __future__ import annotations

import argparse

from agent.cli.commands.common import add_config_args, add_driver_args, load_conf
from agent.service.daemon import Service

NAME = "run"
HELP = "run the agent: keep Placement in step with this host on a schedule (the service)"


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``run``."""
    parser.description = (
        "Run resource-tracking cycles every [DEFAULT] update_interval seconds: discover, "
        "write the provider tree, audit the instances' allocations. SIGTERM/SIGINT finish "
        "the running cycle and exit 0; SIGHUP reloads the configuration. Exit codes: 0 "
        "stopped cleanly (or --once succeeded), 1 --once failed, 2 bad configuration, 4 a "
        "reshape is needed outside start-up (restart to perform it), 5 a reshape failed."
    )
    add_config_args(parser)
    add_driver_args(parser)
    parser.add_argument(
        "--once",
        action="store_true",
        help="run a single start-up cycle and exit with its status",
    )


def run(args: argparse.Namespace) -> int:
    """Run the service until stopped (or one cycle with ``--once``); its exit code."""
    # quiet=False: a service's log says what each cycle did (INFO); library noise
    # (the embedded Placement's per-request lines, alembic) stays at WARNING
    # through [DEFAULT] default_log_levels.
    return Service(lambda: load_conf(args, quiet=False)).run(once=args.once)
