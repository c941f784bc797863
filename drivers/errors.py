"""The errors every layer shares, defined where the lowest of them, the drivers, can raise them.

A driver imports nothing from ``agent/`` (docs/architecture.md): it is a source
of facts. The agent's own error hierarchy therefore starts here, and
:mod:`agent.model.exceptions` re-exports these classes beside the agent's others,
so ``except AgentError`` and the CLI's exit codes (2 on :class:`ConfigError` and
:class:`HostDescriptionError`: bad input) see a driver's errors as their own.

Every error carries a message that names the thing at fault and, where there
is one, the way out: operators read these in journald with nothing else to go on.
"""

from __future__ import annotations


class AgentError(Exception):
    """Base class of every error the agent (drivers included) raises on purpose."""


class ConfigError(AgentError):
    """A configuration option has a value the agent cannot use.

    The message names the option as ``[group] name`` and the fix.
    """


class HostDescriptionError(AgentError):
    """A host description is malformed: a fake host file, or a sysfs tree.

    The message is one line: the file, the place in it (``nodes[0].gpus[1]``)
    and what is wrong. The commands exit 2 on it (bad input).
    """

    def __init__(self, path: str, where: str, reason: str) -> None:
        self.path = path
        self.where = where
        self.reason = reason
        place = f" at {where}" if where else ""
        super().__init__(f"{path}{place}: {reason}")
