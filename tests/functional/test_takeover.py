"""Taking over a nova-compute host: nova 34's Placement state, one start-up cycle, real Placement.

The state is :mod:`tests.helpers.nova_state` (nova's random root UUID,
OWNER_NOVA, vGPU and PCI-in-placement children, instance and migration
allocations). After one start-up cycle of the agent on the same hardware:
no provider is duplicated (each of nova's keeps its UUID), no allocation is
lost or moved, the migration's allocation is untouched, and the start-up
log names what was taken over.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.model import ownership
from agent.placement.client import PlacementClient
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver
from tests.helpers.conf import make_conf
from tests.helpers.hosts import BIG_HOST, EXAMPLE_PREFIX, HostDescription
from tests.helpers.nova_state import write_nova_host
from tests.helpers.paths import REPO
from tests.helpers.placement_http import http_get
from tests.helpers.tracker import Setup

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
    caplog.set_level(logging.WARNING, logger="agent.shape.layout")
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


def test_adopt_dry_run_says_what_is_taken_over_and_writes_nothing(tmp_path, served):
    """``compute-agent adopt --dry-run`` on Placement's database as nova left it."""
    host = HostDescription.load(BIG_HOST).rename("cn-nova").write(tmp_path / "host.yaml")
    nova = write_nova_host(served.url, "cn-nova", EXAMPLE_PREFIX)
    unowned = nova.uuids["cn-nova_pci_0000_af_00_0"]
    current = http_get(served.url, f"/resource_providers/{unowned}/traits")
    nova.call(
        "PUT",
        f"/resource_providers/{unowned}/traits",
        {"resource_provider_generation": current["resource_provider_generation"], "traits": []},
    )
    before = http_get(served.url, "/resource_providers")
    served.stop()
    conf = tmp_path / "agent.conf"
    conf.write_text(
        f"[DEFAULT]\nstate_path = {served.state}\n[pci]\nreport_in_placement = true\n"
        "[devices]\nenabled_mdev_types = nvidia-35\n"
    )
    command = [sys.executable, "-m", "agent.cli.main", "adopt", "--dry-run", "--config", str(conf)]
    r = subprocess.run(
        [*command, "--driver", "fake", "--fake-host", str(host)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    lines = [line.strip() for line in r.stdout.splitlines()]
    assert f"take over cn-nova_pci_0000_af_00_0 ({unowned}): nova vGPU provider" in lines
    root = nova.uuids["cn-nova"]
    assert f"already the agent's: cn-nova ({root})" in lines
    assert "create cn-nova_pci_0000_3b_00_0" in lines
    assert "allocations kept: 5 consumer(s) hold resources here" in lines
    served.start()
    assert http_get(served.url, "/resource_providers") == before


def state_files(state: Path) -> dict[str, bytes]:
    """Every file under ``state`` and its bytes (an absent directory: none)."""
    return {str(p.relative_to(state)): p.read_bytes() for p in state.rglob("*") if p.is_file()}


def test_adopt_dry_run_writes_no_state_file_and_sends_only_gets(tmp_path, served, monkeypatch):
    """Issue 26, defect 7: ``adopt --dry-run`` read the tree through the mirror, which
    recorded compute_nodes.json and placement_seen.json in the state directory.

    Run in-process so every request the command sends is seen (the client's
    ``_send`` is wrapped, the requests still go to the served Placement).
    """
    host = HostDescription.load(BIG_HOST).rename("cn-nova").write(tmp_path / "host.yaml")
    write_nova_host(served.url, "cn-nova", EXAMPLE_PREFIX)
    state = tmp_path / "state"
    state.mkdir()
    (state / "operator-note.txt").write_text("kept as it is\n")
    conf = tmp_path / "agent.conf"
    conf.write_text(
        f"[DEFAULT]\nstate_path = {state}\n[pci]\nreport_in_placement = true\n"
        "[devices]\nenabled_mdev_types = nvidia-35\n"
        f"[placement]\nauth_type = admin_token\nendpoint = {served.url}\ntoken = admin\n"
        "noauth_roles = admin,service\n"
    )
    methods: list[str] = []
    send = PlacementClient._send

    def recording_send(self, method, *args, **kwargs):
        methods.append(method)
        return send(self, method, *args, **kwargs)

    monkeypatch.setattr(PlacementClient, "_send", recording_send)
    before = state_files(state)
    argv = ["adopt", "--dry-run", "--config", str(conf), "--driver", "fake"]
    assert main([*argv, "--fake-host", str(host)]) == 0
    assert state_files(state) == before
    assert methods and set(methods) == {"GET"}, methods


def test_a_tree_of_an_earlier_agent_is_taken_over_at_startup(tmp_path, embedded):
    """Upgrade path: CUSTOM_OWNER_COMPUTE_AGENT is recognised as ours and replaced."""
    old = Setup(tmp_path, embedded, compute={"owner_trait": "CUSTOM_OWNER_COMPUTE_AGENT"})
    assert old.cycle(startup=True).ok
    root = old.uuid(old.nodename)
    listed = http_get(old.base, "/resource_providers", in_tree=root)["resource_providers"]
    uuids = {p["name"]: p["uuid"] for p in listed}
    held = {old.inst(i): old.held(old.inst(i)) for i in (1, 2, 3, 4)}
    conf = make_conf(
        tmp_path,
        numa={"model_in_placement": True},
        devices={"enabled_mdev_types": ["nvidia-35", "nvidia-36"]},
    )
    driver = FakeDriver(conf, tmp_path / "host.yaml")  # the new agent: default owner trait
    new = ResourceTracker(conf, driver, old.report, old.state, clock=lambda: old.now)
    outcome = new.update_available_resource(startup=True)
    assert outcome.ok, outcome.summary()
    after = http_get(old.base, "/resource_providers", in_tree=root)["resource_providers"]
    assert {p["name"]: p["uuid"] for p in after} == uuids
    for p in after:
        traits = http_get(old.base, f"/resource_providers/{p['uuid']}/traits")["traits"]
        assert "OWNER_NOVA" in traits and "CUSTOM_OWNER_COMPUTE_AGENT" not in traits
    assert {c: old.held(c) for c in held} == held
    assert outcome.nodes[0].allocations_written == []


def test_numa_turned_on_after_takeover_reshapes_nova_providers_in_place(nova_host, tmp_path):
    """nova's vGPU providers (random UUIDs) move under their cells keeping their UUIDs."""
    s, nova = nova_host
    assert s.cycle(startup=True).ok
    conf = make_conf(
        tmp_path,
        numa={"model_in_placement": True},
        pci={"report_in_placement": True},
        devices={"enabled_mdev_types": ["nvidia-35", "nvidia-36"]},
    )
    driver = FakeDriver(conf, tmp_path / "host.yaml")
    tracker = ResourceTracker(conf, driver, s.report, s.state, clock=lambda: s.now)
    outcome = tracker.update_available_resource(startup=True)
    assert outcome.ok, outcome.summary()
    assert outcome.nodes[0].sync.reshaped
    gpu = f"{s.nodename}_pci_0000_5e_00_0"
    moved = http_get(s.base, f"/resource_providers/{nova.uuids[gpu]}")
    assert moved["name"] == gpu  # the same provider, now under cell 0
    assert moved["parent_provider_uuid"] == s.uuid(f"{s.nodename}_NUMA0")
    for i in (1, 2):
        assert s.held(s.inst(i))[gpu] == {"VGPU": 1}
    names = [p["name"] for p in http_get(s.base, "/resource_providers")["resource_providers"]]
    assert names.count(gpu) == 1


def test_an_operator_trait_on_novas_gpu_provider_is_kept(nova_host):
    """nova's vGPU guide: an operator sets a custom trait per physical GPU provider and
    flavors require it; taking the host over keeps it, cycle after cycle."""
    s, nova = nova_host
    gpu = nova.uuids[f"{s.nodename}_pci_0000_af_00_0"]
    current = http_get(s.base, f"/resource_providers/{gpu}/traits")
    nova.call("PUT", "/traits/CUSTOM_GPU_RACK_7")
    nova.call(
        "PUT",
        f"/resource_providers/{gpu}/traits",
        {
            "resource_provider_generation": current["resource_provider_generation"],
            "traits": [*current["traits"], "CUSTOM_GPU_RACK_7"],
        },
    )
    assert s.cycle(startup=True).ok
    assert s.cycle().ok
    traits = set(http_get(s.base, f"/resource_providers/{gpu}/traits")["traits"])
    assert {"CUSTOM_GPU_RACK_7", "CUSTOM_NVIDIA_35", ownership.DEFAULT_OWNER_TRAIT} <= traits
