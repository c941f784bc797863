"""Memory encryption and mixed CPUs end to end: the libvirt driver on sev-host, a real
Placement (``served``: one of its own per test, the fixture's domain UUIDs are fixed),
nova 34's own scheduler code as the judge (tests/helpers/nova_request.py).

* nova's ``ResourceRequest`` for an SEV or SEV-SNP flavor finds the host on the
  agent's ``{node}_amd_sev`` / ``{node}_amd_sev_snp`` child; an SEV-ES flavor
  (not offered: SEV-SNP is on) and a mixed flavor needing more dedicated CPUs than
  the host has find none;
* the agent's plan for the mixed guests equals what nova's ``ResourceRequest`` asks
  for their flavors (VCPU/PCPU split, one PCPU for isolated emulator threads);
* takeover: nova 2025.2's ``{node}_amd_sev`` child (its own UUID, ``OWNER_NOVA``) is
  kept with the allocation a guest holds there; nova's pre-2025.2 shape
  (MEM_ENCRYPTION_CONTEXT and HW_CPU_X86_AMD_SEV on the compute node) is reshaped
  down, inventory and allocations, in one ``POST /reshaper``.
"""

from __future__ import annotations

import uuid as uuidlib

from nova import exception as nova_exception

from agent.placement.report import ReportClient
from agent.shape.adapter import adapt
from agent.state.store import StateStore
from agent.tracker.reshape import reshape_node
from tests.helpers.libvirt_fixtures import libvirt_driver, sev_host_groups
from tests.helpers.names import unique
from tests.helpers.nova_client import Nova
from tests.helpers.nova_request import candidates, flavor, requested_resources
from tests.helpers.placement_http import held_by_name, http, http_get, put_allocations
from tests.helpers.placement_snapshot import amounts, class_totals, snapshot
from tests.helpers.sync import cycle, remote_client, startup_cycle

SEV_GUEST = "5e5e5e5e-0000-4000-8000-000000000001"
MIXED = "5e5e5e5e-0000-4000-8000-000000000003"
MIXED_XML_ONLY = "5e5e5e5e-0000-4000-8000-000000000004"
MIGRATION = "7a7a7a7a-0000-4000-8000-0000000000aa"
UEFI = {"hw_firmware_type": "uefi"}


def sev_driver(tmp_path, name, **over):
    groups = sev_host_groups()
    groups["DEFAULT"] = {"host": name}
    for group, values in over.items():
        groups[group] = {**groups.get(group, {}), **values}
    return libvirt_driver(tmp_path, "sev-host", **groups)


def agent_host(tmp_path, served):
    """The agent's tree for sev-host, written to ``served``; ``(report, driver, name)``."""
    name = unique("sev")
    report = ReportClient(
        remote_client(tmp_path, served.url), StateStore(tmp_path / "state"), sleep=lambda s: None
    )
    driver = sev_driver(tmp_path, name)
    cycle(report, driver, name)
    return report, driver, name


def by_name(base: str, found: list[dict]) -> list[dict]:
    names = {
        p["uuid"]: p["name"] for p in http_get(base, "/resource_providers")["resource_providers"]
    }
    return [{names[rp]: r for rp, r in c.items()} for c in found]


def test_nova_finds_the_memory_encryption_children(tmp_path, served):
    _, _, name = agent_host(tmp_path, served)
    nova = Nova(served.url, "p", "u")
    sev = flavor(2, 2048, 20, hw_mem_encryption="true")
    found = by_name(served.url, candidates(nova, sev, name, **UEFI))
    assert found and all(c[f"{name}_amd_sev"] == {"MEM_ENCRYPTION_CONTEXT": 1} for c in found)
    snp = flavor(2, 2048, 20, hw_mem_encryption="true", hw_mem_encryption_model="amd-sev-snp")
    props = {**UEFI, "hw_firmware_stateless": True}
    found = by_name(served.url, candidates(nova, snp, name, **props))
    assert found and all(c[f"{name}_amd_sev_snp"] == {"MEM_ENCRYPTION_CONTEXT": 1} for c in found)
    es = flavor(2, 2048, 20, hw_mem_encryption="true", hw_mem_encryption_model="amd-sev-es")
    assert candidates(nova, es, name, **UEFI) == []
    # A flavor without memory encryption takes nothing from the children.
    plain = by_name(served.url, candidates(nova, flavor(2, 2048, 20), name))
    assert plain and all(set(c) == {name} for c in plain)


