"""The import: nova's rows through the agent's layout and planner into Placement.

Per compute node (compute-node-inventory.rst, steps 2-4): the root provider
gets ``compute_nodes.uuid`` (a row without one keeps the provider Placement
already has under the node's name, else a new random UUID: the spec's step 2),
then :func:`agent.nova_import.shape.node_tree` lays the tree out from the
node's records (the agent's layout) and
:meth:`agent.placement.report.ReportClient.update_from_provider_tree`
writes what differs. Then every consumer's allocations
(resource-providers-allocations.txt) are planned by
:func:`agent.shape.planning.plan_allocations` and written with
:meth:`~agent.placement.report.ReportClient.edit_allocations` and
:func:`~agent.model.allocations.merge_ours`: parts on providers the import
does not lay out are kept, and so are the classes its plan never holds
(:func:`planned_classes`: a VF, a vGPU, a flavor's ``resources:CUSTOM_*``)
on the providers it does. Nothing that already matches is written, so a
second run writes nothing. A dry run reads the same and writes nothing.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace

from agent.model import ownership
from agent.model.allocations import ConsumerAllocations, by_consumer, merge_ours
from agent.model.exceptions import AgentError, ConfigError
from agent.model.provider_tree import ProviderTree
from agent.model.tree_diff import diff_trees
from agent.nova_import.instances import Consumers
from agent.nova_import.nodes import NodeImport
from agent.nova_import.refusal import Refusal, RowRefused
from agent.nova_import.render import allocation_line, tree_lines
from agent.nova_import.result import ImportResult
from agent.nova_import.shape import node_tree
from agent.nova_import.stale import GoneLookup, held_on, remove_gone
from agent.placement.errors import PlacementError
from agent.placement.report import ReportClient
from agent.placement.roots import RootConflict
from agent.shape.planning import cpu_memory_providers, plan_allocations
from agent.shape.policy import LayoutPolicy
from agent.shape.provider_names import whole_device_provider_name


@dataclass(slots=True)
class _Laid:
    """One node after its tree is written: what its allocations need."""

    node: NodeImport
    tree: ProviderTree
    held: ProviderTree
    policy: LayoutPolicy
    owned: set[str]
    sharing: str | None


def node_policy(base: LayoutPolicy, node: NodeImport) -> LayoutPolicy:
    """``base`` with the allocation ratios the row sets (the row wins over the configuration)."""
    return replace(base, **{f"{kind}_allocation_ratio": r for kind, r in node.ratios.items()})


def _root_uuid(report: ReportClient, node: NodeImport) -> str:
    """The row's UUID; else the one Placement has under the name; else a new random one."""
    if node.uuid:
        return node.uuid
    found = report.read_tree(node.nodename)
    if found is not None and found.exists(node.nodename):
        return found.data(node.nodename).uuid
    return str(uuidlib.uuid4())


def _read_root(report: ReportClient, node: NodeImport, uuid: str, dry: bool) -> ProviderTree:
    key = f"id {node.id} ({node.nodename})"
    report.record_root_uuid(node.nodename, uuid)
    try:
        tree = report.read_tree(node.nodename) if dry else None
        if not dry:
            tree = report.get_provider_tree_and_ensure_root(node.nodename)
    except RootConflict:
        raise RowRefused(
            "compute_nodes",
            key,
            "hypervisor_hostname",
            f"Placement holds a provider named {node.nodename!r} under another UUID than {uuid}",
            "delete or rename that provider, or set compute_nodes.uuid to its UUID",
        ) from None
    if tree is None:
        tree = ProviderTree()
        tree.new_root(node.nodename, uuid)
    if not tree.exists(node.nodename) or tree.data(node.nodename).uuid != uuid:
        other = next((p.name for p in tree.all_data() if p.uuid == uuid), "?")
        raise RowRefused(
            "compute_nodes",
            key,
            "uuid",
            f"Placement holds {uuid} as provider {other!r}, not as {node.nodename!r}",
            "rename that provider or correct compute_nodes.uuid",
        )
    return tree


def _write_tree(
    report: ReportClient, node: NodeImport, tree: ProviderTree, res: ImportResult
) -> None:
    try:
        sync = report.update_from_provider_tree(tree)
    except PlacementError as exc:
        raise RowRefused(
            "placement",
            f"tree of {node.nodename}",
            "",
            str(exc),
            "a provider of the tree conflicts with one Placement holds (a child's name under "
            "another UUID): rename or delete that provider, then import again",
        ) from None
    res.inventories += sync.inventories
    res.traits += sync.traits
    res.aggregates += sync.aggregates
    for line in sync.errors:
        res.refusals.append(
            Refusal("placement", f"tree of {node.nodename}", "", line, "import again then")
        )


