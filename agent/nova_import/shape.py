"""One compute node's tree as the import writes it: the agent's layout, then nova's extras.

:func:`agent.shape.layout.apply_layout` decides the shape from the node's records,
as it does for every driver. The import adds what only nova's row knows and
keeps what only the host knows:

- ``disk_available_least`` becomes DISK_GB ``max_unit`` (compute-node-inventory.rst);
- nova's host aggregates (``--api-db``) are added to the root's, none removed;
- the root's hardware traits (``HW_CPU_*``, ...) stay as Placement holds them:
  nova's rows do not say what the CPU offers, the agent on the host does;
- the import never removes a provider: one Placement holds in the node's
  tree that nova's rows do not produce (a vGPU the agent reports, a device
  nova does not track) is kept as it is.

A node Placement holds in another shape (a class that would move between
providers with its allocations: NUMA cells on in Placement, off in the
configuration) is refused: ``compute-agent reshape`` moves such trees.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from agent.model.provider_tree import ProviderTree
from agent.nova_import.nodes import NodeImport
from agent.nova_import.refusal import RowRefused
from agent.shape.layout import apply_layout
from agent.shape.node_traits import HARDWARE_PREFIXES
from agent.shape.policy import LayoutPolicy
from agent.shape.reshape import describe_moves, find_moves

LOG = logging.getLogger(__name__)


def _disk_max_unit(tree: ProviderTree, node: NodeImport) -> None:
    name = node.nodename
    disk = tree.data(name).inventory.get("DISK_GB")
    dal = node.disk_available_least
    if disk is None or dal is None:
        return
    # Placement needs max_unit >= 1; below that nothing larger than 1 GiB fits anyway.
    if dal < 1:
        LOG.warning(
            "compute node %s: disk_available_least = %d GiB; DISK_GB max_unit set to 1", name, dal
        )
    inventory = dict(tree.data(name).inventory)
    inventory["DISK_GB"] = replace(disk, max_unit=min(max(dal, 1), disk.total))
    tree.update_inventory(name, inventory)


def _keep_unknown(held: ProviderTree, tree: ProviderTree, root: str) -> None:
    """Put back every provider of ``held`` the layout left out (parents first)."""
    for uuid in held.get_provider_uuids(root)[1:]:
        p = held.data(uuid)
        if tree.exists(uuid) or tree.exists(p.name) or p.parent_uuid is None:
            continue
        if not tree.exists(p.parent_uuid):
            continue
        tree.new_child(p.name, p.parent_uuid, uuid=uuid, generation=p.generation)
        tree.update_inventory(uuid, p.inventory)
        tree.update_traits(uuid, p.traits)
        tree.update_aggregates(uuid, p.aggregates)


def node_tree(
    held: ProviderTree, node: NodeImport, policy: LayoutPolicy, aggregates: set[str]
) -> ProviderTree:
    """The tree to write for ``node`` over what Placement holds (``held``, left unchanged).

    Args:
        held: Placement's tree of the node (its root at least).
        node: the mapped ``compute_nodes`` row.
        policy: the layout policy with the row's ratios.
        aggregates: nova host aggregate UUIDs of the node's host.

    Returns:
        A new :class:`ProviderTree`.

    Raises:
        RowRefused: Placement holds the node in another shape.
        ConfigError: a ``reserved_host_*`` option exceeds the node's total.
    """
    name = node.nodename
    root_traits = frozenset(t for t in held.data(name).traits if t.startswith(HARDWARE_PREFIXES))
    tree = held.copy()
    apply_layout(tree, replace(node.resources, traits=root_traits), policy)
    _disk_max_unit(tree, node)
    if aggregates:
        tree.update_aggregates(name, set(tree.data(name).aggregates) | aggregates)
    moves = find_moves(held, tree, name, dict(policy.resource_class_renames))
    if moves:
        raise RowRefused(
            "compute_nodes",
            f"id {node.id} ({name})",
            "",
            f"Placement holds this node in another shape ({describe_moves(moves, held, tree)})",
            "run compute-agent reshape with this host's configuration first, then import",
        )
    _keep_unknown(held, tree, tree.data(name).uuid)
    return tree
