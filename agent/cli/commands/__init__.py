"""Sub-commands of ``compute-agent``: one module each.

Each module has ``NAME``, ``HELP``, ``register(parser)`` (its arguments)
and ``run(args) -> int`` (its exit code). :data:`COMMAND_MODULES` lists them
in the order ``--help`` shows.
"""

COMMAND_MODULES: tuple[str, ...] = (
    "agent.cli.commands.run",
    "agent.cli.commands.status",
    "agent.cli.commands.discover",
    "agent.cli.commands.sync",
    "agent.cli.commands.show",
    "agent.cli.commands.adopt",
    "agent.cli.commands.placement_serve",
    "agent.cli.commands.capture",
    "agent.cli.commands.reshape",
    "agent.cli.commands.import_nova",
)
