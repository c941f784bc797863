"""Turn a driver's :class:`HostResources` into resource providers.

This is the one place that knows the tree's shape (DESIGN.md, "Tree shape"):

============================  ==============================  ==========================
provider                      name                            inventory
============================  ==============================  ==========================
compute node (root)           ``{nodename}``                  VCPU, PCPU, MEMORY_MB, DISK_GB
NUMA cell (when modelled)     ``{nodename}_NUMA{N}``          VCPU, PCPU, MEMORY_MB of the cell
physical GPU                  ``{nodename}_pci_{dddd_bb_ss_f}``  VGPU
SR-IOV PF                     ``{nodename}_pci_{dddd_bb_ss_f}``  SRIOV_NET_VF
whole PCI device              ``{nodename}_pci_{dddd_bb_ss_f}``  CUSTOM_PCI_{VENDOR}_{PRODUCT}
memory encryption model       ``{nodename}_{model}``          MEM_ENCRYPTION_CONTEXT
============================  ==============================  ==========================

One module per kind of provider: :mod:`agent.shape.cpu_memory` (compute
node and NUMA cells), :mod:`agent.shape.pci` (SR-IOV PFs, whole PCI
devices), :mod:`agent.shape.vgpu` (physical GPUs),
:mod:`agent.shape.mem_encryption` (AMD SEV models); names in
:mod:`agent.shape.provider_names`, the configuration in
:mod:`agent.shape.policy`. This module puts them together
(:func:`desired_providers`) and writes them into a tree (:func:`apply_layout`).
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping

import os_traits

from agent.model import ownership
from agent.model.exceptions import ConfigError
from agent.model.provider_tree import ProviderTree
from agent.shape.cpu_memory import (
    Ratios,
    disk_inventory,
    flat_cpu_memory,
    numa_cell_specs,
    pmem_inventory,
)
from agent.shape.mem_encryption import MODEL_TRAITS, mem_encryption_specs
from agent.shape.node_traits import (
    is_capability_trait,
    is_managed_child_trait,
    is_managed_root_trait,
    root_traits,
)
from agent.shape.pci import pci_device_specs, sriov_pf_specs
from agent.shape.policy import LayoutPolicy
from agent.shape.provider_configs import apply_provider_configs
from agent.shape.provider_names import numa_provider_name
from agent.shape.spec import ParentOf, ProviderSpec
from agent.shape.vgpu import vgpu_specs
from drivers.records import HostResources

ChildTraits = MutableMapping[str, frozenset[str]]
"""Provider UUID -> the traits the agent last laid out on that child provider (kept
per node in the state directory by the tracker, so a restart remembers them)."""

LOG = logging.getLogger(__name__)

OWNER_TRAIT = ownership.DEFAULT_OWNER_TRAIT
"""The default owner trait (``[compute] owner_trait``), carried by every provider laid out.

Which children are the agent's is decided in :mod:`agent.model.ownership` alone."""


def desired_providers(
    host: HostResources, policy: LayoutPolicy, tree: ProviderTree | None = None
) -> list[ProviderSpec]:
    """The providers ``host`` should have under ``policy``, parents first.

    Args:
        host: what the driver found.
        policy: the configuration that shapes the tree.
        tree: the current tree, read only to keep Placement's allocation
            ratios when no ratio is configured (nova's rule).

    Returns:
        A list of :class:`ProviderSpec`, the compute node first.

    Raises:
        ConfigError: a ``reserved_host_*`` option exceeds what the host has,
            or a provider config file adds what the driver reports
            (:mod:`agent.shape.provider_configs`).
    """
    ratio = Ratios(tree or ProviderTree(), policy)
    numa = policy.model_numa and bool(host.numa_cells)
    root = ProviderSpec(host.nodename, None, {}, root_traits(host) - MODEL_TRAITS)
    specs = [root]
    if numa:
        specs += numa_cell_specs(host, policy, ratio)
    else:
        root.inventory.update(flat_cpu_memory(host, policy, ratio))
    root.inventory.update(disk_inventory(host, policy, ratio))
    root.inventory.update(pmem_inventory(host))
    parent_of = _device_parent(host, numa)
    specs += sriov_pf_specs(host, policy, parent_of)
    specs += vgpu_specs(host, policy, parent_of)
    specs += pci_device_specs(host, policy, parent_of, tree or ProviderTree())
    specs += mem_encryption_specs(host)
    if policy.resource_class_renames:
        _rename_classes(specs, dict(policy.resource_class_renames))
    apply_provider_configs(specs, policy.provider_configs, tree, policy.owner_trait)
    return specs


