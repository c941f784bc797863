"""Providers of hardware that is gone while instances still hold allocations on it.

Rule (DESIGN.md, "Data flow" step 3: nothing is deleted from under an
instance): a child provider the layout no longer has, that is the agent's
(:func:`agent.model.ownership.is_ours`) and on which Placement still counts
usage, is put back into the tree with ``reserved = total``. Nothing new lands
there, what instances hold stays until they are gone, and the provider is
removed on the first cycle after its usage is zero.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from agent.model import ownership
from agent.model.provider_tree import ProviderTree
from agent.placement.report import ReportClient

LOG = logging.getLogger(__name__)


def retain_gone_hardware(
    report: ReportClient,
    owner_trait: str,
    nodename: str,
    before: ProviderTree,
    tree: ProviderTree,
) -> set[str]:
    """Put back into ``tree`` the providers the layout removed that still have allocations.

    Args:
        report: the Placement façade (asked for the usages of removed providers).
        owner_trait: ``[compute] owner_trait``.
        nodename: the compute node.
        before: the node's tree as Placement held it, before the layout.
        tree: the tree after the layout; edited in place.

    Returns:
        UUIDs of the providers kept this way.

    Raises:
        PlacementError: a usage read failed.
    """
    kept: set[str] = set()
    root = before.data(nodename).uuid
    for uuid in before.get_provider_uuids(root)[1:]:
        old = before.data(uuid)
        ours = ownership.is_ours(old, nodename, owner_trait)
        if tree.exists(uuid) or not ours or not old.inventory:
            continue
        usages = report.provider_usages(uuid)
        if not any(usages.values()):
            continue
        if tree.exists(old.name):
            LOG.error(
                "node %s: provider %s (%s) is gone from the host but holds allocations "
                "%s, and a new provider took its name; its allocations stay in Placement",
                nodename,
                old.name,
                uuid,
                usages,
            )
            continue
        parent = old.parent_uuid if old.parent_uuid and tree.exists(old.parent_uuid) else root
        tree.new_child(old.name, parent, uuid=uuid)
        tree.update_inventory(
            uuid, {rc: replace(inv, reserved=inv.total) for rc, inv in old.inventory.items()}
        )
        tree.update_traits(uuid, old.traits)
        kept.add(uuid)
        LOG.warning(
            "node %s: %s is gone from the host but instances still hold %s on it; it "
            "stays in Placement with reserved = total until they are gone",
            nodename,
            old.name,
            {rc: n for rc, n in usages.items() if n},
        )
    return kept
