"""Which providers in a compute node's tree are the agent's: the one home of the rule.

Rule (nova 34: ``nova/compute/resource_tracker.py`` ``_get_traits`` puts
``COMPUTE_NODE`` and ``OWNER_NOVA`` on the compute node;
``nova/compute/pci_placement_translator.py`` and the libvirt driver's vGPU
code put ``OWNER_NOVA`` on the children nova makes; os-traits >= 3.x has the
``OWNER_`` namespace: ``OWNER_NOVA``, ``OWNER_CYBORG``):

* the compute node (root) is always the agent's: the report client found it
  by the agent's recorded UUID or by name;
* a child carrying the owner trait (``[compute] owner_trait``, default
  ``OWNER_NOVA``) is the agent's;
* a child carrying :data:`LEGACY_OWNER_TRAIT` (written by agents before the
  standard owner namespace) is the agent's and is taken over: the layout's
  next write replaces that trait by the owner trait;
* a child carrying another ``OWNER_*`` trait (``OWNER_CYBORG``) is never the
  agent's;
* a child nova made before it marked its children (nova < 34: no owner trait)
  is taken over when it has nova's shape: a vGPU provider
  ``{nodename}_pci_{dddd_bb_ss_f}`` with VGPU inventory (libvirt driver
  ``_get_pgpu_provider_name`` naming), or a PCI-in-placement provider
  ``{nodename}_{PCI ADDRESS}`` with ``COMPUTE_MANAGED_PCI_DEVICE``
  (``pci_placement_translator.PlacementView._get_rp_name_for_address``);
  or a memory encryption provider ``{nodename}_{model}`` (``amd_sev``,
  ``amd_sev_es``, ``amd_sev_snp``, ``intel_tdx``) with ``MEM_ENCRYPTION_CONTEXT``
  (libvirt driver ``_ensure_memory_encryption_providers``);
* a child whose UUID is the one the agent derives for its name under this
  compute node (``child_uuid(root UUID, name)``, DESIGN.md "Tree shape") is
  the agent's even without the trait: Placement creates a provider and sets
  its traits in two requests, so one the agent created just before a crash
  (of the agent or of Placement) has no trait yet; it is repaired, not
  shunned. No one else holds that UUID by chance (uuid5 of the compute
  node's UUID and the name);
* anything else (a network agent's bandwidth provider, an operator's) is
  someone else's: never changed, never removed.

:func:`adoption_reason` says why a provider not yet marked is taken over, so
the start-up log and ``discover --adopt`` can say what will be taken over.
"""

from __future__ import annotations

import re

import os_traits

from agent.model.provider_data import ProviderData
from agent.model.provider_tree import ProviderTree, child_uuid

DEFAULT_OWNER_TRAIT = os_traits.OWNER_NOVA
"""The owner trait nova 34 writes (``[compute] owner_trait`` default)."""

LEGACY_OWNER_TRAIT = "CUSTOM_OWNER_COMPUTE_AGENT"
"""The owner trait of agents before the os-traits owner namespace (upgrade path)."""

_OWNER_PREFIX = "OWNER_"
_PCI_ADDRESS = r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
_PCI_SLUG = r"[0-9a-f]{4}_[0-9a-f]{2}_[0-9a-f]{2}_[0-7]"
_MEM_ENCRYPTION_MODEL = r"(?:amd_sev|amd_sev_es|amd_sev_snp|intel_tdx)"


def _other_owner(data: ProviderData, owner_trait: str) -> bool:
    """True when ``data`` carries an ``OWNER_*`` trait that is not ``owner_trait``."""
    return any(t.startswith(_OWNER_PREFIX) and t != owner_trait for t in data.traits)


