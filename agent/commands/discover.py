"""``compute-agent discover``: what would be reported; nothing is written."""

from __future__ import annotations

import argparse

from agent.commands.common import EXIT_OK, add_config_args, add_driver_args, load_conf
from agent.discovery import discover
from agent.output import Output
from agent.render import json_document, render_tree
from agent.state import StateStore
from drivers import load_driver

NAME = "discover"
HELP = "show what would be reported to Placement; writes nothing"


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``discover``."""
    parser.description = (
        "Dry run: the provider tree (providers, inventories with capacity, traits) and "
        "the allocations instances would hold. Nothing is written anywhere."
    )
    add_config_args(parser)
    add_driver_args(parser)
    parser.add_argument(
        "--format",
        choices=("tree", "text", "json"),
        default="tree",
        help="tree (or text): for people (rich on a terminal, plain indented lines in a "
        "pipe); json: stable, documented in docs/discover.md",
    )


def run(args: argparse.Namespace) -> int:
    """Print the tree and allocations of every node of the configured driver."""
    conf = load_conf(args)
    driver = load_driver(conf.compute.driver, conf)
    reports = discover(driver, StateStore(conf.state_path))
    out = Output()
    if args.format == "json":
        out.json(json_document(reports, conf.compute.driver))
    else:
        render_tree(reports, out)
    return EXIT_OK
