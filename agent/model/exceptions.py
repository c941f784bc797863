"""Errors raised by the agent core (and, re-exported, those of :mod:`drivers.errors`).

Every error carries a message that names the thing at fault and, where there
is one, the way out, because operators read these in journald with nothing
else to go on.
"""

from __future__ import annotations

# Defined with the drivers, which import nothing of the agent; every layer's own.
from drivers.errors import AgentError as AgentError
from drivers.errors import ConfigError as ConfigError
from drivers.errors import HostDescriptionError as HostDescriptionError


class InvalidInventory(AgentError, ValueError):
    """An inventory record breaks a rule Placement (or this agent) enforces.

    Attributes:
        field: the inventory field at fault (``total``, ``reserved``, ...).
        value: the value given.
    """

    def __init__(self, field: str, value: object, reason: str, resource_class: str = "") -> None:
        self.field = field
        self.value = value
        self.resource_class = resource_class
        where = f"{resource_class} inventory" if resource_class else "inventory"
        super().__init__(f"invalid {where}: {field}={value!r}: {reason}")


class CapacityExceeded(AgentError):
    """A request does not fit an inventory (resource-objects spec: CapacityException).

    Attributes:
        resource_class: the class asked for.
        requested: the amount asked for (may be negative when giving back).
        used: the amount in use before the request.
        capacity: ``(total - reserved) * allocation_ratio``.
    """

    def __init__(
        self, resource_class: str, requested: int, used: int, capacity: int, reason: str
    ) -> None:
        self.resource_class = resource_class
        self.requested = requested
        self.used = used
        self.capacity = capacity
        super().__init__(
            f"{resource_class or 'resource'}: cannot take {requested}: {reason} "
            f"(used {used}, capacity {capacity})"
        )


class ProviderNotFound(AgentError, KeyError):
    """No provider with that name or UUID is in the tree."""

    def __init__(self, name_or_uuid: str) -> None:
        self.name_or_uuid = name_or_uuid
        super().__init__(f"no resource provider {name_or_uuid!r} in the provider tree")

    def __str__(self) -> str:
        return str(self.args[0])


class ProviderConflict(AgentError, ValueError):
    """A provider with that name or UUID is already in the tree."""


class ReshapeNeeded(AgentError):
    """The provider tree must change shape; allocations must move with it.

    Raised by ``ComputeDriver.update_provider_tree`` when called without
    allocations (spec: reshape-provider-tree.txt, "ReshapeNeeded exception").
    """


class ReshapeFailed(AgentError):
    """``POST /reshaper`` was attempted and did not succeed.

    Raised by ``ReportClient.update_from_provider_tree`` (spec:
    reshape-provider-tree.txt, "ReshapeFailed exception"). Fatal to the service.
    """
