"""``compute-agent capture DIR``: copy the sysfs and /proc files the host driver reads.

The copy replays with ``--sysfs-root DIR`` (same records) and is what an
operator attaches to a bug report; it becomes a test fixture as is.
"""

from __future__ import annotations

import argparse

from agent.commands.common import EXIT_OK, add_config_args, load_conf
from drivers.host.capture import capture
from drivers.host.settings import settings_from_conf

NAME = "capture"
HELP = "copy the sysfs and /proc files host discovery reads into DIR"


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``capture``."""
    parser.description = (
        "Run host discovery once and copy exactly the files it read (no secrets, no "
        "device memory; mount options dropped) below DIR. 'compute-agent discover "
        "--driver host --sysfs-root DIR' then shows the same hardware."
    )
    add_config_args(parser)
    parser.add_argument(
        "--sysfs-root",
        metavar="SRC",
        help="capture from SRC instead of / (overrides [host_driver] sysfs_root)",
    )
    parser.add_argument("dest", metavar="DIR", help="new or empty directory to write")


def run(args: argparse.Namespace) -> int:
    """Capture into ``args.dest``; print a one-line summary and any warnings."""
    result = capture(settings_from_conf(load_conf(args)), args.dest)
    for warning in result.discovery.warnings:
        print(f"warning: {warning}")
    print(f"captured {result.files} files and {result.links} links into {result.dest}")
    return EXIT_OK
