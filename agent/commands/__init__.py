"""Sub-commands of ``compute-agent``: one module each.

Each module has ``NAME``, ``HELP``, ``register(parser)`` (its arguments)
and ``run(args) -> int`` (its exit code). :data:`COMMAND_MODULES` lists them
in the order ``--help`` shows.
"""

COMMAND_MODULES: tuple[str, ...] = (
    "agent.commands.run",
    "agent.commands.status",
    "agent.commands.discover",
    "agent.commands.sync",
    "agent.commands.show",
    "agent.commands.adopt",
    "agent.commands.placement_serve",
    "agent.commands.capture",
    "agent.commands.reshape",
    "agent.commands.import_nova",
)
