"""Memory encryption providers (AMD SEV, SEV-ES, SEV-SNP, Intel TDX) and a guest's share of them.

nova 34's shape (nova/virt/libvirt/driver.py
``_update_provider_tree_for_memory_encryption``,
``_ensure_memory_encryption_providers``, ``_get_memory_encryption_inventories``):
one child of the compute node per model the host offers, named
``{nodename}_{model}`` (``cn1_amd_sev``, ``cn1_intel_tdx``), with
``MEM_ENCRYPTION_CONTEXT`` inventory ``total`` = the model's slots,
``min_unit = max_unit = step_size = 1``, ``reserved`` 0, allocation ratio 1.0, and
the model's trait (``HW_CPU_X86_AMD_SEV`` ... ``HW_CPU_X86_INTEL_TDX``) besides the
owner trait. A model without slots has no provider. nova 2025.2 moved the
inventory down from the compute node and removes ``HW_CPU_X86_AMD_SEV`` from it;
the start-up reshape (:mod:`agent.shape.reshape`) moves a root-level inventory and
its allocations to the child, and the root never carries the models' traits (Intel
TDX was never on the compute node: nova 34 added it with the children).

nova's scheduler (``ResourceRequest._translate_mem_encryption_request``)
asks ``MEM_ENCRYPTION_CONTEXT:1`` and the model's trait in the unsuffixed
group for a flavor with ``hw:mem_encryption`` (or an image with
``hw_mem_encryption``; ``hw:mem_encryption_model`` / ``hw_mem_encryption_model``
``intel-tdx`` asks ``HW_CPU_X86_INTEL_TDX``): a guest using a model holds one unit on
that child.
"""

from __future__ import annotations

import logging

import os_traits

from agent.model.provider_tree import ProviderTree
from agent.model.resources import Inventory
from agent.shape.provider_names import mem_encryption_provider_name
from agent.shape.spec import ProviderSpec
from drivers.records import HostResources, Instance

LOG = logging.getLogger(__name__)

MEM_ENCRYPTION_CONTEXT = "MEM_ENCRYPTION_CONTEXT"
"""The resource class (os-resource-classes ``MEM_ENCRYPTION_CONTEXT``)."""

MODEL_TRAITS = frozenset(
    {
        os_traits.HW_CPU_X86_AMD_SEV,
        os_traits.HW_CPU_X86_AMD_SEV_ES,
        os_traits.HW_CPU_X86_AMD_SEV_SNP,
        os_traits.HW_CPU_X86_INTEL_TDX,
    }
)
"""The models' traits: on their children, never on the compute node (nova 2025.2)."""


def mem_encryption_specs(host: HostResources) -> list[ProviderSpec]:
    """One child of the compute node per memory encryption model with slots (module docstring)."""
    specs = []
    for me in host.mem_encryption:
        if me.slots <= 0:
            continue
        inv = Inventory(total=me.slots, max_unit=1, resource_class=MEM_ENCRYPTION_CONTEXT)
        name = mem_encryption_provider_name(host.nodename, me.model)
        specs.append(ProviderSpec(name, host.nodename, {MEM_ENCRYPTION_CONTEXT: inv}, {me.trait}))
    return specs


def plan_mem_encryption(inst: Instance, tree: ProviderTree, nodename: str) -> str | None:
    """The UUID of the provider ``inst``'s one MEM_ENCRYPTION_CONTEXT is on, or None.

    None for a guest without memory encryption, and (warned) for one whose
    model the node does not offer (a guest started before the host's SEV was
    turned off, or a TDX guest on a host whose TDX capacity is unknown): nothing is
    planned for it then.
    """
    if not inst.mem_encryption:
        return None
    name = mem_encryption_provider_name(nodename, inst.mem_encryption)
    if not tree.exists(name) or MEM_ENCRYPTION_CONTEXT not in tree.data(name).inventory:
        LOG.warning(
            "instance %s uses memory encryption %s, which node %s does not offer (no provider "
            "%s); no MEM_ENCRYPTION_CONTEXT is allocated for it",
            inst.uuid,
            inst.mem_encryption,
            nodename,
            name,
        )
        return None
    return tree.data(name).uuid