def lay_out_node(
    report: ReportClient,
    node: NodeImport,
    base: LayoutPolicy,
    aggregates: set[str],
    dry: bool,
    res: ImportResult,
) -> _Laid:
    """Write (or, dry, diff) one node's tree; what its allocations need.

    Raises:
        RowRefused: the node cannot be imported (name or UUID held by another
            provider, another shape in Placement, a reserved amount too large).
    """
    uuid = _root_uuid(report, node)
    tree = _read_root(report, node, uuid, dry)
    new_root = tree.data(node.nodename).generation is None
    held = tree
    policy = node_policy(base, node)
    try:
        tree = node_tree(held, node, policy, aggregates)
    except ConfigError as exc:
        raise RowRefused(
            "compute_nodes",
            f"id {node.id} ({node.nodename})",
            "",
            str(exc),
            "import this node with a --config that fits it",
        ) from None
    if dry:
        if new_root:
            how = " (new UUID: compute_nodes.uuid is NULL)" if node.uuid is None else ""
            res.diff.append(f"create compute node {node.nodename} ({uuid}){how}")
        diff = diff_trees(held, tree, uuid)
        res.created += len(diff.created) + new_root
        res.inventories += len(diff.inventory)
        res.traits += len(diff.traits)
        res.aggregates += len(diff.aggregates)
        res.diff.extend(tree_lines(held, tree, diff))
    else:
        _write_tree(report, node, tree, res)
    if node.uuid is None:
        res.new_uuids[node.id] = uuid
    sharing = None
    if node.resources.shared_storage:
        found = report.sharing_providers(set(tree.data(uuid).aggregates), "DISK_GB")
        sharing = found[0] if found else None
    owned = ownership.owned(tree, node.nodename, policy.owner_trait)
    return _Laid(node, tree, held, policy, owned, sharing)


def _in_placement(held: ProviderTree, uuid: str) -> bool:
    """True when Placement has the provider (a dry run's new root has no generation)."""
    return held.exists(uuid) and held.data(uuid).generation is not None


def _same(a: ConsumerAllocations, b: ConsumerAllocations) -> bool:
    return (a.allocations, a.project_id, a.user_id, a.consumer_type) == (
        b.allocations,
        b.project_id,
        b.user_id,
        b.consumer_type,
    )


def plan_node(
    report: ReportClient, laid: _Laid, consumers: Consumers
) -> dict[str, ConsumerAllocations]:
    """Each consumer's allocations on one node, with its consumer type."""
    name = laid.node.nodename
    held = None
    if laid.policy.model_numa:
        # Sticky NUMA placement (agent.shape.planning): what Placement holds stays if it fits.
        cpu_memory = cpu_memory_providers(laid.tree, laid.owned)
        cells = [u for u in cpu_memory if _in_placement(laid.held, u)]
        held = by_consumer({u: report.provider_allocations(u) for u in cells})
    plans = plan_allocations(
        consumers.by_node.get(name, []),
        laid.node.resources,
        laid.tree,
        laid.policy,
        laid.sharing,
        held,
    )
    return {c: replace(p, consumer_type=consumers.types[c]) for c, p in plans.items()}


def planned_classes(laid: Iterable[_Laid]) -> set[str]:
    """The resource classes the import's plan can hold for a consumer (issue 26).

    nova's rows give each consumer its flavor (VCPU or PCPU, MEMORY_MB,
    DISK_GB) and its ``type-PCI`` devices (one unit of the class of the
    device's provider): :func:`agent.nova_import.instances.instance_record`.
    Never a VF (``type-VF`` rows are neutron ports' business, not the
    flavor's), an mdev (nova's rows do not say which instance holds which),
    nor a flavor's ``resources:CUSTOM_*``: those a consumer holds on the
    import's providers are kept as held (:func:`merge_ours`'s ``produces``).
    """
    classes = {"VCPU", "PCPU", "MEMORY_MB", "DISK_GB"}
    for n in laid:
        for device in n.node.resources.pci_devices:
            name = whole_device_provider_name(n.node.nodename, device.address, n.policy)
            if n.tree.exists(name):
                classes.update(n.tree.data(name).inventory)
    return classes


