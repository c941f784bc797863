"""Arguments and set-up shared by the sub-commands."""

from __future__ import annotations

import argparse

from oslo_config import cfg

from agent import config as agent_config
from drivers import DRIVERS

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_DRIFT = 3
"""``show --check``: Placement differs from what the driver reports."""
EXIT_RESHAPE_NEEDED = 4
"""The tree must change shape outside start-up: restart the service (it reshapes at start-up)."""
EXIT_RESHAPE_FAILED = 5
"""``POST /reshaper`` failed; Placement is unchanged (docs/reshape.md says what to do)."""


def add_config_args(parser: argparse.ArgumentParser) -> None:
    """``--config FILE`` (repeatable) and ``--debug``."""
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="configuration file (INI); may be given more than once, later files win",
    )
    parser.add_argument("--debug", action="store_true", help="log at DEBUG level")


def add_driver_args(parser: argparse.ArgumentParser) -> None:
    """The options that choose and feed a driver (``--driver``, ``--fake-host``)."""
    parser.add_argument(
        "--driver", choices=sorted(DRIVERS), help="compute driver (overrides [compute] driver)"
    )
    parser.add_argument(
        "--fake-host",
        metavar="FILE",
        help="host description for the fake driver (overrides [fake] host_file)",
    )
    parser.add_argument(
        "--sysfs-root",
        metavar="DIR",
        help="host driver: read sys/ and proc/ below DIR (overrides [host_driver] sysfs_root)",
    )
    parser.add_argument(
        "--libvirt-uri",
        metavar="URI",
        help="libvirt driver: connect to URI (overrides [libvirt] connection_uri)",
    )


def overrides_from_args(args: argparse.Namespace) -> dict[str, dict[str, object]]:
    """``{group: {option: value}}`` for the driver flags that were given."""
    overrides: dict[str, dict[str, object]] = {}
    if getattr(args, "driver", None):
        overrides.setdefault("compute", {})["driver"] = args.driver
    if getattr(args, "fake_host", None):
        overrides.setdefault("fake", {})["host_file"] = args.fake_host
    if getattr(args, "sysfs_root", None):
        overrides.setdefault("host_driver", {})["sysfs_root"] = args.sysfs_root
    if getattr(args, "libvirt_uri", None):
        overrides.setdefault("libvirt", {})["connection_uri"] = args.libvirt_uri
    return overrides


def load_conf(args: argparse.Namespace) -> cfg.ConfigOpts:
    """Configuration from ``--config`` files with command-line overrides applied.

    Raises:
        ConfigError: a file is missing or a value is invalid.
    """
    return agent_config.load(args.config, overrides_from_args(args))