def adoption_reason(data: ProviderData, nodename: str, owner_trait: str) -> str | None:
    """Why a child without ``owner_trait`` is the agent's to take over, or None.

    Args:
        data: the child provider as Placement holds it.
        nodename: the compute node's name (the root's).
        owner_trait: ``[compute] owner_trait``.

    Returns:
        ``"legacy owner trait"``, ``"created by this agent, owner trait not
        written yet"``, ``"nova vGPU provider"``, ``"nova PCI provider"``, or
        None (not the agent's, or already marked).
    """
    if owner_trait in data.traits or _other_owner(data, owner_trait):
        return None
    if LEGACY_OWNER_TRAIT in data.traits:
        return "legacy owner trait"
    if data.root_uuid and data.uuid == child_uuid(data.root_uuid, data.name):
        return "created by this agent, owner trait not written yet"
    node = re.escape(nodename)
    if "VGPU" in data.inventory and re.fullmatch(f"{node}_pci_{_PCI_SLUG}", data.name):
        return "nova vGPU provider"
    if os_traits.COMPUTE_MANAGED_PCI_DEVICE in data.traits and re.fullmatch(
        f"{node}_{_PCI_ADDRESS}", data.name
    ):
        return "nova PCI provider"
    if "MEM_ENCRYPTION_CONTEXT" in data.inventory and re.fullmatch(
        f"{node}_{_MEM_ENCRYPTION_MODEL}", data.name
    ):
        return "nova memory encryption provider"
    return None


def is_ours(data: ProviderData, nodename: str, owner_trait: str) -> bool:
    """True when the child provider ``data`` is the agent's (module docstring rules)."""
    if _other_owner(data, owner_trait) and owner_trait not in data.traits:
        return False
    return owner_trait in data.traits or adoption_reason(data, nodename, owner_trait) is not None


def owned(tree: ProviderTree, nodename: str, owner_trait: str) -> set[str]:
    """UUIDs of the compute node ``nodename`` and of the children that are the agent's."""
    root = tree.data(nodename).uuid
    return {root} | {
        u for u in tree.get_provider_uuids(root)[1:] if is_ours(tree.data(u), nodename, owner_trait)
    }


def foreign(tree: ProviderTree, nodename: str, owner_trait: str) -> list[str]:
    """UUIDs of the children below the compute node ``nodename`` that are not the agent's."""
    root = tree.data(nodename).uuid
    return [
        u
        for u in tree.get_provider_uuids(root)[1:]
        if not is_ours(tree.data(u), nodename, owner_trait)
    ]


def untouchable(tree: ProviderTree, foreign_uuids: list[str]) -> set[str]:
    """The providers the layout must neither change nor remove: the foreign ones and those above.

    A provider above a foreign child cannot be removed or re-created without
    taking that child (someone else's) with it.

    Args:
        tree: the compute node's tree.
        foreign_uuids: from :func:`foreign`.

    Returns:
        UUIDs of ``foreign_uuids`` and of every ancestor of them.
    """
    out = set(foreign_uuids)
    for uuid in foreign_uuids:
        parent = tree.data(uuid).parent_uuid
        while parent is not None:
            out.add(parent)
            parent = tree.data(parent).parent_uuid
    return out


def to_adopt(tree: ProviderTree, nodename: str, owner_trait: str) -> list[tuple[str, str, str]]:
    """``(name, uuid, reason)`` of each child taken over at the next write, by name.

    The compute node is listed too when it lacks ``owner_trait`` but holds
    inventory or traits (``"compute node"``): nova's, found by name with its
    random UUID, or an earlier agent's; not one the report client just created.
    """
    out: list[tuple[str, str, str]] = []
    root = tree.data(nodename)
    if owner_trait not in root.traits and (root.inventory or root.traits):
        out.append((root.name, root.uuid, "compute node"))
    for uuid in tree.get_provider_uuids(root.uuid)[1:]:
        data = tree.data(uuid)
        reason = adoption_reason(data, nodename, owner_trait)
        if reason is not None:
            out.append((data.name, uuid, reason))
    return sorted(out)
