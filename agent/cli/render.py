"""Output of ``compute-agent discover``: a stable JSON document and a terminal tree.

The JSON format is documented in docs/discover.md; ``format`` names its
version and changes only when a field changes meaning or goes away.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.tree import Tree

from agent.cli.output import Output
from agent.model.allocations import ConsumerAllocations
from agent.model.provider_data import ProviderData
from agent.model.provider_tree import ProviderTree
from agent.tracker.discovery import NodeReport

JSON_FORMAT = "compute-agent.discover/1"


def provider_document(p: ProviderData) -> dict[str, Any]:
    """One provider as the JSON document shows it (inventories carry ``capacity``)."""
    return {
        "uuid": p.uuid,
        "name": p.name,
        "parent_provider_uuid": p.parent_uuid,
        "root_provider_uuid": p.root_uuid,
        "inventories": {
            rc: {**inv.to_placement(), "capacity": inv.capacity}
            for rc, inv in sorted(p.inventory.items())
        },
        "traits": sorted(p.traits),
        "aggregates": sorted(p.aggregates),
    }


def discover_record(allocation: ConsumerAllocations) -> dict[str, Any]:
    """One instance's allocations as docs/discover.md shows them (a PUT body, no generation)."""
    body = allocation.to_spec()
    del body["consumer_generation"]
    return body


def json_document(reports: Sequence[NodeReport], driver: str) -> dict[str, Any]:
    """The ``--format json`` document for a list of node reports."""
    return {
        "format": JSON_FORMAT,
        "driver": driver,
        "nodes": [
            {
                "nodename": r.nodename,
                "providers": [provider_document(p) for p in r.tree.all_data()],
                "allocations": {
                    c: discover_record(r.allocations[c]) for c in sorted(r.allocations)
                },
            }
            for r in reports
        ],
    }


def _fmt_ratio(value: float) -> str:
    return f"{value:g}"


def provider_branch(
    tree: ProviderTree,
    uuid: str,
    branch: Tree,
    usages: dict[str, dict[str, int]] | None = None,
) -> None:
    """Add provider ``uuid`` and its subtree under ``branch``.

    Args:
        tree: the providers.
        uuid: the provider to start from.
        branch: where to attach it.
        usages: ``{provider_uuid: {resource_class: used}}`` to show use
            against capacity; None to leave usage out.
    """
    p = tree.data(uuid)
    generation = f" [dim]generation {p.generation}[/dim]" if p.generation is not None else ""
    node = branch.add(f"[bold]{p.name}[/bold] [dim]{p.uuid}[/dim]{generation}")
    for rc, inv in sorted(p.inventory.items()):
        used = ""
        if usages is not None:
            used = f"used {usages.get(uuid, {}).get(rc, 0)} of "
        node.add(
            f"[cyan]{rc}[/cyan] {used}capacity {inv.capacity}  total {inv.total}  "
            f"reserved {inv.reserved}  ratio {_fmt_ratio(inv.allocation_ratio)}  "
            f"units {inv.min_unit}..{inv.max_unit} step {inv.step_size}"
        )
    if p.traits:
        node.add("[green]traits[/green] " + ", ".join(sorted(p.traits)))
    if p.aggregates:
        node.add("[magenta]aggregates[/magenta] " + ", ".join(sorted(p.aggregates)))
    for child in tree.children(uuid):
        provider_branch(tree, child, node, usages)


def render_tree(reports: Sequence[NodeReport], console: Output) -> None:
    """Print each node's providers as a tree, then its allocations per consumer."""
    for r in reports:
        top = Tree(f"[bold underline]node {r.nodename}[/bold underline]")
        for root in r.tree.root_uuids:
            provider_branch(r.tree, root, top)
        console.tree(top)
        allocs = Tree(f"[bold underline]allocations on {r.nodename}[/bold underline]")
        if not r.allocations:
            allocs.add("no instance holds resources on this node")
        for consumer in sorted(r.allocations):
            rec = r.allocations[consumer]
            branch = allocs.add(
                f"[bold]{consumer}[/bold] [dim]project {rec.project_id} user {rec.user_id}[/dim]"
            )
            for rp, alloc in rec.allocations.items():
                name = r.tree.data(rp).name if r.tree.exists(rp) else rp
                amounts = "  ".join(f"{rc}={n}" for rc, n in alloc.items())
                branch.add(f"{name}: [cyan]{amounts}[/cyan]")
        console.tree(allocs)
