"""What operators add to the tree: provider config files' classes and traits, and their
traits on child providers (docs/tree-shape.md "Provider config files", "Traits on child
providers")."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.conf.provider_config import COMPUTE_NODE, ProviderConfig
from agent.model.exceptions import ConfigError
from agent.model.provider_tree import ProviderTree
from agent.model.resources import Inventory
from agent.shape.layout import OWNER_TRAIT, apply_layout
from agent.shape.policy import LayoutPolicy
from drivers.records import Gpu, HostResources, MdevType, PciDevice

ROOT = "9b0c2d4e-6f8a-4b1c-9d2e-3f4a5b6c7d8e"
GPU = "cn_pci_0000_af_00_0"
TYPES = {
    "nvidia-35": MdevType("nvidia-35", "GRID M60-2Q", 4),
    "nvidia-36": MdevType("nvidia-36", "GRID M60-4Q", 2),
}
HOST = HostResources(
    nodename="cn",
    vcpus=8,
    pcpus=0,
    memory_mb=16384,
    disk_gb=100,
    gpus=(Gpu("0000:af:00.0", TYPES),),
)
POLICY = LayoutPolicy(enabled_mdev_types=("nvidia-35",))
LICENSE = Inventory(total=8, resource_class="CUSTOM_LICENSE_WINDOWS")


MEMORY: dict[str, frozenset[str]] = {}
"""The child traits laid out (ChildTraits), as the tracker keeps them for a node."""


@pytest.fixture(autouse=True)
def _fresh_memory():
    """Each test an agent with no record: children's UUIDs derive from ROOT."""
    MEMORY.clear()


def build(policy: LayoutPolicy = POLICY, tree: ProviderTree | None = None, h=HOST):
    tree = tree or ProviderTree()
    if not tree.exists("cn"):
        tree.new_root("cn", ROOT)
    apply_layout(tree, h, policy, MEMORY)
    return tree


def entry(key: str, *, by_uuid: bool = True, rcs=(), traits=(), source="a.yaml"):
    return ProviderConfig(
        source,
        key if by_uuid else None,
        None if by_uuid else key,
        tuple((inv.resource_class, inv) for inv in rcs),
        frozenset(traits),
    )


def test_compute_node_entry_adds_inventory_and_traits():
    e = entry(COMPUTE_NODE, rcs=[LICENSE], traits=["CUSTOM_SITE_PARIS"])
    t = build(replace(POLICY, provider_configs=(e,)))
    assert t.data("cn").inventory["CUSTOM_LICENSE_WINDOWS"].total == 8
    assert "VCPU" in t.data("cn").inventory
    assert "CUSTOM_SITE_PARIS" in t.data("cn").traits


def test_explicit_entry_wins_over_compute_node():
    """nova's _merge_provider_configs: $COMPUTE_NODE skips a node also named explicitly."""
    default = entry(COMPUTE_NODE, traits=["CUSTOM_DEFAULT"])
    named = entry("cn", by_uuid=False, traits=["CUSTOM_NAMED"], source="b.yaml")
    t = build(replace(POLICY, provider_configs=(default, named)))
    assert "CUSTOM_NAMED" in t.data("cn").traits
    assert "CUSTOM_DEFAULT" not in t.data("cn").traits


def test_child_by_uuid_and_unknown_provider_skipped():
    t = build()
    gpu_uuid = t.data(GPU).uuid
    configs = (
        entry(gpu_uuid, traits=["CUSTOM_GPU_RACK_3"]),
        entry("other-node", by_uuid=False, traits=["CUSTOM_ELSEWHERE"], source="b.yaml"),
    )
    build(replace(POLICY, provider_configs=configs), t)
    assert "CUSTOM_GPU_RACK_3" in t.data(GPU).traits
    assert all("CUSTOM_ELSEWHERE" not in p.traits for p in t.all_data())


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (entry(COMPUTE_NODE, rcs=[Inventory(total=4, resource_class="VCPU")]), "VCPU"),
        (entry(GPU, by_uuid=False, traits=["CUSTOM_NVIDIA_35"]), "CUSTOM_NVIDIA_35"),
        (
            entry(GPU, by_uuid=False, rcs=[Inventory(total=1, resource_class="CUSTOM_NVIDIA_35")]),
            None,
        ),
    ],
)
def test_driver_managed_key_is_refused_naming_file_and_key(config, match):
    policy = replace(POLICY, provider_configs=(config,))
    if match is None:
        build(policy)  # another class on the GPU's provider: added
        return
    with pytest.raises(ConfigError, match=rf"^provider config a\.yaml: .*{match}.*remove it"):
        build(policy)


def test_provider_named_twice_is_refused():
    t = build()
    configs = (
        entry(ROOT, traits=["CUSTOM_A"]),
        entry("cn", by_uuid=False, traits=["CUSTOM_B"], source="b.yaml"),
    )
    with pytest.raises(ConfigError, match=r"b\.yaml: cn: provider cn is already defined in a"):
        build(replace(POLICY, provider_configs=configs), t)


def test_operator_trait_on_a_child_is_kept_across_cycles_and_processes():
    t = build()
    t.add_traits(GPU, "CUSTOM_GOLD_GPU")
    build(tree=t)
    build(tree=t)
    assert "CUSTOM_GOLD_GPU" in t.data(GPU).traits
    # An agent with no record of what it laid out: the trait is still the operator's.
    MEMORY.clear()
    build(tree=t)
    assert t.data(GPU).traits == {"CUSTOM_GOLD_GPU", "CUSTOM_NVIDIA_35", OWNER_TRAIT}


@pytest.mark.parametrize("restart", [False, True])
def test_mdev_type_trait_goes_when_the_type_changes(restart):
    t = build()
    t.add_traits(GPU, "CUSTOM_GOLD_GPU")
    if restart:
        MEMORY.clear()
    build(replace(POLICY, enabled_mdev_types=("nvidia-36",)), t)
    assert t.data(GPU).traits == {"CUSTOM_GOLD_GPU", "CUSTOM_NVIDIA_36", OWNER_TRAIT}


def test_a_device_spec_trait_the_agent_laid_out_goes_when_no_longer_configured():
    """A custom trait is the agent's when it laid it out there (the ChildTraits record)."""
    dev = PciDevice("0000:86:00.0", "10de", "1db4", traits=frozenset({"gold"}))
    h = replace(HOST, gpus=(), pci_devices=(dev,))
    t = build(h=h)
    name = "cn_pci_0000_86_00_0"
    t.add_traits(name, "CUSTOM_OPERATOR")
    assert {"CUSTOM_GOLD", "CUSTOM_OPERATOR"} <= t.data(name).traits
    build(tree=t, h=replace(h, pci_devices=(replace(dev, traits=frozenset({"silver"})),)))
    assert t.data(name).traits >= {"CUSTOM_SILVER", "CUSTOM_OPERATOR"}
    assert "CUSTOM_GOLD" not in t.data(name).traits


def test_standard_families_on_a_child_stay_the_agents():
    t = build()
    t.add_traits(GPU, "HW_GPU_API_VULKAN", "COMPUTE_FOO_BAR")
    build(tree=t)
    assert t.data(GPU).traits == {"CUSTOM_NVIDIA_35", OWNER_TRAIT}
