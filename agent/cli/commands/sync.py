"""``compute-agent sync``: discover and write the tree to Placement once."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from agent.cli.commands.common import add_config_args, add_driver_args, add_format_arg, load_conf
from agent.cli.output import Output, escape
from agent.conf.logs import cycle_context
from agent.model.exceptions import ReshapeFailed
from agent.placement.connect import placement_client
from agent.placement.options import is_embedded
from agent.placement.report import ReportClient
from agent.service.exit_codes import EXIT_OK, EXIT_RESHAPE_FAILED
from agent.service.progress import Progress
from agent.shape.adapter import adapt
from agent.state.node_identity import nova_identity
from agent.state.store import StateStore
from agent.tracker.reshape import reshape_node
from drivers import load_driver

NAME = "sync"
HELP = "discover with the configured driver and write the provider tree to Placement"

LOG = logging.getLogger(__name__)


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``sync``."""
    parser.description = (
        "Discover with the configured driver and write the provider tree (providers, "
        "inventories, traits, aggregates) to Placement once; only what differs is written."
    )
    add_config_args(parser)
    add_driver_args(parser)
    add_format_arg(parser)
    parser.add_argument(
        "--once",
        action="store_true",
        help="accepted for compatibility: sync always writes once and exits (the periodic "
        "service is 'compute-agent run')",
    )


def run(args: argparse.Namespace) -> int:
    """Sync every node of the driver; print what was written and the request count."""
    conf = load_conf(args, quiet=False)
    driver = adapt(load_driver(conf.compute.driver, conf), conf)
    out = Output()
    nodes: list[dict[str, Any]] = []
    with placement_client(conf) as client, cycle_context():
        in_flight = 1 if is_embedded(conf) else conf.placement.max_concurrent_requests
        report = ReportClient(
            client,
            StateStore(conf.state_path, **nova_identity(conf)),
            max_concurrent_requests=in_flight,
        )
        for nodename in driver.get_nodenames():
            # A cold sync of a large tree takes a while: a bar, or a log line now and then.
            with Progress(f"sync of node {nodename}", count=client.total_requests):
                # The start-up algorithm (docs/reshape.md): reshape first when needed.
                try:
                    outcome = reshape_node(report, driver, nodename)
                except ReshapeFailed as exc:
                    # plain print: Placement's message may hold brackets rich would parse
                    print(f"compute-agent sync: {nodename}: reshape failed: {exc}", file=sys.stderr)
                    return EXIT_RESHAPE_FAILED
                tree = outcome.tree
                assert tree is not None  # not a dry run: the root was ensured
                if outcome.reshaped and outcome.result is not None:
                    result = outcome.result
                else:
                    result = report.update_from_provider_tree(tree)
            node = {
                "nodename": nodename,
                "providers": len(tree),
                "created": result.created,
                "removed": result.removed,
                "inventories": result.inventories,
                "traits": result.traits,
                "aggregates": result.aggregates,
                "reshaped": result.reshaped,
                "errors": list(result.errors),
            }
            nodes.append(node)
            if args.format == "json":
                continue
            out.print(
                f"{escape(nodename)}: {len(tree)} providers; created {result.created}, removed "
                f"{result.removed}, inventories {result.inventories}, traits {result.traits}, "
                f"aggregates {result.aggregates}" + (", reshaped" if result.reshaped else "")
            )
            for line in result.errors:
                out.print(f"  [red]not written[/red]: {escape(line)}")
        requests = client.total_requests()
    if args.format == "json":
        out.json({"nodes": nodes, "placement_requests": requests})
    else:
        out.print(f"{requests} placement requests")
    return EXIT_OK
