"""A field another writer changes back is yielded, not written back and forth (issue 32).

nova-compute's resource tracker is the other writer in mind
(nova/compute/resource_tracker.py ``_update_to_placement``): once its cache is
refreshed, each claim writes the compute node's inventory as a whole set
(``SchedulerReportClient.set_inventory_for_provider``: ``PUT .../inventories``
with the VCPU, PCPU, MEMORY_MB and DISK_GB records its own nova.conf gives:
``reserved_host_memory_mb`` is MEMORY_MB's ``reserved``) and its traits as a
whole set (``set_traits_for_provider``: the libvirt driver sets or clears
every CPU trait of its map, and clears
``HW_CPU_X86_SSE3`` because it looks for ``sse3`` where libvirt says ``pni``).
Here nova's own ``SchedulerReportClient`` and ``ProviderTree`` make those
writes on the session's real Placement (the driver's part is two edits of
the tree): MEMORY_MB reserved 4096 where the agent's configuration says 512,
and ``HW_CPU_X86_SSE3`` cleared. An operator is played through plain HTTP.

The agent (fake driver, examples/big-host.yaml flat, its own state directory)
undoes the first change of each field, as it undoes any out-of-band change;
when the other writer changes it back, the agent yields: no write of it on the
following cycles nor after a restart, one WARNING line per field, the metric,
``show`` and ``show --check`` (exit 3). The rest of the provider is still
written around it; a change of the host that changes the value the agent wants
makes it write once again. An operator's trait is kept as ever and never
yielded (the agent never writes it).
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.cli.main import main
from agent.placement.report import ReportClient
from agent.service.exit_codes import EXIT_DRIFT
from agent.service.metrics import AgentMetrics
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from agent.tracker.outcome import CycleOutcome
from drivers.fake import FakeDriver
from tests.helpers.nova_client import Nova
from tests.helpers.placement_http import call, http_get
from tests.helpers.tracker import PROJECT, USER, Setup

SSE3 = "HW_CPU_X86_SSE3"
OPERATOR = "CUSTOM_RACK_7"
NOVA_RESERVED = 4096
"""The other writer's MEMORY_MB reserved (nova.conf's ``reserved_host_memory_mb``; the agent's is
512)."""

FLAT = {"numa": {"model_in_placement": False}}


def nova_writes(s: Setup, root: str) -> None:
    """What nova-compute's claim writes where it disagrees, by nova's own code: its report
    client reads the tree (its cache expired, as for a claim 300 s after the last one), the
    driver's part sets the compute node's whole inventory with nova.conf's MEMORY_MB
    ``reserved`` and its traits without ``HW_CPU_X86_SSE3`` (as the libvirt driver's
    ``update_provider_tree`` does), and ``update_from_provider_tree`` writes what differs."""
    nova = Nova(s.base, PROJECT, USER)
    tree = nova.client.get_provider_subtree_and_ensure_root(nova.context, root, name=s.nodename)
    inventory = copy.deepcopy(tree.data(root).inventory)
    inventory["MEMORY_MB"]["reserved"] = NOVA_RESERVED
    tree.update_inventory(s.nodename, inventory)
    tree.update_traits(s.nodename, set(tree.data(root).traits) - {SSE3})
    nova.client.update_from_provider_tree(nova.context, tree)
    assert nova.refused == []


def set_traits(base: str, root: str, remove: set[str] = set(), add: set[str] = set()) -> None:  # noqa: B006
    """``PUT .../traits`` of the whole set, ``remove`` taken out and ``add`` put in."""
    for trait in add:
        call(base, "PUT", f"/traits/{trait}")
    held = http_get(base, f"/resource_providers/{root}/traits")
    call(
        base,
        "PUT",
        f"/resource_providers/{root}/traits",
        {
            "resource_provider_generation": held["resource_provider_generation"],
            "traits": sorted((set(held["traits"]) - remove) | add),
        },
    )


def memory(s: Setup, root: str) -> dict[str, int]:
    return http_get(s.base, f"/resource_providers/{root}/inventories")["inventories"]["MEMORY_MB"]


def memory_record(reserved: int) -> dict[str, float]:
    """big-host's MEMORY_MB record with ``reserved``."""
    return {
        "total": 786432,
        "reserved": reserved,
        "min_unit": 1,
        "max_unit": 786432,
        "step_size": 1,
        "allocation_ratio": 1.0,
    }


def traits(s: Setup, root: str) -> set[str]:
    return set(http_get(s.base, f"/resource_providers/{root}/traits")["traits"])


def writes(counts: Counter[tuple[str, str]]) -> dict[tuple[str, str], int]:
    return {k: n for k, n in counts.items() if k[0] != "GET"}


def yield_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "the agent yields" in r.getMessage()
    ]


def yielded_gauge(outcome: CycleOutcome, nodename: str) -> dict[str, float]:
    """``compute_agent_yielded_fields`` by kind, from a scrape of the service's registry."""
    metrics = AgentMetrics()
    metrics.observe_cycle(outcome)
    text = generate_latest(metrics.registry).decode()
    (family,) = (
        f for f in text_string_to_metric_families(text) if f.name == "compute_agent_yielded_fields"
    )
    return {s.labels["kind"]: s.value for s in family.samples if s.labels["nodename"] == nodename}


