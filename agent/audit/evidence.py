"""The evidence the allocation audit reads a consumer's state from (docs/service.md).

Pure functions of what Placement answered and what the driver listed; the
rules that act on the states are :mod:`agent.audit.audit`'s.

Why CPU and memory: every instance holds VCPU or PCPU and MEMORY_MB, and in
a nova cloud those classes live only on compute nodes and their NUMA cells.
So an instance whose consumer holds CPU or memory on a provider outside this
node's tree is held by another compute node: nova moved it (the conductor's
``replace_allocation_with_migration`` then the scheduler's claim on the
destination, nova/conductor/tasks/migrate.py; an evacuation's claim), and the
domain still defined here is not evidence that this host should hold it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from agent.model.allocations import MIGRATION, UNKNOWN, ByProvider, ConsumerAllocations
from agent.shape.planning import CPU_MEMORY_CLASSES

Owner = tuple[str | None, str | None]
"""``(project_id, user_id)`` of an instance or consumer."""


def cpu_memory_elsewhere(held: ConsumerAllocations, tree: Collection[str]) -> list[str]:
    """Providers outside ``tree`` on which ``held`` has VCPU, PCPU or MEMORY_MB (sorted)."""
    return sorted(
        rp
        for rp, amounts in held.allocations.items()
        if rp not in tree and CPU_MEMORY_CLASSES & set(amounts)
    )


def this_hosts_share(
    held: ConsumerAllocations, owned: Collection[str], tree: Collection[str], pools: Iterable[str]
) -> set[str]:
    """The providers of ``held`` whose part is this host's share (docs/service.md).

    A part is this host's when it is on one of the host's own providers
    (``owned``), or on a sharing provider (``pools``: those the record saw
    it hold there) while its CPU and memory are not held by another compute
    node: nova's candidates anchor a sharing provider's part to the compute
    node that holds the CPU and memory (Placement's ``anchors_for_sharing_providers``),
    so once another host holds them (a live migration's or resize's
    destination claim, an evacuation's) the pool's part goes with that
    host, and removing it would take the disk from under the instance
    (issue 33, case 1). Nothing else is this host's.

    Args:
        held: the consumer's allocations as Placement holds them now.
        owned: the node's providers the agent owns.
        tree: every provider of the node's tree.
        pools: providers outside the tree the record saw the consumer hold
            as this host's.

    Returns:
        The providers whose part this host may remove or write.
    """
    ours = set(held.providers) & set(owned)
    if not cpu_memory_elsewhere(held, tree):
        ours |= set(held.providers) & (set(pools) - set(tree))
    return ours


def on_held_pools(want: ByProvider, have: ByProvider, tree: Collection[str]) -> ByProvider:
    """``want`` with each class it plans outside the tree moved to the provider outside
    the tree where ``have`` already holds that class.

    A node in an aggregate with several pools plans DISK_GB on one of them
    (:class:`agent.tracker.sharing.SharingProviders`), while nova's scheduler
    may have put the instance's disk on another (any allocation candidate
    that combines the compute node with a sharing provider): the class held
    on any provider this node shares with counts as held, and what is
    compared (or added) is the plan on that provider, never a second copy
    (issue 33, case 2).

    Args:
        want: the plan ``{provider: {rc: amount}}``.
        have: what the consumer holds (this host's share of it).
        tree: every provider of the node's tree.

    Returns:
        The plan to compare with ``have``.
    """
    held_at = {rc: rp for rp, a in sorted(have.items(), reverse=True) if rp not in tree for rc in a}
    out: ByProvider = {rp: dict(a) for rp, a in want.items() if rp in tree}
    for rp, amounts in want.items():
        if rp in tree:
            continue
        for rc, n in amounts.items():
            out.setdefault(held_at.get(rc, rp), {})[rc] = n
    return out


def planned_part(
    have: ByProvider, owned: Collection[str], produces: Collection[str] | None
) -> ByProvider:
    """``have`` without the classes the planner does not produce on the ``owned`` providers.

    Such a class (a flavor's ``resources:CUSTOM_*`` on an inventory from a
    provider config file) is nova's, held as it is: it is neither drift nor
    rewritten (issue 33, case 5), and every write keeps it
    (:func:`agent.model.allocations.merge_ours`). ``produces`` None: all are.
    """
    if produces is None:
        return dict(have)
    out: ByProvider = {}
    for rp, amounts in have.items():
        kept = {rc: n for rc, n in amounts.items() if rp not in owned or rc in produces}
        if kept:
            out[rp] = kept
    return out


def moving_reason(held: ConsumerAllocations, tree: Collection[str], owned: Iterable[str]) -> str:
    """Why an instance listed here is *moving*, or "" when it is not.

    Moving: its consumer holds nothing on this node's ``owned`` providers and
    holds CPU or memory on a provider outside ``tree`` (module docstring).
    """
    if held.on(owned):
        return ""
    elsewhere = cpu_memory_elsewhere(held, tree)
    if not elsewhere:
        return ""
    return (
        f"its CPU and memory are held on {', '.join(elsewhere)}, outside this node: "
        "nova moved it (resize or live migration in progress, or evacuated)"
    )


def holds_its_share(holder: ConsumerAllocations, want: ConsumerAllocations, uuid: str) -> str:
    """Why ``holder`` (consumer ``uuid``) is the migration record of the instance ``want``
    is planned for, or "".

    nova's conductor moves an instance's source share to a consumer of the
    migration's UUID with the instance's project and user and no type (or
    ``MIGRATION`` from another writer): such a consumer holding exactly the
    instance's planned share here means a move is being scheduled.
    """
    if holder.consumer_type not in (UNKNOWN, MIGRATION):
        return ""
    if (holder.project_id, holder.user_id) != (want.project_id, want.user_id):
        return ""
    return (
        f"its share here is held by consumer {uuid} of its project and user "
        "(nova's migration record): a move is being scheduled"
    )


def last_held(stored: Mapping[str, Any], owned: Collection[str]) -> dict[str, ByProvider]:
    """``{consumer: {provider: {rc: amount}}}`` on ``owned`` as the last audit saved it
    (the stored record's ``held``): what each instance held here before this cycle."""
    out: dict[str, ByProvider] = {}
    held = stored.get("held") if isinstance(stored, Mapping) else None
    for rp, consumers in (held or {}).items():
        if rp not in owned or not isinstance(consumers, Mapping):
            continue
        for consumer, amounts in consumers.items():
            out.setdefault(str(consumer), {})[str(rp)] = dict(amounts)
    return out


def assign_records(
    contenders: Mapping[str, Collection[str]],
    moving: Collection[str],
    before: Mapping[str, ByProvider],
) -> dict[str, str]:
    """Which migration record explains which instance holding nothing here: one each.

    nova's conductor gives each move its own record, so one record explains
    one instance (issue 33, cases 3 and 4). Evidence decides who claims a
    record first, never UUID order:

    1. an instance last seen *moving* (its CPU and memory already on another
       host at the last audit: a resize awaiting confirmation) claims its own;
    2. then an instance that held here, at the last audit, exactly what the
       record holds now, while the record held nothing here (the share moved
       from the one to the other since);
    3. then an instance with a single matching record nobody claimed.

    Instances still contending for one record after that are not told apart
    by any evidence: each is explained by it (nothing is written for them,
    a drift the next audit sees once the move ends), never one at random.

    Args:
        contenders: ``{instance: records whose parts here match its share}``.
        moving: instances the last audit found moving.
        before: :func:`last_held`.

    Returns:
        ``{instance: its record}``.
    """
    assigned: dict[str, str] = {}
    taken: set[str] = set()

    def swapped(instance: str, record: str) -> bool:
        return bool(before.get(instance)) and record not in before

    tiers: tuple[Callable[[str, str], bool], ...] = (
        lambda instance, _record: instance in moving,
        swapped,
        lambda _instance, _record: True,
    )
    claims: dict[str, list[str]] = {}
    for tier in tiers:
        claims = {}
        for instance, records in contenders.items():
            free = [r for r in records if r not in taken and tier(instance, r)]
            if instance not in assigned and free:
                claims.setdefault(free[0], []).append(instance)
        for record, instances in claims.items():
            if len(instances) == 1:
                assigned[instances[0]] = record
                taken.add(record)
    for record, instances in claims.items():
        if record not in taken:  # no evidence tells them apart: each may be its
            assigned.update(dict.fromkeys(instances, record))
    return assigned


def drift_line(want: ByProvider, have: ByProvider) -> str:
    """One line naming both sides of a drift; "" when ``want == have``."""
    if want == have:
        return ""
    return f"Placement holds {_show(have)}, the driver's plan is {_show(want)}"


def only_missing(want: ByProvider, have: ByProvider) -> bool:
    """True when ``have`` differs from ``want`` only by whole providers it lacks.

    Every part held is exactly the plan's on that provider, and the plan has
    parts on providers where nothing is held (a device's part removed, a
    sharing provider found after the write): healing adds them and changes
    nothing held, so it undoes no other writer's work.
    """
    if want == have or not set(want) - set(have):
        return False
    return all(want.get(rp) == amounts for rp, amounts in have.items())


def _show(part: ByProvider) -> str:
    if not part:
        return "nothing"
    return "; ".join(
        f"{rp}: " + ", ".join(f"{rc}={n}" for rc, n in sorted(a.items()))
        for rp, a in sorted(part.items())
    )


def migration_guard(
    owners: Mapping[str, Owner], moving: Collection[str]
) -> tuple[set[Owner], bool]:
    """What protects an unknown consumer from ``remove_unknown_allocations_after``.

    nova's migration records carry no consumer type (nova writes at 1.28-1.36)
    and hold the source host's share of a moving instance under the
    migration's UUID, with the instance's project and user
    (``replace_allocation_with_migration``). So an unknown consumer is kept
    when its owner is that of an instance listed here (its migration record,
    a same-host resize's old flavor), and every unknown consumer is kept
    while an instance listed here is *moving*.

    Args:
        owners: ``{instance: (project_id, user_id)}`` of the listed instances.
        moving: the listed instances found moving this cycle.

    Returns:
        ``(protected owners, keep every unknown consumer)``.
    """
    return set(owners.values()), bool(moving)


def keep_inherited(held: ConsumerAllocations, all_kept: bool) -> str:
    """Why a consumer found without a record (first start, ``state_path`` lost) stays past
    its grace, or "" to remove it.

    Without a record a gone instance and nova's migration record look alike: both
    untyped (nova writes at 1.28-1.36), both of an instance's owner, so the owner rule of
    :func:`keep_unknown` would keep every gone instance of a project that still runs one
    here for ever. What is left: typed ``MIGRATION``, and every one while an instance
    listed here is *moving* (a record exists while its instance moves). A resize on this
    host awaiting its confirmation when the record was lost is not told apart: its
    migration record is removed after the grace (docs/service.md, "Allocation audit").
    """
    if held.consumer_type == MIGRATION:
        return "typed MIGRATION: nova gives it back itself"
    if all_kept:
        return "an instance listed here is moving: it may be that move's migration record"
    return ""


def keep_unknown(
    held: ConsumerAllocations,
    protected: set[Owner],
    all_kept: bool,
) -> str:
    """Why an unknown consumer must stay (:func:`migration_guard`), or "" to remove it."""
    if held.consumer_type == MIGRATION:
        return "typed MIGRATION: nova gives it back itself"
    if all_kept:
        return "an instance listed here is moving: it may be that move's migration record"
    if (held.project_id, held.user_id) in protected:
        return (
            "owned by the project and user of an instance listed here: "
            "it may be that instance's migration record"
        )
    return ""
