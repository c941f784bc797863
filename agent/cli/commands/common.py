"""Arguments and set-up shared by the sub-commands."""

from __future__ import annotations

import argparse
import os

import shtab
from oslo_config import cfg

from agent.conf import config as agent_config
from agent.conf import logs
from agent.model.exceptions import ConfigError
from drivers import DRIVERS

DEFAULT_CONFIG_FILES: tuple[str, ...] = ("/etc/compute-agent/compute-agent.conf",)
"""Read when they exist and no ``--config-file`` is given (the unit's ConfigurationDirectory)."""
DEFAULT_CONFIG_DIRS: tuple[str, ...] = ("/etc/compute-agent/compute-agent.conf.d",)
"""Read when they exist and no ``--config-dir`` is given (drop-in files, name order)."""

FORMATS = ("text", "json")


def add_config_args(parser: argparse.ArgumentParser) -> None:
    """``--config-file FILE`` (alias ``--config``), ``--config-dir DIR`` and ``--debug``."""
    parser.add_argument(
        "--config-file",
        "--config",
        dest="config",
        action="append",
        default=[],
        metavar="FILE",
        help="configuration file (INI); may be given more than once, later files win. "
        "Without it: " + ", ".join(DEFAULT_CONFIG_FILES) + " when it exists",
    ).complete = shtab.FILE
    parser.add_argument(
        "--config-dir",
        dest="config_dir",
        action="append",
        default=[],
        metavar="DIR",
        help="directory of *.conf files read after the files, in name order. Without it: "
        + ", ".join(DEFAULT_CONFIG_DIRS)
        + " when it exists",
    ).complete = shtab.DIRECTORY
    parser.add_argument(
        "--debug",
        action="store_true",
        help="log at DEBUG level (as [DEFAULT] debug = true; libraries stay at WARNING)",
    )


def add_format_arg(parser: argparse.ArgumentParser, default: str = "text") -> None:
    """``--format text|json``: for people, or a stable JSON document."""
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=default,
        help="text: for people (rich on a terminal, plain lines in a pipe); json: one "
        "JSON document on stdout",
    )


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


def config_sources(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The configuration files and directories to read: the given ones, else the defaults.

    Raises:
        ConfigError: a ``--config-dir`` does not exist.
    """
    files = list(getattr(args, "config", []) or [])
    dirs = list(getattr(args, "config_dir", []) or [])
    for d in dirs:
        if not os.path.isdir(d):
            raise ConfigError(f"configuration directory not found: {d}")
    if not files:
        files = [f for f in DEFAULT_CONFIG_FILES if os.path.isfile(f)]
    if not dirs:
        dirs = [d for d in DEFAULT_CONFIG_DIRS if os.path.isdir(d)]
    return files, dirs


def load_conf(args: argparse.Namespace, quiet: bool = True) -> cfg.ConfigOpts:
    """Configuration from the configuration files with command-line overrides applied.

    Logging is set up from it (oslo.log: ``[DEFAULT] debug``, ``log_file``,
    ``use_journal`` ...), so it is called again on SIGHUP to re-read both.

    Args:
        args: the parsed command line.
        quiet: keep the log at WARNING unless debugging (read-only commands).

    Raises:
        ConfigError: a file is missing or a value is invalid.
    """
    files, dirs = config_sources(args)
    conf = agent_config.load(files, overrides_from_args(args), dirs)
    logs.setup(conf, debug=bool(getattr(args, "debug", False)), quiet=quiet)
    return conf
