"""``compute-agent sync --once``: discover and write the tree to Placement once."""

from __future__ import annotations

import argparse
import logging

from rich.console import Console

from agent.commands.common import EXIT_OK, add_config_args, add_driver_args, load_conf
from agent.exceptions import ReshapeNeeded
from agent.placement.connect import placement_client
from agent.report import ReportClient
from agent.state import StateStore
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
    parser.add_argument(
        "--once",
        action="store_true",
        required=True,
        help="write once and exit (the periodic service is `compute-agent run`)",
    )


def run(args: argparse.Namespace) -> int:
    """Sync every node of the driver; print what was written and the request count."""
    conf = load_conf(args)
    driver = load_driver(conf.compute.driver, conf)
    console = Console()
    with placement_client(conf) as client:
        report = ReportClient(client, StateStore(conf.state_path))
        for nodename in driver.get_nodenames():
            tree = report.get_provider_tree_and_ensure_root(nodename)
            try:
                driver.update_provider_tree(tree, nodename)
                allocations = None
            except ReshapeNeeded:
                LOG.info("node %s needs a reshape: moving inventories with allocations", nodename)
                allocations = report.get_allocations_for_provider_tree(nodename)
                driver.update_provider_tree(tree, nodename, allocations=allocations)
            result = report.update_from_provider_tree(tree, allocations)
            console.print(
                f"{nodename}: {len(tree)} providers; created {result.created}, removed "
                f"{result.removed}, inventories {result.inventories}, traits {result.traits}, "
                f"aggregates {result.aggregates}" + (", reshaped" if result.reshaped else "")
            )
            for line in result.errors:
                console.print(f"  [red]not written[/red]: {line}")
        console.print(f"{client.total_requests()} placement requests")
    return EXIT_OK