def write_allocations(
    report: ReportClient,
    plans: Mapping[str, ConsumerAllocations],
    ours: set[str],
    dry: bool,
    res: ImportResult,
    keep: Mapping[str, set[str]] | None = None,
    produces: Collection[str] | None = None,
) -> None:
    """Write (or, dry, diff) each consumer's part on the import's providers.

    Args:
        ours: every provider the import lays out (all nodes) and the sharing
            providers it allocates on; a consumer's parts elsewhere are kept.
        keep: ``{consumer: providers}`` in ``ours`` whose part stays as held.
        produces: the classes the plans can hold (:func:`planned_classes`);
            others held on ``ours`` stay as held. None: every class.
    """
    keep = keep or {}
    for consumer, want in plans.items():
        kept = keep.get(consumer, set())
        try:
            if dry:
                held = report.get_allocations(consumer)
                merged = merge_ours(held, want, ours, kept, produces=produces)
                changed = not _same(merged, held)
                if changed:
                    res.diff.append(allocation_line(consumer, held, merged))
            else:
                changed = (
                    report.edit_allocations(consumer, _editor(want, ours, kept, produces))
                    is not None
                )
        except PlacementError as exc:
            res.refusals.append(
                Refusal(
                    "placement",
                    f"consumer {consumer} ({want.consumer_type})",
                    "",
                    f"allocations not written: {exc.detail or exc}",
                    "check the node's capacity and the consumer in nova; import again",
                )
            )
            continue
        if changed:
            res.allocations_written += 1
        else:
            res.allocations_unchanged += 1


def _editor(
    want: ConsumerAllocations, ours: set[str], kept: set[str], produces: Collection[str] | None
) -> Callable[[ConsumerAllocations], ConsumerAllocations | None]:
    """The ``edit_allocations`` step: ``merge_ours``, or None when nothing would change."""

    def edit(held: ConsumerAllocations) -> ConsumerAllocations | None:
        merged = merge_ours(held, want, ours, kept, produces=produces)
        return None if _same(merged, held) else merged

    return edit


def import_cell(
    report: ReportClient,
    nodes: list[NodeImport],
    consumers: Consumers,
    policy: LayoutPolicy,
    aggregates: Mapping[str, set[str]],
    dry: bool = False,
    gone: GoneLookup | None = None,
) -> ImportResult:
    """Import every node's tree, then every consumer's allocations.

    Args:
        report: a report client whose state directory is the import's own.
        nodes: the compute nodes (already mapped; refused rows left out).
        consumers: instances and migrations by node.
        policy: the layout policy from the configuration (ratios, reserved, NUMA).
        aggregates: ``{host: {aggregate UUID}}`` from nova's API database.
        dry: write nothing; ``ImportResult.diff`` says what would change.
        gone: nova's answer to "which of these consumers are deleted instances
            or finished migrations?"; their part on the import's providers is
            removed (:mod:`agent.nova_import.stale`). None: nothing is removed.

    Returns:
        An :class:`ImportResult`; one node or consumer that fails is a refusal.

    Raises:
        PlacementUnavailable: Placement cannot be reached.
    """
    res = ImportResult()
    laid = _lay_out_all(report, nodes, policy, aggregates, dry, res)
    ours = set().union(*(n.owned | ({n.sharing} if n.sharing else set()) for n in laid))
    owned = {n.node.nodename: n.owned for n in laid}
    keep = {
        c: set().union(*(owned.get(node, set()) for node in nodes))
        for c, nodes in consumers.keep_on.items()
    }
    planned: set[str] = set()
    produces = planned_classes(laid)
    for node in laid:
        plans = plan_node(report, node, consumers)
        planned |= set(plans)
        write_allocations(report, plans, ours, dry, res, keep, produces)
    if gone is not None:
        # Providers Placement already had (a generation): new ones hold nothing yet.
        existing = {u for n in laid for u in n.owned if _in_placement(n.held, u)}
        candidates = held_on(report, existing) - planned - set(keep) - set(consumers.types)
        lines, refusals = remove_gone(report, candidates, gone, ours, dry)
        res.allocations_removed = len(lines)
        (res.diff if dry else res.removed_lines).extend(lines)
        res.refusals.extend(refusals)
    return res


def _lay_out_all(
    report: ReportClient,
    nodes: list[NodeImport],
    policy: LayoutPolicy,
    aggregates: Mapping[str, set[str]],
    dry: bool,
    res: ImportResult,
) -> list[_Laid]:
    """Every node's tree (:func:`lay_out_node`); a node that fails is a refusal."""
    laid: list[_Laid] = []
    # Roots are created while the tree is read, children by the sync: count both.
    before = report.providers_created()
    for node in nodes:
        try:
            laid.append(
                lay_out_node(report, node, policy, aggregates.get(node.host, set()), dry, res)
            )
            res.nodes.append(node.nodename)
        except RowRefused as exc:
            res.refusals.append(exc.refusal)
        except AgentError as exc:
            fix = "correct the conflict in Placement or nova, then import again"
            res.refusals.append(Refusal("placement", node.nodename, "", str(exc), fix))
    if not dry:
        res.created = report.providers_created() - before
    return laid
