"""The writer's side of yielding to another writer (:mod:`agent.model.yields` has the rule).

Before a root's subtree is written, :func:`settle` reviews each field that
differs between what Placement holds and what the layout wants, and every
field already yielded: a yielded field takes the held value in the tree to
be written, so the diff no longer shows it, and the rest of the provider is
written as ever (the other classes of its inventory, its other traits).
After each write, :func:`record_inventory` and :func:`record_set` record
the fields the agent wrote. :class:`Ledgers` keeps each node's ledger and its
copy in the state directory.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from agent.model.provider_tree import ProviderTree
from agent.model.resources import Inventory
from agent.model.tree_diff import TreeDiff, diff_trees
from agent.model.yields import AGGREGATE, INVENTORY, TRAIT, FieldKey, FieldLedger, Value
from agent.state.store import StateStore

LOG = logging.getLogger(__name__)

SET_KINDS = {"traits": TRAIT, "aggregates": AGGREGATE}
"""The provider's attribute -> the kind of field of its members."""


class Ledgers:
    """Each node's :class:`FieldLedger`, read from the state directory on first use.

    Args:
        state: the state directory (``fields/NODE.json``).
    """

    def __init__(self, state: StateStore) -> None:
        self.state = state
        self._ledgers: dict[str, FieldLedger] = {}

    def of(self, nodename: str) -> FieldLedger:
        """``nodename``'s ledger (the root provider's name)."""
        ledger = self._ledgers.get(nodename)
        if ledger is None:
            ledger = FieldLedger.from_json(self.state.fields(nodename))
            self._ledgers[nodename] = ledger
        return ledger

    def save(self, nodenames: Iterable[str]) -> None:
        """Write the ledgers of ``nodenames`` that changed (a failure is the store's to log)."""
        for nodename in nodenames:
            ledger = self._ledgers.get(nodename)
            if ledger is not None and ledger.dirty:
                self.state.set_fields(nodename, ledger.to_json())
                ledger.dirty = False


def _record(inv: Inventory | None) -> Value:
    return None if inv is None else dict(inv.to_placement())


def settle(
    ledger: FieldLedger,
    held: ProviderTree,
    wanted: ProviderTree,
    providers: Iterable[str],
    log: bool = True,
) -> bool:
    """Review the fields of ``providers`` and the watched ones; yielded fields take the held value.

    Watched (:meth:`FieldLedger.watched`): those yielded and those the agent
    wrote over another writer's value, reviewed even where nothing differs, so
    a yield ends and a fight is forgotten when the agent comes round.

    Args:
        ledger: the node's ledger (updated: yields begun or ended).
        held: what Placement holds (the mirror, as last read).
        wanted: what the layout wants; edited in place.
        providers: UUIDs whose fields differ (the diff's); those only in one
            tree are skipped (created or removed providers have no field to yield).
        log: say at WARNING each yield begun, at INFO each one ended (False: ``show``).

    Returns:
        True when ``wanted`` was edited (diff it again).
    """
    watched = ledger.watched()
    uuids = dict.fromkeys(providers)
    uuids.update(dict.fromkeys(k.provider for k in sorted(watched)))
    edited = False
    for uuid in uuids:
        if not (held.exists(uuid) and wanted.exists(uuid)):
            continue
        edited |= _settle_inventory(ledger, held, wanted, uuid, watched)
        for attr in SET_KINDS:
            edited |= _settle_set(ledger, held, wanted, uuid, attr, watched)
    if log:
        for y in ledger.started:
            LOG.warning(
                "%s; it wrote that value over the other writer's once and the other writer "
                "changed it back: the agent yields, and stops writing this field until the "
                "value it wants changes (compute-agent show lists it; docs/service.md, "
                "'When another writer disagrees')",
                y.describe(),
            )
        for y, why in ledger.ended:
            LOG.info("%s: no longer yielded: %s", y.describe(), why)
    ledger.started.clear()
    ledger.ended.clear()
    return edited


def _settle_inventory(
    ledger: FieldLedger, held: ProviderTree, wanted: ProviderTree, uuid: str, watched: set[FieldKey]
) -> bool:
    old, new = held.data(uuid).inventory, wanted.data(uuid).inventory
    name = held.data(uuid).name
    target: dict[str, Inventory] = dict(new)
    kept = False
    classes = set(old) | set(new)
    for rc in sorted(classes):
        key = FieldKey(uuid, INVENTORY, rc)
        was, want = _record(old.get(rc)), _record(new.get(rc))
        if was == want and key not in watched:
            continue
        if ledger.review(key, name, want, was):
            kept = True
            if rc in old:
                target[rc] = old[rc]
            else:
                target.pop(rc, None)
    if kept:
        wanted.update_inventory(uuid, target)
    return kept


def _settle_set(
    ledger: FieldLedger,
    held: ProviderTree,
    wanted: ProviderTree,
    uuid: str,
    attr: str,
    watched: set[FieldKey],
) -> bool:
    kind = SET_KINDS[attr]
    old, new = getattr(held.data(uuid), attr), getattr(wanted.data(uuid), attr)
    name = held.data(uuid).name
    members = set(old ^ new)
    members.update(k.key for k in watched if (k.provider, k.kind) == (uuid, kind))
    target = set(new)
    for member in sorted(members):
        if ledger.review(FieldKey(uuid, kind, member), name, member in new, member in old):
            if member in old:
                target.add(member)
            else:
                target.discard(member)
    if target == new:
        return False
    update = wanted.update_traits if attr == "traits" else wanted.update_aggregates
    update(uuid, target)
    return True


def settled_diff(
    ledger: FieldLedger, mirror: ProviderTree, new_tree: ProviderTree, root: str, reshape: bool
) -> TreeDiff:
    """What differs between ``mirror`` and ``new_tree`` under ``root`` once yielded fields took
    the held value (:func:`settle`); the ledger forgets the providers it removes. A
    reshape writes the layout whole (the agent's own configuration changed the tree's shape).
    """
    diff = diff_trees(mirror, new_tree, root)
    if reshape:
        return diff
    if diff.removed:  # the fields of a provider the agent removes are nobody's to fight over
        ledger.keep_providers(new_tree.get_provider_uuids(root))
    changed = [*diff.inventory, *diff.traits, *diff.aggregates]
    if (changed or ledger.watched()) and settle(ledger, mirror, new_tree, changed):
        diff = diff_trees(mirror, new_tree, root)
    return diff


def record_inventory(
    ledger: FieldLedger,
    uuid: str,
    held: Mapping[str, Inventory],
    written: Mapping[str, Inventory],
    new_provider: bool,
) -> None:
    """Record the classes of ``uuid``'s inventory the agent changed (``written`` over ``held``)."""
    for rc in set(held) | set(written):
        was, now = _record(held.get(rc)), _record(written.get(rc))
        if was != now:
            ledger.wrote(FieldKey(uuid, INVENTORY, rc), now, was, new_provider)


def record_set(
    ledger: FieldLedger,
    uuid: str,
    attr: str,
    held: Iterable[str],
    written: Iterable[str],
    new_provider: bool,
) -> None:
    """Record the traits or aggregates (``attr``) of ``uuid`` the agent added or removed."""
    before, after = set(held), set(written)
    for member in before ^ after:
        key = FieldKey(uuid, SET_KINDS[attr], member)
        ledger.wrote(key, member in after, member in before, new_provider)
