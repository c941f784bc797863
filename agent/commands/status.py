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
import os
import shutil
import time
from pathlib import Path
from typing import Any

from agent.commands.common import add_config_args, add_format_arg, load_conf
from agent.output import Output, escape
from agent.state import StateStore, boot_id, record_age

NAME = "status"
HELP = "print the last cycle's outcome; non-zero exit when it failed or is stale"

STATUS_OK = 0
STATUS_STALE = 1
STATUS_FAILED = 2
STATUS_UNKNOWN = 3


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``status``."""
    parser.description = (
        "Print the outcome of the last resource-tracking cycle. Exit codes follow the "
        "monitoring-plugin convention (Nagios, Icinga, Sensu): 0 the last cycle succeeded "
        "recently; 1 it is stale (older than [DEFAULT] status_max_age, three update "
        "intervals by default: the service is stuck or stopped, or cannot save its state) or "
        "degraded (a write was refused, or the state could not be saved); 2 it failed; 3 no "
        "cycle is recorded in the state directory. Ages are measured on the monotonic clock."
    )
    add_config_args(parser)
    parser.add_argument(
        "--max-age",
        type=int,
        metavar="SECONDS",
        help="stale after this many seconds (overrides [DEFAULT] status_max_age)",
    )
    add_format_arg(parser)
    parser.add_argument(
        "--json",
        dest="format",
        action="store_const",
        const="json",
        help="same as --format json",
    )


def _document(
    status: str, code: int, record: dict[str, Any] | None, **extra: Any
) -> dict[str, Any]:
    """The --format json document: the status, the exit code, extra figures, the record."""
    return {"status": status, "exit_code": code, **extra, "last_cycle": record}


def run(args: argparse.Namespace) -> int:
    """Print the last cycle's outcome; the monitoring exit code."""
    conf = load_conf(args)
    out = Output()
    as_json = args.format == "json"
    record = StateStore(conf.state_path).last_cycle()
    if record is None:
        if as_json:
            out.json(_document("UNKNOWN", STATUS_UNKNOWN, None))
        else:
            out.print(f"UNKNOWN: no cycle recorded in {conf.state_path} (has the service run?)")
        return STATUS_UNKNOWN
    max_age = args.max_age or conf.status_max_age or 3 * conf.update_interval
    age = record_age(record, time.time(), time.monotonic())
    summary = record.get("summary", "")
    # "ok" is true only for an ok cycle; records of older agents have no "status".
    if record.get("ok"):
        outcome = "ok"
    else:
        outcome = "degraded" if record.get("status") == "degraded" else "failed"
    if outcome == "failed":
        status, code = "FAILED", STATUS_FAILED
    elif age > max_age:
        status, code = "STALE", STATUS_STALE
    elif outcome == "degraded":
        status, code = "DEGRADED", STATUS_STALE
    else:
        status, code = "OK", STATUS_OK
    if as_json:
        out.json(
            _document(status, code, record, age_seconds=round(age, 3), max_age_seconds=max_age)
        )
        return code
    if status == "FAILED":
        fatal = " (fatal: the service stopped)" if record.get("fatal") else ""
        out.print(f"FAILED{fatal}, {age:.0f} s ago: {escape(summary)}")
        for node in record.get("nodes", []):
            if not node.get("ok"):
                name, error = str(node.get("nodename")), str(node.get("error"))
                out.print(f"  {escape(name)}: {escape(error)}")
    elif status == "STALE":
        out.print(
            f"STALE: last cycle finished {age:.0f} s ago (limit {max_age} s): {escape(summary)}"
        )
        cause = _state_dir_problem(Path(conf.state_path))
        if cause:
            out.print(f"  {escape(cause)}: cycles may run but cannot be recorded")
        out.print(f"  {escape(_process_state(record, age))}")
    elif status == "DEGRADED":
        out.print(f"DEGRADED, {age:.0f} s ago: {escape(summary)}")
        for node in record.get("nodes", []):
            for problem in node.get("problems", []):
                out.print(f"  {escape(str(node.get('nodename')))}: {escape(str(problem))}")
    else:
        out.print(f"OK, {age:.0f} s ago: {escape(summary)}")
    return code


def _process_state(record: dict[str, Any], age: float) -> str:
    """Whether the service that recorded ``record`` still runs: wedged or stopped."""
    pid = record.get("pid")
    if not isinstance(pid, int) or record.get("boot_id") != boot_id():
        return "the service that recorded it is not running (or ran before a reboot)"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"the service that recorded it (pid {pid}) is not running"
    except PermissionError:
        pass  # it exists, under another user
    return (
        f"the service (pid {pid}) is running but no cycle finished for {age:.0f} s: it is "
        "wedged (a cycle stuck past cycle_timeout); its log says where, and systemd's "
        "watchdog restarts it"
    )


def _state_dir_problem(path: Path) -> str:
    """Why the service cannot write ``path`` (read-only, full, not a directory), or empty."""
    if not path.is_dir() or not os.access(path, os.W_OK):
        return f"state directory {path} is not a writable directory"
    if shutil.disk_usage(path).free < 1024 * 1024:
        return f"state directory {path} is full"
    return ""