def _device_parent(host: HostResources, numa: bool) -> ParentOf:
    """A device hangs under its NUMA cell's provider when cells are modelled, else the node."""
    node = host.nodename
    cell_ids = {c.id for c in host.numa_cells}

    def parent_of(numa_node: int | None) -> str:
        if numa and numa_node is not None and numa_node in cell_ids:
            return numa_provider_name(node, numa_node)
        return node

    return parent_of


def _rename_classes(specs: list[ProviderSpec], renames: dict[str, str]) -> None:
    """Report NEW wherever OLD would be reported (``[compute] resource_class_renames``).

    Raises:
        ConfigError: a provider would report both OLD and NEW (the two would merge).
    """
    for spec in specs:
        for old in [rc for rc in spec.inventory if rc in renames]:
            new = renames[old]
            if new in spec.inventory:
                raise ConfigError(
                    f"[compute] resource_class_renames: provider {spec.name} already reports "
                    f"{new}, so {old} cannot be renamed to it; choose another NEW name"
                )
            spec.inventory[new] = spec.inventory.pop(old)


def apply_layout(
    tree: ProviderTree,
    host: HostResources,
    policy: LayoutPolicy,
    laid_out: ChildTraits | None = None,
) -> None:
    """Edit ``tree`` in place so the compute node ``host.nodename`` has the desired shape.

    The compute node must already be in the tree (its caller chose its UUID).
    Children are created and updated, and those the host no longer has, or
    whose parent changed, are removed (a moved one is created again under its
    new parent with the same UUID). Every provider laid out carries
    the owner trait (``policy.owner_trait``); the compute node also carries
    ``COMPUTE_NODE`` (nova's ``ResourceTracker._get_traits``).
    Ownership (:mod:`agent.model.ownership`): a child provider that is not the
    agent's (no owner trait, and not one to take over) was made by
    someone else (a network agent's bandwidth provider, an operator): it is
    never changed or removed, nor is any provider above it; a provider the
    layout wants under a name such a child holds is not reported, and a
    warning says so once per process.
    Operator-set traits on the compute node outside
    :func:`agent.shape.node_traits.is_managed_root_trait` are kept, and so
    are those on a child the agent did not lay out there (:func:`_traits`);
    aggregates are never touched. Provider config files' inventories and
    traits are laid out with the driver's (:mod:`agent.shape.provider_configs`).

    Args:
        laid_out: the traits the agent last laid out on each child provider of
            this node (:data:`ChildTraits`), updated here; None: nothing is
            remembered, so only managed families are the agent's.

    Raises:
        ProviderNotFound: the compute node is not in the tree.
        ConfigError: a reserved amount exceeds the host's total.
    """
    specs = desired_providers(host, policy, tree)
    node = host.nodename
    owner = policy.owner_trait
    root_uuid = tree.data(node).uuid
    _log_adoption(tree, node, owner)
    foreign = ownership.foreign(tree, node, owner)
    protected = ownership.untouchable(tree, foreign)
    for uuid in foreign:
        _warn_foreign(tree.data(uuid).name, uuid, node, owner)
    moved = _remove_unwanted(tree, root_uuid, protected, {s.name: s for s in specs})
    for spec in specs:
        if spec.parent is not None:
            if tree.exists(spec.name) and tree.data(spec.name).uuid in foreign:
                continue
            if not tree.exists(spec.parent) or tree.data(spec.parent).uuid in foreign:
                continue
            if not tree.exists(spec.name):
                tree.new_child(spec.name, spec.parent, uuid=moved.get(spec.name))
        tree.update_inventory(spec.name, spec.inventory)
        tree.update_traits(spec.name, _traits(tree, spec, owner, laid_out))