def test_mixed_cpus_are_planned_as_nova_asks(tmp_path, served):
    report, driver, name = agent_host(tmp_path, served)
    tree = report.get_provider_tree_and_ensure_root(name)
    adapt(driver).update_provider_tree(tree, name)
    planned = adapt(driver).expected_allocations(tree, name)
    root = tree.data(name).uuid
    judged = {
        # The domain's metadata carries these extra specs.
        MIXED: flavor(
            4,
            4096,
            20,
            hw_cpu_policy="mixed",
            hw_cpu_dedicated_mask="^0",
            hw_emulator_threads_policy="isolate",
        ),
        # No extra specs recorded: <cputune> pins vCPUs 1 and 3 alone, emulator isolated.
        MIXED_XML_ONLY: flavor(
            4,
            4096,
            20,
            hw_cpu_policy="mixed",
            hw_cpu_dedicated_mask="1,3",
            hw_emulator_threads_policy="isolate",
        ),
    }
    nova = Nova(served.url, "p", "u")
    for consumer, flv in judged.items():
        assert planned[consumer].allocations == {root: requested_resources(flv)}, consumer
        found = by_name(served.url, candidates(nova, flv, name))
        assert found and all(c == {name: requested_resources(flv)} for c in found)
    # 8 dedicated CPUs: 8 dedicated vCPUs and an emulator thread do not fit.
    big = flavor(
        9,
        4096,
        20,
        hw_cpu_policy="mixed",
        hw_cpu_dedicated_mask="^0",
        hw_emulator_threads_policy="isolate",
    )
    assert requested_resources(big)["PCPU"] == 9
    assert candidates(nova, big, name) == []


def test_novas_sev_child_and_its_allocations_are_taken_over(tmp_path, served):
    base = served.url
    report, _, name = agent_host(tmp_path, served)
    root = report.get_provider_tree_and_ensure_root(name).data(name).uuid
    sev_off = f"{name}_amd_sev"
    # nova 2025.2 made the child (random UUID, OWNER_NOVA); replace the agent's with it.
    agent_child = http_get(base, "/resource_providers", name=sev_off)["resource_providers"][0]
    http(base, "DELETE", f"/resource_providers/{agent_child['uuid']}")
    child = str(uuidlib.uuid4())
    http(
        base,
        "POST",
        "/resource_providers",
        {"uuid": child, "name": sev_off, "parent_provider_uuid": root},
    )
    http(
        base,
        "PUT",
        f"/resource_providers/{child}/inventories",
        {
            "resource_provider_generation": 0,
            "inventories": {"MEM_ENCRYPTION_CONTEXT": {"total": 59, "max_unit": 1}},
        },
    )
    http(
        base,
        "PUT",
        f"/resource_providers/{child}/traits",
        {"resource_provider_generation": 1, "traits": ["HW_CPU_X86_AMD_SEV", "OWNER_NOVA"]},
    )
    driver = sev_driver(tmp_path, name)
    tree = report.get_provider_tree_and_ensure_root(name)
    adapt(driver).update_provider_tree(tree, name)
    guest = adapt(driver).expected_allocations(tree, name)[SEV_GUEST]
    assert guest.allocations[child] == {"MEM_ENCRYPTION_CONTEXT": 1}
    put_allocations(base, SEV_GUEST, guest.allocations, "p-nova-1")

    outcome = reshape_node(report, adapt(driver), name)
    assert not outcome.needed
    cycle(report, driver, name)
    after = snapshot(base, root)
    assert after["providers"][child]["inventories"]["MEM_ENCRYPTION_CONTEXT"]["total"] == 59
    assert amounts(after)[SEV_GUEST][sev_off] == {"MEM_ENCRYPTION_CONTEXT": 1}
    traits = http_get(base, f"/resource_providers/{child}/traits")["traits"]
    assert set(traits) == {"HW_CPU_X86_AMD_SEV", "OWNER_NOVA"}


