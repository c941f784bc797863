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

from agent.cli.commands.common import add_config_args, add_format_arg, load_conf
from agent.cli.output import Output, escape
from agent.state.store import StateStore, boot_id, record_age

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
    status, code = _classify(record, age, max_age)
    if as_json:
        out.json(
            _document(status, code, record, age_seconds=round(age, 3), max_age_seconds=max_age)
        )
        return code
    for line in _lines(status, record, age, max_age, Path(conf.state_path)):
        out.print(line)
    return code


def _classify(record: dict[str, Any], age: float, max_age: float) -> tuple[str, int]:
    """``(status word, exit code)`` of a stored cycle record (module docstring)."""
    # "ok" is true only for an ok cycle; records of older agents have no "status".
    if not record.get("ok") and record.get("status") != "degraded":
        return "FAILED", STATUS_FAILED
    if age > max_age:
        return "STALE", STATUS_STALE
    if not record.get("ok"):
        return "DEGRADED", STATUS_STALE
    return "OK", STATUS_OK


def _lines(
    status: str, record: dict[str, Any], age: float, max_age: float, state_path: Path
) -> list[str]:
    """What ``status`` prints for people: the head line, then one line per cause."""
    summary = escape(record.get("summary", ""))
    nodes = record.get("nodes", [])
    if status == "FAILED":
        fatal = " (fatal: the service stopped)" if record.get("fatal") else ""
        lines = [f"FAILED{fatal}, {age:.0f} s ago: {summary}"]
        failed = [n for n in nodes if not n.get("ok")]
        return lines + [f"  {escape(str(n.get('nodename')))}: {escape(str(n.get('error')))}"
                        for n in failed]  # fmt: skip
    if status == "STALE":
        lines = [f"STALE: last cycle finished {age:.0f} s ago (limit {max_age} s): {summary}"]
        cause = _state_dir_problem(state_path)
        if cause:
            lines.append(f"  {escape(cause)}: cycles may run but cannot be recorded")
        return [*lines, f"  {escape(_process_state(record, age))}"]
    if status == "DEGRADED":
        return [f"DEGRADED, {age:.0f} s ago: {summary}"] + [
            f"  {escape(str(n.get('nodename')))}: {escape(str(problem))}"
            for n in nodes
            for problem in n.get("problems", [])
        ]
    return [f"OK, {age:.0f} s ago: {summary}"]


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