def show(s: Setup, tmp_path: Path, *args: str) -> int:
    """``compute-agent show`` in-process on the agent's own state directory (read only)."""
    conf = tmp_path / "show.conf"
    conf.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\n"
        f"[compute]\ndriver = fake\n[fake]\nhost_file = {s.host_path}\n"
        "[numa]\nmodel_in_placement = false\n"
        "[devices]\nenabled_mdev_types = nvidia-35,nvidia-36\n"
        f"[placement]\nauth_type = admin_token\nendpoint = {s.base}\ntoken = admin\n"
        "noauth_roles = admin,service\n"
    )
    return main(["show", *args, "--config", str(conf)])


def restart(s: Setup, tmp_path: Path) -> None:
    """A new agent (driver, Placement client state, tracker) on the same state directory."""
    s.driver = FakeDriver(s.conf, s.host_path)
    s.state = StateStore(tmp_path / "state")
    s.report = ReportClient(s.client, s.state, sleep=lambda _s: None)
    s.tracker = ResourceTracker(s.conf, s.driver, s.report, s.state, clock=lambda: s.now)


def sse3_host(tmp_path: Path, embedded) -> tuple[Setup, str]:
    """A flat big-host whose CPU has SSE3 (as libvirt's ``pni``), after two cycles."""
    s = Setup(tmp_path, embedded, **FLAT)
    s.host.node()["cpu"]["traits"].append(SSE3)
    s.host.write(s.host_path)
    s.driver.reload()
    assert s.cycle(startup=True).ok
    assert s.cycle().ok
    return s, s.uuid(s.nodename)


def test_a_change_of_the_host_writes_the_field_once_again(tmp_path, embedded, caplog):
    s, root = sse3_host(tmp_path, embedded)
    caplog.set_level(logging.INFO)
    for _ in range(2):
        nova_writes(s, root)
        assert s.cycle().ok
    assert len(s.cycle().nodes[0].sync.yielded) == 2

    # The host changes the MEMORY_MB record the agent wants: it writes its new one, once.
    s.host.node()["numa_cells"][0]["memory_mb"] = 380928  # 12 GiB of it gone (a failed DIMM)
    s.host.set("memory_mb", 774144).write(s.host_path)
    s.driver.reload()
    counts, outcome = s.counted_cycle()
    assert writes(counts) == {("PUT", "/resource_providers/{uuid}/inventories"): 1}
    assert memory(s, root)["total"] == 774144 and memory(s, root)["reserved"] == 512
    assert [y["key"] for y in outcome.nodes[0].sync.yielded] == [SSE3]
    # Changed back once more: yielded at once, no second write.
    nova_writes(s, root)
    for _ in range(2):
        counts, outcome = s.counted_cycle()
        assert writes(counts) == {}
    assert (memory(s, root)["total"], memory(s, root)["reserved"]) == (774144, NOVA_RESERVED)
    assert len(outcome.nodes[0].sync.yielded) == 2

    # The host loses SSE3: the agent agrees with the other writer, the yield ends;
    # it gains it again: the agent writes it once.
    s.host.node()["cpu"]["traits"].remove(SSE3)
    s.host.write(s.host_path)
    s.driver.reload()
    counts, outcome = s.counted_cycle()
    assert writes(counts) == {}
    assert [y["key"] for y in outcome.nodes[0].sync.yielded] == ["MEMORY_MB"]
    s.host.node()["cpu"]["traits"].append(SSE3)
    s.host.write(s.host_path)
    s.driver.reload()
    counts, outcome = s.counted_cycle()
    assert writes(counts) == {("PUT", "/resource_providers/{uuid}/traits"): 1}
    assert SSE3 in traits(s, root)


def test_over_novas_value_the_first_change_back_is_yielded(tmp_path, embedded):
    """The agent's first write of the fields is over nova's values (an agent that takes a
    provider over, here one whose record of its writes is lost): nova's first change back
    is yielded, one write by the agent in all."""
    s, root = sse3_host(tmp_path, embedded)
    shutil.rmtree(tmp_path / "state" / "fields")
    restart(s, tmp_path)
    nova_writes(s, root)
    counts, outcome = s.counted_cycle()
    assert writes(counts) == {
        ("PUT", "/resource_providers/{uuid}/inventories"): 1,
        ("PUT", "/resource_providers/{uuid}/traits"): 1,
    }
    nova_writes(s, root)
    for _ in range(2):
        counts, outcome = s.counted_cycle()
        assert outcome.ok and writes(counts) == {}, counts
    assert len(outcome.nodes[0].sync.yielded) == 2
    assert memory(s, root)["reserved"] == NOVA_RESERVED and SSE3 not in traits(s, root)