def test_root_level_sev_is_reshaped_down_with_its_allocations(tmp_path, served):
    base = served.url
    report, _, name = agent_host(tmp_path, served)
    # The tree before the agent: SEV off in the kernel, so no child ...
    flat = sev_driver(tmp_path, name, host_driver={"sysfs_root": str(tmp_path / "no-sev")})
    tree = report.get_provider_tree_and_ensure_root(name)
    adapt(flat).update_provider_tree(tree, name)
    report.update_from_provider_tree(tree)
    root = tree.data(name).uuid
    # ... and nova's pre-2025.2 shape: 59 slots and HW_CPU_X86_AMD_SEV on the compute node.
    held = http_get(base, f"/resource_providers/{root}/inventories")
    http(
        base,
        "PUT",
        f"/resource_providers/{root}/inventories",
        {
            "resource_provider_generation": held["resource_provider_generation"],
            "inventories": {
                **held["inventories"],
                "MEM_ENCRYPTION_CONTEXT": {"total": 59, "max_unit": 1},
            },
        },
    )
    traits = http_get(base, f"/resource_providers/{root}/traits")
    http(
        base,
        "PUT",
        f"/resource_providers/{root}/traits",
        {
            "resource_provider_generation": traits["resource_provider_generation"],
            "traits": [*traits["traits"], "HW_CPU_X86_AMD_SEV"],
        },
    )
    tree = report.get_provider_tree_and_ensure_root(name)
    for consumer, rec in adapt(flat).expected_allocations(tree, name).items():
        per_rp = dict(rec.allocations)
        if consumer == SEV_GUEST:
            per_rp[root] = {**per_rp[root], "MEM_ENCRYPTION_CONTEXT": 1}
        put_allocations(base, consumer, per_rp, rec.project_id)
    # A migration record nova's conductor moved an SEV guest's share to: not an instance here.
    put_allocations(base, MIGRATION, {root: {"MEM_ENCRYPTION_CONTEXT": 1, "VCPU": 2}}, "p")
    before = snapshot(base, root)

    driver = sev_driver(tmp_path, name)
    posts = report.client.counts[("POST", "/reshaper")]
    outcome = reshape_node(report, adapt(driver), name)
    assert outcome.needed and outcome.reshaped
    assert report.client.counts[("POST", "/reshaper")] - posts == 1

    after = snapshot(base, root)
    assert class_totals(after) == class_totals(before)  # nothing lost, nothing doubled
    moved = amounts(after)
    for consumer in (SEV_GUEST, MIGRATION):
        assert moved[consumer][f"{name}_amd_sev"] == {"MEM_ENCRYPTION_CONTEXT": 1}, consumer
        assert "MEM_ENCRYPTION_CONTEXT" not in moved[consumer].get(name, {})
    assert "MEM_ENCRYPTION_CONTEXT" not in after["providers"][root]["inventories"]
    root_traits = http_get(base, f"/resource_providers/{root}/traits")["traits"]
    assert "HW_CPU_X86_AMD_SEV" not in root_traits
    tree = report.get_provider_tree_and_ensure_root(name)
    adapt(driver).update_provider_tree(tree, name)
    assert adapt(driver).expected_allocations(tree, name)[SEV_GUEST].allocations == {
        rp: a["resources"] for rp, a in after["allocations"][SEV_GUEST]["allocations"].items()
    }


def test_nova_refuses_what_it_refuses(tmp_path):
    """nova's own checks stay the judge's: SEV-SNP without stateless firmware is refused."""
    snp = flavor(2, 2048, 20, hw_mem_encryption="true", hw_mem_encryption_model="amd-sev-snp")
    try:
        requested_resources(snp, **UEFI)
    except nova_exception.StatelessFirmwareRequired:
        return
    raise AssertionError("nova accepted an SEV-SNP flavor without stateless firmware")


def test_the_agents_cycle_writes_what_nova_would_claim(tmp_path, served):
    """The service's own start-up cycle on sev-host: each guest's allocation as planned."""
    name = unique("sev")
    outcome = startup_cycle(tmp_path, served.url, sev_driver(tmp_path, name))
    assert outcome.ok
    assert held_by_name(served.url, SEV_GUEST) == {
        name: {"DISK_GB": 20, "MEMORY_MB": 2048, "VCPU": 2},
        f"{name}_amd_sev": {"MEM_ENCRYPTION_CONTEXT": 1},
    }
    mixed = flavor(
        4,
        4096,
        20,
        hw_cpu_policy="mixed",
        hw_cpu_dedicated_mask="^0",
        hw_emulator_threads_policy="isolate",
    )
    assert held_by_name(served.url, MIXED) == {name: requested_resources(mixed)}
    usages = http_get(served.url, "/resource_providers", name=f"{name}_amd_sev")
    child = usages["resource_providers"][0]["uuid"]
    assert http_get(served.url, f"/resource_providers/{child}/usages")["usages"] == {
        "MEM_ENCRYPTION_CONTEXT": 1
    }
