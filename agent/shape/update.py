"""The spec's ``update_provider_tree`` on discovered records (reshape-provider-tree.txt).

Every driver's ``update_provider_tree``
(:meth:`agent.shape.adapter.DriverAdapter.update_provider_tree`)
discovers its node and delegates here: the same records give the same tree
whichever driver found them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from agent.model.allocations import ConsumerAllocations
from agent.model.exceptions import ReshapeNeeded
from agent.model.provider_tree import ProviderTree
from agent.shape.layout import ChildTraits, apply_layout
from agent.shape.policy import LayoutPolicy
from agent.shape.reshape import (
    Allocations,
    PlacedBy,
    describe_moves,
    find_moves,
    reshape_allocations,
)
from drivers.records import HostResources


def update_provider_tree(
    tree: ProviderTree,
    nodename: str,
    host: HostResources,
    policy: LayoutPolicy,
    allocations: Allocations | None,
    expected: Callable[[ProviderTree], Mapping[str, ConsumerAllocations]],
    laid_out: ChildTraits | None = None,
) -> PlacedBy:
    """The spec's ``update_provider_tree`` on discovered records: lay out, detect, move.

    The shape comes from :func:`agent.shape.layout.apply_layout`. Whether a
    reshape is needed is decided from the tree passed in (what Placement
    holds) by :func:`agent.shape.reshape.find_moves`. With allocations, each
    consumer's amounts of the moving classes are moved by
    :func:`agent.shape.reshape.reshape_allocations`.

    Args:
        tree: the tree as Placement holds it (at least the compute node
            ``nodename``); edited in place.
        nodename: the compute node.
        host: the node's hardware records.
        policy: the layout policy.
        allocations: None on an ordinary cycle; for a reshape, every
            consumer's ``GET /allocations/{uuid}`` body, edited in place.
        expected: the driver's expected allocations on the laid-out tree
            (called only when allocations move).
        laid_out: the traits the agent last laid out on the node's child
            providers (:data:`agent.shape.layout.ChildTraits`), updated.

    Returns:
        How each moved consumer was placed; empty when nothing moved.

    Raises:
        ReshapeNeeded: the tree must change shape and ``allocations`` is
            None; ``tree`` is then left as it was given.
        ConfigError: the configuration does not fit the host.
    """
    held = tree.copy()
    apply_layout(tree, host, policy, laid_out)
    moves = find_moves(held, tree, nodename, dict(policy.resource_class_renames))
    if not moves:
        return {}
    if allocations is None:
        reason = describe_moves(moves, held, tree)
        # The tree comes back as it was given: the caller passes it again
        # with the allocations.
        tree.take_from(held)
        raise ReshapeNeeded(
            f"compute node {nodename}: inventory must move with its allocations: {reason}"
        )
    return reshape_allocations(allocations, moves, tree, expected(tree))