def test_an_operators_trait_is_kept_and_never_yielded(tmp_path, embedded):
    """An operator adds, removes and adds again a trait of their own: the agent writes none."""
    s, root = sse3_host(tmp_path, embedded)
    for change in ({"add": {OPERATOR}}, {"remove": {OPERATOR}}, {"add": {OPERATOR}}):
        set_traits(s.base, root, **change)
        for _ in range(2):
            counts, outcome = s.counted_cycle()
            assert outcome.ok and writes(counts) == {}, counts
            assert outcome.nodes[0].sync.yielded == []
        assert (OPERATOR in traits(s, root)) is ("add" in change)
    # An operator who removes one of the agent's traits once sees it back (as ever).
    set_traits(s.base, root, remove={SSE3})
    counts, outcome = s.counted_cycle()
    assert writes(counts) == {("PUT", "/resource_providers/{uuid}/traits"): 1}
    assert {SSE3, OPERATOR} <= traits(s, root)
    assert outcome.nodes[0].sync.yielded == []


def test_fields_changed_back_are_yielded_and_say_so(tmp_path, embedded, caplog, capsys):
    s, root = sse3_host(tmp_path, embedded)
    caplog.set_level(logging.INFO)

    # The other writer's first change: undone once, as any out-of-band change.
    nova_writes(s, root)
    counts, outcome = s.counted_cycle()
    assert outcome.ok
    assert writes(counts) == {
        ("PUT", "/resource_providers/{uuid}/inventories"): 1,
        ("PUT", "/resource_providers/{uuid}/traits"): 1,
    }
    assert memory(s, root)["reserved"] == 512 and SSE3 in traits(s, root)
    assert outcome.nodes[0].sync.yielded == []

    # It changes them back: the agent yields both, and says so once.
    nova_writes(s, root)
    for _ in range(3):
        counts, outcome = s.counted_cycle()
        assert outcome.ok and writes(counts) == {}, counts
    assert memory(s, root)["reserved"] == NOVA_RESERVED and SSE3 not in traits(s, root)
    lines = yield_lines(caplog)
    assert len(lines) == 2, lines
    (inventory,) = (line for line in lines if "inventory of MEMORY_MB" in line)
    assert f"provider {s.nodename} ({root})" in inventory
    wants, keeps = inventory.split("the agent wants ")[1].split(", another writer keeps ")
    assert "reserved: 512," in wants and f"reserved: {NOVA_RESERVED}," in keeps
    (trait,) = (line for line in lines if f"trait {SSE3}" in line)
    assert "the agent wants present, another writer keeps absent" in trait
    kinds = sorted((y["kind"], y["key"]) for y in outcome.nodes[0].sync.yielded)
    assert kinds == [("inventory", "MEMORY_MB"), ("trait", SSE3)]
    assert yielded_gauge(outcome, s.nodename) == {"inventory": 1, "trait": 1, "aggregate": 0}

    capsys.readouterr()
    assert show(s, tmp_path) == 0
    out = capsys.readouterr().out
    assert f"yielded to another writer: provider {s.nodename} ({root}) trait {SSE3}" in out
    assert "inventory of MEMORY_MB" in out
    assert "no drift" not in out and "Placement has" not in out  # yielded, not drift as well
    assert show(s, tmp_path, "--check") == EXIT_DRIFT
    capsys.readouterr()
    assert show(s, tmp_path, "--format", "json") == 0
    (node,) = json.loads(capsys.readouterr().out)["nodes"]
    assert sorted((y["kind"], y["key"], y["agent"], y["other"]) for y in node["yielded"]) == [
        ("inventory", "MEMORY_MB", memory_record(512), memory_record(NOVA_RESERVED)),
        ("trait", SSE3, True, False),
    ]
    assert node["drift"] == []

    # A restarted agent does not start the fight again, nor say it again.
    restart(s, tmp_path)
    caplog.clear()
    for _ in range(2):
        counts, outcome = s.counted_cycle()
        assert outcome.ok and writes(counts) == {}, counts
    assert yield_lines(caplog) == []
    assert len(outcome.nodes[0].sync.yielded) == 2

    # Other fields of the same provider are still written, around the yielded ones.
    s.host.set("disk_gb", 3000)
    s.host.node()["cpu"]["traits"].append("HW_CPU_X86_SSE41")
    s.host.write(s.host_path)
    s.driver.reload()
    counts, outcome = s.counted_cycle()
    assert outcome.ok
    assert writes(counts) == {
        ("PUT", "/resource_providers/{uuid}/inventories"): 1,
        ("PUT", "/resource_providers/{uuid}/traits"): 1,
    }
    inventories = http_get(s.base, f"/resource_providers/{root}/inventories")["inventories"]
    assert inventories["DISK_GB"]["total"] == 3000
    assert inventories["MEMORY_MB"]["reserved"] == NOVA_RESERVED
    assert {"VCPU", "PCPU", "MEMORY_MB", "DISK_GB"} <= set(inventories)
    assert "HW_CPU_X86_SSE41" in traits(s, root) and SSE3 not in traits(s, root)
    counts, outcome = s.counted_cycle()
    assert writes(counts) == {} and len(outcome.nodes[0].sync.yielded) == 2
