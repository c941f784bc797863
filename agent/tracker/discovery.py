"""Dry-run discovery: the tree and allocations a driver would report.

Used by ``compute-agent discover``; writes nothing anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.model.allocations import ConsumerAllocations
from agent.model.provider_tree import ProviderTree, default_root_uuid
from agent.shape.adapter import DriverAdapter
from agent.state.store import StateStore


@dataclass(slots=True)
class NodeReport:
    """What one node would report.

    Attributes:
        nodename: the compute node's name.
        tree: its provider tree (root first).
        allocations: consumer UUID -> what it would hold (agent.shape.planning).
    """

    nodename: str
    tree: ProviderTree
    allocations: dict[str, ConsumerAllocations]


def node_root_uuid(nodename: str, state: StateStore | None) -> str:
    """The compute node UUID: the one in the state directory, else the derived default."""
    stored = state.root_uuid(nodename) if state is not None else None
    return stored or default_root_uuid(nodename)


def discover_node(driver: DriverAdapter, nodename: str, root_uuid: str) -> NodeReport:
    """Build one node's tree from scratch and the allocations its instances would hold.

    Raises:
        ConfigError: the configuration does not fit the host.
        KeyError: the driver does not manage ``nodename``.
    """
    tree = ProviderTree()
    tree.new_root(nodename, root_uuid)
    driver.update_provider_tree(tree, nodename)
    return NodeReport(nodename, tree, driver.expected_allocations(tree, nodename))


def discover(driver: DriverAdapter, state: StateStore | None = None) -> list[NodeReport]:
    """Reports for every node of ``driver``, in the driver's order."""
    return [
        discover_node(driver, name, node_root_uuid(name, state)) for name in driver.get_nodenames()
    ]
