"""``compute-agent capture DIR``: copy the sysfs and /proc files the host driver reads.

The copy replays with ``--sysfs-root DIR`` (same records) and is what an
operator attaches to a bug report; it becomes a test fixture as is.
"""

from __future__ import annotations

import argparse

from agent.cli.commands.common import add_config_args, add_format_arg, load_conf
from agent.cli.output import Output, escape
from agent.service.exit_codes import EXIT_OK
from agent.service.progress import Progress
from drivers.host.capture import capture
from drivers.host.settings import settings_from_conf
from drivers.host.sysfs import Recorder

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
    add_format_arg(parser)


def run(args: argparse.Namespace) -> int:
    """Capture into ``args.dest``; print a one-line summary and any warnings."""
    settings = settings_from_conf(load_conf(args, quiet=False))
    recorder = Recorder()
    with Progress(
        f"capture of {settings.sysfs_root}",
        count=lambda: len(recorder.files) + len(recorder.links),
        unit="files read",
    ):
        result = capture(settings, args.dest, recorder)
    out = Output()
    if args.format == "json":
        out.json(
            {
                "dest": str(result.dest),
                "files": result.files,
                "links": result.links,
                "warnings": list(result.discovery.warnings),
            }
        )
        return EXIT_OK
    for warning in result.discovery.warnings:
        out.print(f"warning: {escape(warning)}")
    out.print(f"captured {result.files} files and {result.links} links into {result.dest}")
    return EXIT_OK