def _remove_unwanted(
    tree: ProviderTree, root_uuid: str, protected: set[str], wanted: dict[str, ProviderSpec]
) -> dict[str, str]:
    """Remove the children the layout does not want where they are; return the moved ones.

    Returns:
        ``{name: UUID}`` of the providers wanted under another parent: they are
        created again under it with the same UUID (a UUID nova chose at random
        included), so Placement sees a re-parented provider, not a new one
        beside the old name.
    """
    moved: dict[str, str] = {}
    # Deepest first, so a subtree is never visited after its parent went.
    for uuid in reversed(tree.get_provider_uuids(root_uuid)[1:]):
        if not tree.exists(uuid) or uuid in protected:
            continue
        p = tree.data(uuid)
        spec = wanted.get(p.name)
        parent_name = tree.data(p.parent_uuid).name if p.parent_uuid else None
        if spec is None or spec.parent != parent_name:
            if spec is not None:
                moved[p.name] = uuid
            tree.remove(uuid)
    return moved


def _traits(
    tree: ProviderTree, spec: ProviderSpec, owner: str, laid_out: ChildTraits | None
) -> set[str]:
    """What ``spec``'s provider carries: its traits and the owner trait, and every trait
    the agent does not decide there; the compute node also ``COMPUTE_NODE``.

    On a child, a trait is the agent's when
    :func:`agent.shape.node_traits.is_managed_child_trait` says so or when the
    agent laid it out there before (``laid_out``): the three-way merge of what
    Placement holds against what the agent last wanted, so a trait an operator
    set survives and one the agent set and no longer wants goes.
    """
    if spec.parent is not None:
        p = tree.data(spec.name)
        before = laid_out.get(p.uuid, frozenset()) if laid_out is not None else frozenset()
        wanted = spec.traits | {owner}
        if laid_out is not None:
            laid_out[p.uuid] = frozenset(wanted)
        kept = {
            t
            for t in p.traits
            if t not in before and not is_managed_child_trait(t, owner, spec.decides)
        }
        return kept | wanted
    capabilities = any(is_capability_trait(t) for t in spec.traits)
    kept = {
        t for t in tree.data(spec.name).traits if not is_managed_root_trait(t, owner, capabilities)
    }
    return kept | spec.traits | {os_traits.COMPUTE_NODE, owner}


_warned_foreign: set[str] = set()
_logged_adoption: set[str] = set()


def _log_adoption(tree: ProviderTree, node: str, owner: str) -> None:
    """Log once per provider what this write takes over (nova's, or an earlier agent's)."""
    for name, uuid, reason in ownership.to_adopt(tree, node, owner):
        if uuid in _logged_adoption:
            continue
        _logged_adoption.add(uuid)
        LOG.warning(
            "compute node %s: taking over provider %s (%s): %s; it gets trait %s and its "
            "allocations are kept",
            node,
            name,
            uuid,
            reason,
            owner,
        )


def _warn_foreign(name: str, uuid: str, node: str, owner: str) -> None:
    if uuid in _warned_foreign:
        return
    _warned_foreign.add(uuid)
    LOG.warning(
        "provider %s (%s) in the tree of compute node %s lacks trait %s: it belongs to "
        "another service or an operator and is left unchanged. If it is this agent's, add "
        "the trait to it (openstack resource provider trait set ...)",
        name,
        uuid,
        node,
        owner,
    )
