"""Taking over a nova-compute host: nova 34's Placement state, one start-up cycle, real Placement.

The state is :mod:`tests.functional.nova_state` (nova's random root UUID,
OWNER_NOVA, vGPU and PCI-in-placement children, instance and migration
allocations). After one start-up cycle of the agent on the same hardware:
no provider is duplicated (each of nova's keeps its UUID), no allocation is
lost or moved, the migration's allocation is untouched, and the start-up
log names what was taken over.
"""

from __future__ import annotations

import logging

import pytest

from agent import ownership
from tests.functional.conftest import http_get
from tests.functional.nova_state import write_nova_host
from tests.functional.test_tracker import Setup

GROUPS = {
    "numa": {"model_in_placement": False},
    "pci": {"report_in_placement": True},
    "DEFAULT": {"reserved_host_memory_mb": 512},
}


@pytest.fixture
def nova_host(tmp_path, embedded):
    s = Setup(tmp_path, embedded, **GROUPS)
    nova = write_nova_host(s.base, s.nodename, s.prefix)
    return s, nova


def providers_of(s: Setup, root_uuid: str) -> dict[str, dict]:
    listed = http_get(s.base, "/resource_providers", in_tree=root_uuid)["resource_providers"]
    return {p["name"]: p for p in listed}


def held_by_name(s: Setup, consumer: str) -> dict[str, dict[str, int]]:
    return s.held(consumer)


def test_one_startup_cycle_takes_over_without_duplicates_or_moves(nova_host):
    s, nova = nova_host
    root = nova.uuids[s.nodename]
    before = {c: held_by_name(s, c) for c in nova.allocations}
    outcome = s.cycle(startup=True)

    assert outcome.ok, outcome.summary()
    after_providers = providers_of(s, root)
    # Every provider nova made is still there under its UUID, and no name twice.
    for name, uuid in nova.uuids.items():
        assert after_providers[name]["uuid"] == uuid
    everyone = http_get(s.base, "/resource_providers")["resource_providers"]
    names = [p["name"] for p in everyone if p["name"].startswith(s.nodename)]
    assert len(names) == len(set(names))
    # The agent's own: the SR-IOV PFs (neutron ports), nothing else new.
    assert set(after_providers) - set(nova.uuids) == {
        f"{s.nodename}_pci_0000_3b_00_0",
        f"{s.nodename}_pci_0000_d8_00_0",
    }
    # No allocation lost or moved: every part nova wrote is still there, same amounts.
    for consumer, parts in before.items():
        held = held_by_name(s, consumer)
        for provider, resources in parts.items():
            assert held[provider] == resources, (consumer, provider)
    # The migration's allocation is exactly as nova left it.
    migration = next(c for c, a in nova.allocations.items() if not c.startswith(s.prefix))
    assert held_by_name(s, migration) == before[migration]
    # Everything is marked as the agent's now; the compute node keeps nova's marks.
    for p in after_providers.values():
        traits = http_get(s.base, f"/resource_providers/{p['uuid']}/traits")["traits"]
        assert ownership.DEFAULT_OWNER_TRAIT in traits
    root_traits = set(http_get(s.base, f"/resource_providers/{root}/traits")["traits"])
    assert {"COMPUTE_NODE", "OWNER_NOVA"} <= root_traits
    pci = after_providers[f"{s.nodename}_0000:86:00.0"]["uuid"]
    pci_traits = http_get(s.base, f"/resource_providers/{pci}/traits")["traits"]
    assert "COMPUTE_MANAGED_PCI_DEVICE" in pci_traits


def test_a_second_cycle_changes_nothing(nova_host):
    s, nova = nova_host
    assert s.cycle(startup=True).ok
    before = {c: held_by_name(s, c) for c in nova.allocations}
    outcome = s.cycle()
    assert outcome.ok
    (node,) = outcome.nodes
    assert node.allocations_written == [] and node.allocations_removed == []
    assert {c: held_by_name(s, c) for c in nova.allocations} == before


def test_nova_children_without_owner_trait_are_recognised(nova_host, caplog):
    """nova before OWNER_NOVA on children: its vGPU and PCI providers are still adopted."""
    s, nova = nova_host
    for name in (f"{s.nodename}_pci_0000_5e_00_0", f"{s.nodename}_0000:86:00.0"):
        uuid = nova.uuids[name]
        current = http_get(s.base, f"/resource_providers/{uuid}/traits")
        nova.call(
            "PUT",
            f"/resource_providers/{uuid}/traits",
            {
                "resource_provider_generation": current["resource_provider_generation"],
                "traits": [t for t in current["traits"] if t != "OWNER_NOVA"],
            },
        )
    tree = s.report.get_provider_tree_and_ensure_root(s.nodename)
    adopt = {name: reason for name, _, reason in ownership.to_adopt(tree, s.nodename, "OWNER_NOVA")}
    assert adopt == {
        f"{s.nodename}_pci_0000_5e_00_0": "nova vGPU provider",
        f"{s.nodename}_0000:86:00.0": "nova PCI provider",
    }
    caplog.set_level(logging.WARNING, logger="agent.layout")
    assert s.cycle(startup=True).ok
    said = [r.getMessage() for r in caplog.records if "taking over provider" in r.getMessage()]
    assert sorted(said) == sorted(
        f"compute node {s.nodename}: taking over provider {name} ({nova.uuids[name]}): "
        f"{reason}; it gets trait OWNER_NOVA and its allocations are kept"
        for name, reason in adopt.items()
    )
    for name in adopt:
        traits = http_get(s.base, f"/resource_providers/{nova.uuids[name]}/traits")["traits"]
        assert "OWNER_NOVA" in traits
