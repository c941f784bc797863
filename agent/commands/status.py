"""``compute-agent status``: the last cycle's outcome, for people and monitoring checks.

Exit codes follow the monitoring-plugin convention (Nagios, Icinga, Sensu):
0 the last cycle succeeded recently; 1 (warning) it is stale (older than
``[DEFAULT] status_max_age``, three update intervals by default: the service
is stuck or stopped, or cannot save its state) or degraded (a write was
refused, or the state could not be saved); 2 it failed; 3 no cycle is
recorded in ``state_path``. Ages are measured on the monotonic clock.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from agent.commands.common import add_config_args, load_conf
from agent.state import StateStore, record_age

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
    age = record_age(record, time.time(), time.monotonic())
    summary = record.get("summary", "")
    if not record.get("ok"):
        fatal = " (fatal: the service stopped)" if record.get("fatal") else ""
        print(f"FAILED{fatal}, {age:.0f} s ago: {summary}")
        for node in record.get("nodes", []):
            if not node.get("ok"):
                print(f"  {node.get('nodename')}: {node.get('error')}")
        return STATUS_FAILED
    if age > max_age:
        cause = _state_dir_problem(Path(conf.state_path))
        print(f"STALE: last cycle finished {age:.0f} s ago (limit {max_age} s): {summary}")
        if cause:
            print(f"  {cause}: cycles may run but cannot be recorded")
        return STATUS_STALE
    if record.get("status") == "degraded":
        print(f"DEGRADED, {age:.0f} s ago: {summary}")
        for node in record.get("nodes", []):
            for problem in node.get("problems", []):
                print(f"  {node.get('nodename')}: {problem}")
        return STATUS_STALE
    print(f"OK, {age:.0f} s ago: {summary}")
    return STATUS_OK


def _state_dir_problem(path: Path) -> str:
    """Why the service cannot write ``path`` (read-only, full), or empty."""
    if not os.access(path, os.W_OK):
        return f"state directory {path} is not writable"
    if shutil.disk_usage(path).free < 1024 * 1024:
        return f"state directory {path} is full"
    return ""
