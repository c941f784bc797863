"""``compute-agent reshape``: the start-up reshape, run once offline (fast-forward upgrades).

The spec's "Offline Upgrade Script" (reshape-provider-tree.txt): with every
service stopped, run the algorithm the agent runs at start-up, once per
node, against Placement over HTTP (the ``[placement]`` options) or directly
on Placement's database (``--placement-db URL``: Placement's application
in-process, as the embedded mode runs it). A no-op when no reshape is needed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from oslo_config import cfg

from agent.cli.commands.common import add_config_args, add_driver_args, add_format_arg, load_conf
from agent.cli.output import Output, escape
from agent.conf.logs import cycle_context
from agent.model.exceptions import ReshapeFailed
from agent.placement.client import PlacementClient
from agent.placement.connect import placement_client
from agent.placement.embedded import EmbeddedPlacement
from agent.placement.report import ReportClient
from agent.service.exit_codes import EXIT_BAD_INPUT, EXIT_OK, EXIT_RESHAPE_FAILED
from agent.service.progress import Progress
from agent.shape.adapter import adapt
from agent.state.node_identity import nova_identity
from agent.state.store import StateStore
from agent.tracker.reshape import ReshapeOutcome, outcome_lines, reshape_node
from drivers import load_driver

NAME = "reshape"
HELP = "move inventories with their allocations to the tree's new shape, once (offline upgrades)"


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``reshape``."""
    parser.description = (
        "Run the start-up reshape once for every node of the configured driver: when the "
        "provider tree Placement holds must change shape (vGPUs per GPU, NUMA on or off, "
        "renamed resource classes), move the inventories and every allocation on them in one "
        "POST /reshaper. Meant for fast-forward upgrades, with every service stopped. "
        f"Exit {EXIT_OK} when done or not needed, {EXIT_RESHAPE_FAILED} when Placement refused "
        "the reshape (it is then unchanged). See docs/reshape.md."
    )
    add_config_args(parser)
    add_driver_args(parser)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the inventories and allocations that would move; write nothing",
    )
    parser.add_argument(
        "--placement-db",
        metavar="URL",
        help="work on Placement's database directly (SQLAlchemy URL, e.g. "
        "sqlite:////var/lib/placement/placement.sqlite or mysql+pymysql://user:pw@host/"
        "placement) instead of the Placement service of [placement]",
    )
    parser.add_argument(
        "--attempts",
        type=int,
        default=3,
        metavar="N",
        help="POST /reshaper attempts when another writer conflicts",
    )
    add_format_arg(parser)


@contextmanager
def _placement(conf: cfg.ConfigOpts, database: str | None) -> Iterator[PlacementClient]:
    if database:
        with EmbeddedPlacement(conf.state_path, database=database) as placement:
            yield placement.client()
    else:
        with placement_client(conf) as client:
            yield client


def _document(outcome: ReshapeOutcome) -> dict[str, Any]:
    """One node's outcome as ``--format json`` shows it."""
    return {
        "nodename": outcome.nodename,
        "needed": outcome.needed,
        "reason": outcome.reason,
        "dry_run": outcome.dry_run,
        "attempts": outcome.attempts,
        "placement_requests": outcome.requests,
        "provider_names": outcome.provider_names,
        "inventories_before": outcome.inventories_before,
        "inventories_after": outcome.inventories_after,
        "allocations_before": outcome.allocations_before,
        "allocations_after": outcome.allocations_after,
        "placed_by": outcome.placed_by,
    }


def run(args: argparse.Namespace) -> int:
    """Reshape (or show what would move for) every node; the exit code says how it went."""
    conf = load_conf(args, quiet=False)
    if args.attempts < 1:
        print("compute-agent reshape: --attempts must be at least 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    driver = adapt(load_driver(conf.compute.driver, conf), conf)
    out = Output()
    as_json = args.format == "json"
    nodes: list[dict[str, Any]] = []
    code = EXIT_OK
    with _placement(conf, args.placement_db) as client, cycle_context():
        report = ReportClient(client, StateStore(conf.state_path, **nova_identity(conf)))
        for nodename in driver.get_nodenames():
            # Offline, a node Placement does not know is not created: nothing to move.
            with Progress(f"reshape of node {nodename}", count=client.total_requests):
                held = report.read_tree(nodename)
                try:
                    outcome = (
                        reshape_node(
                            report,
                            driver,
                            nodename,
                            attempts=args.attempts,
                            dry_run=args.dry_run,
                            tree=held,
                        )
                        if held is not None
                        else None
                    )
                except ReshapeFailed as exc:
                    print(f"node {nodename}: reshape failed: {exc}", file=sys.stderr)
                    nodes.append({"nodename": nodename, "failed": str(exc)})
                    code = EXIT_RESHAPE_FAILED
                    continue
            if outcome is None:
                nodes.append({"nodename": nodename, "in_placement": False})
                if not as_json:
                    out.print(
                        f"node {escape(nodename)}: Placement has no compute node of this name; "
                        "no reshape"
                    )
                continue
            nodes.append(_document(outcome))
            if not as_json:
                for line in outcome_lines(outcome):
                    out.print(escape(line))
        requests = client.total_requests()
    if as_json:
        out.json({"nodes": nodes, "placement_requests": requests})
    else:
        out.print(f"{requests} placement requests")
    return code
