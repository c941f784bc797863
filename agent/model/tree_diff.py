"""What differs between two provider trees.

The report client keeps the tree it last saw in Placement and compares the
driver's new tree with it, so it writes only what changed (DESIGN.md: "diff
against the last state seen in placement; only changed things are written").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.model.provider_data import ProviderData
from agent.model.provider_tree import ProviderTree


@dataclass(slots=True)
class TreeDiff:
    """Differences from an ``old`` tree to a ``new`` one, by provider UUID.

    Attributes:
        created: providers only in ``new``, parents before children.
        removed: providers only in ``old``, children before parents.
        reparented: providers in both whose parent changed.
        renamed: providers in both whose name changed.
        inventory: providers in both whose inventory differs, plus created
            providers that have inventory.
        traits: same rule for traits.
        aggregates: same rule for aggregates.
    """

    created: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    reparented: list[str] = field(default_factory=list)
    renamed: list[str] = field(default_factory=list)
    inventory: list[str] = field(default_factory=list)
    traits: list[str] = field(default_factory=list)
    aggregates: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(
            (
                self.created,
                self.removed,
                self.reparented,
                self.renamed,
                self.inventory,
                self.traits,
                self.aggregates,
            )
        )


def diff_trees(old: ProviderTree, new: ProviderTree, root: str | None = None) -> TreeDiff:
    """Compare two trees provider by provider (one pass over each).

    Args:
        old: what Placement is believed to hold (one root's tree).
        new: what the host should look like.
        root: compare only this root's subtree of ``new`` (name or UUID);
            None compares all of ``new``.

    Returns:
        A :class:`TreeDiff`; empty (falsy) when nothing but generations differ.
    """
    before: dict[str, ProviderData] = {p.uuid: p for p in old.all_data()}
    out = TreeDiff()
    seen: set[str] = set()
    providers = new.all_data() if root is None else map(new.data, new.get_provider_uuids(root))
    for p in providers:
        seen.add(p.uuid)
        q = before.get(p.uuid)
        if q is None:
            out.created.append(p.uuid)
            if p.inventory:
                out.inventory.append(p.uuid)
            if p.traits:
                out.traits.append(p.uuid)
            if p.aggregates:
                out.aggregates.append(p.uuid)
            continue
        if p.parent_uuid != q.parent_uuid:
            out.reparented.append(p.uuid)
        if p.name != q.name:
            out.renamed.append(p.uuid)
        if p.inventory is not q.inventory and dict(p.inventory) != dict(q.inventory):
            out.inventory.append(p.uuid)
        if p.traits != q.traits:
            out.traits.append(p.uuid)
        if p.aggregates != q.aggregates:
            out.aggregates.append(p.uuid)
    # old.all_data() is parents-first; reversed gives children before parents.
    out.removed = [u for u in reversed(list(before)) if u not in seen]
    return out
