"""``compute-agent status``: the last cycle's outcome, for people and monitoring checks.

Exit codes follow the monitoring-plugin convention (Nagios, Icinga, Sensu):
0 the last cycle succeeded recently; 1 it succeeded but is stale (older than
``[DEFAULT] status_max_age``, three update intervals by default: the service
is stuck or stopped); 2 it failed; 3 no cycle is recorded in ``state_path``.
"""

from __future__ import annotations

import argparse
import json
import time

from agent.commands.common import add_config_args, load_conf
from agent.state import StateStore

NAME = "status"
HELP = "print the last cycle's outcome; non-zero exit when it failed or is stale"

STATUS_OK = 0
STATUS_STALE = 1
STATUS_FAILED = 2
STATUS_UNKNOWN = 3


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``status``."""
    parser.description = __doc__.split("\n\n", 1)[1].replace("\n", " ")
    add_config_args(parser)
    parser.add_argument(
        "--max-age",
        type=int,
        metavar="SECONDS",
        help="stale after this many seconds (overrides [DEFAULT] status_max_age)",
    )
    parser.add_argument("--json", action="store_true", help="print the stored record as JSON")


def run(args: argparse.Namespace) -> int:
    """Print the last cycle's outcome; the monitoring exit code."""
    conf = load_conf(args)
    record = StateStore(conf.state_path).last_cycle()
    if record is None:
        print(f"UNKNOWN: no cycle recorded in {conf.state_path} (has the service run?)")
        return STATUS_UNKNOWN
    if args.json:
        print(json.dumps(record, indent=2, sort_keys=True))
    max_age = args.max_age or conf.status_max_age or 3 * conf.update_interval
    age = time.time() - float(record.get("finished", 0))
    summary = record.get("summary", "")
    if not record.get("ok"):
        fatal = " (fatal: the service stopped)" if record.get("fatal") else ""
        print(f"FAILED{fatal}, {age:.0f} s ago: {summary}")
        for node in record.get("nodes", []):
            if not node.get("ok"):
                print(f"  {node.get('nodename')}: {node.get('error')}")
        return STATUS_FAILED
    if age > max_age:
        print(f"STALE: last cycle finished {age:.0f} s ago (limit {max_age} s): {summary}")
        return STATUS_STALE
    print(f"OK, {age:.0f} s ago: {summary}")
    return STATUS_OK
