"""The ``compute-agent`` command.

Exit codes: 0 success; 2 bad input (configuration, host description,
arguments), with one error line on stderr and no traceback; 1 any other
failure the agent recognises. Sub-commands live in :mod:`agent.cli.commands`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType

import shtab

from agent import __version__
from agent.cli.commands import COMMAND_MODULES
from agent.model.exceptions import AgentError, ConfigError, HostDescriptionError
from agent.service.exit_codes import EXIT_BAD_INPUT, EXIT_FAILURE


def show_defaults(parser: argparse.ArgumentParser) -> None:
    """Append ``(default: X)`` to the help of every option that has a real default.

    Written into the help text itself (not by a formatter class) so that
    every reader of the parser shows it: ``--help`` and the man page
    argparse-manpage generates. Options whose default means "not given"
    (None, an empty list, False for a flag) get none: "(default: None)" tells
    the reader nothing.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                show_defaults(sub)
            continue
        default = action.default
        if not action.help or action.help is argparse.SUPPRESS or "%(default)" in action.help:
            continue
        if default in (None, [], False) or default is argparse.SUPPRESS:
            continue
        action.help += " (default: %(default)s)"


def _commands() -> dict[str, ModuleType]:
    modules = [importlib.import_module(name) for name in COMMAND_MODULES]
    return {m.NAME: m for m in modules}


def build_parser(commands: dict[str, ModuleType] | None = None) -> argparse.ArgumentParser:
    """The argument parser with every sub-command registered."""
    commands = commands or _commands()
    parser = argparse.ArgumentParser(
        prog="compute-agent",
        description="Keeps the Placement service in step with this hypervisor.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # --print-completion bash|zsh: the completion script, generated from this parser.
    shtab.add_argument_to(parser, ["--print-completion"], help="print a shell completion script")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in commands.items():
        module.register(sub.add_parser(name, help=module.HELP, description=module.HELP))
    show_defaults(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``compute-agent`` console script; returns the exit code."""
    commands = _commands()
    args = build_parser(commands).parse_args(argv)
    try:
        return int(commands[args.command].run(args))
    except BrokenPipeError:
        # The reader went away (`| head`): not an error worth a traceback. Python's
        # advice (signal docs, "Note on SIGPIPE"): point stdout at /dev/null so the
        # flush at exit does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE
    except (ConfigError, HostDescriptionError) as exc:
        print(f"compute-agent {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except AgentError as exc:
        print(f"compute-agent {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
