"""``compute-agent discover``: what would be reported; nothing is written."""

from __future__ import annotations

import argparse

from agent.cli.commands.common import add_config_args, add_driver_args, load_conf
from agent.cli.output import Output
from agent.cli.pci_ids import SEARCH_PATHS, PciIds
from agent.cli.render import json_document, render_tree
from agent.cli.render_devices import devices_document, render_devices
from agent.service.exit_codes import EXIT_OK
from agent.shape.adapter import adapt
from agent.state.store import StateStore
from agent.tracker.discovery import discover
from drivers import load_driver

NAME = "discover"
HELP = "show what would be reported to Placement; writes nothing"

UNCONFIGURED_DRIVER = "host"
"""The driver of a ``discover`` that names none: this machine, as NFD's ``-oneshot`` reads it."""


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``discover``."""
    parser.description = (
        "Dry run: the provider tree (providers, inventories with capacity, traits) and "
        "the allocations instances would hold. Nothing is written anywhere."
    )
    add_config_args(parser)
    add_driver_args(parser)
    parser.add_argument(
        "--devices",
        action="store_true",
        help="show every PCI device instead (address, vendor:product with names from "
        "pci.ids, class, driver, netdev, NUMA node, VFs, mdev types) and why each is or "
        "is not offered",
    )
    parser.add_argument(
        "--pci-ids",
        metavar="FILE",
        help="PCI ID database for --devices names (default: the first of "
        + ", ".join(SEARCH_PATHS)
        + " that exists; without one, ids only)",
    )
    parser.add_argument(
        "--format",
        choices=("tree", "text", "json"),
        default="tree",
        help="tree (or text): for people (rich on a terminal, plain indented lines in a "
        "pipe); json: stable, documented in docs/discover.md",
    )


def run(args: argparse.Namespace) -> int:
    """Print the tree and allocations (or the devices) of every node of the configured driver.

    With no driver named (no ``--driver``, no ``[compute] driver`` in any
    configuration file), this host is read with the host driver
    (:data:`UNCONFIGURED_DRIVER`), as Node Feature Discovery's ``-oneshot``
    does; a configured driver wins. The service (``run``) still refuses to
    start without one.

    Raises:
        OSError: the ``--pci-ids`` file cannot be read.
    """
    conf = load_conf(args)
    driver_name = conf.compute.driver or UNCONFIGURED_DRIVER
    driver = load_driver(driver_name, conf)
    out = Output()
    if args.devices:
        names = PciIds.load([args.pci_ids] if args.pci_ids else SEARCH_PATHS)
        nodes = [(n, driver.device_views(n)) for n in driver.get_nodenames()]
        document = devices_document(nodes, driver_name, names)
        if args.format == "json":
            out.json(document)
        else:
            render_devices(document, out)
        return EXIT_OK
    reports = discover(adapt(driver, conf), StateStore(conf.state_path))
    if args.format == "json":
        out.json(json_document(reports, driver_name))
    else:
        render_tree(reports, out)
    return EXIT_OK
