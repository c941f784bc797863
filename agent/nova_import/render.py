"""Lines an operator reads: the dry run's diff against Placement and the summary."""

from __future__ import annotations

from agent.model.allocations import ConsumerAllocations
from agent.model.provider_tree import ProviderTree
from agent.model.resources import inventory_body
from agent.model.tree_diff import TreeDiff
from agent.nova_import.result import ImportResult


def _inventory(tree: ProviderTree, uuid: str) -> str:
    body = inventory_body(tree.data(uuid).inventory)
    parts = []
    for rc, inv in sorted(body.items()):
        # Only what differs from the defaults, to keep one provider on one line.
        defaults = {"reserved": 0, "max_unit": inv["total"], "allocation_ratio": 1.0}
        extra = "".join(f" {k}={inv[k]}" for k, d in defaults.items() if inv.get(k, d) != d)
        parts.append(f"{rc} {inv['total']}{extra}")
    return ", ".join(parts) or "(none)"


def tree_lines(held: ProviderTree, new: ProviderTree, diff: TreeDiff) -> list[str]:
    """What writing ``new`` over ``held`` (Placement's) would change, one line per write.

    Args:
        held: what Placement holds for one compute node's tree.
        new: the tree laid out from nova's rows.
        diff: ``diff_trees(held, new, root)``.

    Returns:
        ``["create provider cn1_NUMA0 (uuid) under cn1", "inventory of cn1: ... -> ...", ...]``.
    """
    out = []
    for uuid in diff.created:
        p = new.data(uuid)
        if p.parent_uuid is not None:
            parent = new.data(p.parent_uuid).name
            out.append(f"create provider {p.name} ({uuid}) under {parent}")
    for uuid in diff.inventory:
        name = new.data(uuid).name
        before = _inventory(held, uuid) if held.exists(uuid) else "(none)"
        out.append(f"inventory of {name}: {before} -> {_inventory(new, uuid)}")
    for kind in ("traits", "aggregates"):
        for uuid in getattr(diff, kind):
            now = sorted(getattr(new.data(uuid), kind))
            was = sorted(getattr(held.data(uuid), kind)) if held.exists(uuid) else []
            out.append(f"{kind} of {new.data(uuid).name}: {was} -> {now}")
    for uuid in diff.removed:
        out.append(f"remove provider {held.data(uuid).name} ({uuid})")
    return out


def allocation_line(consumer: str, held: ConsumerAllocations, new: ConsumerAllocations) -> str:
    """``consumer U (INSTANCE): {held} -> {new}`` ({provider: {class: amount}})."""
    return (
        f"allocations of consumer {consumer} ({new.consumer_type}, project {new.project_id}): "
        f"{held.allocations or '(none)'} -> {new.allocations}"
    )


def summary_lines(res: ImportResult, dry: bool, requests: int, writes: int) -> list[str]:
    """The closing lines: what was (would be) written, requests, refusals."""
    verb = "to write" if dry else "written"
    out = [
        f"nodes: {len(res.nodes)} imported ({', '.join(res.nodes) or 'none'})",
        f"providers {'to create' if dry else 'created'}: {res.created}; "
        f"inventories {verb}: {res.inventories}; "
        f"traits: {res.traits}; aggregates: {res.aggregates}",
        f"allocations {verb}: {res.allocations_written}; "
        f"already as nova says: {res.allocations_unchanged}; "
        f"of consumers nova says are gone, {'to remove' if dry else 'removed'}: "
        f"{res.allocations_removed}",
        f"placement requests: {requests} ({writes} writes)",
    ]
    if res.refusals:
        out.append(f"refused: {len(res.refusals)} (not imported; the rest was)")
    return out
