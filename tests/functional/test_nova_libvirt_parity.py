"""What nova 34's libvirt driver reports, and what the agent's reports, for one host.

nova's side: ``LibvirtDriver.update_provider_tree`` and the resource tracker's traits
(``ResourceTracker._get_traits``) run by nova's own code on nova's fakelibvirt
and, with ``[pci] report_in_placement``, its PCI-in-placement providers
(:mod:`tests.helpers.nova_libvirt`, in a process of its own). The agent's side: its
libvirt driver on libvirt's test driver with the capabilities, domain capabilities,
node info and node devices that the same fakelibvirt connection serves
(``tests/fixtures/libvirt/nova-fakelibvirt*``, written by ``python -m
tests.helpers.nova_libvirt fixture``). The hosts (``SCENARIOS``: vGPUs; PCI devices and
VFs in placement; a PF a spec names itself; remote-managed VFs on a card with a VPD
serial number and on one without; a ``live_migratable`` tag on this libvirt; the vGPU
host offering Intel TDX), each with the same configuration on both sides (the
scenario's options, ``reserved_host_memory_mb = 512``, one instances path, one libvirt
version). Where nova-compute refuses to start (``init_host``), the agent must refuse
the configuration too (``ConfigError``, its start-up check), naming the option.

Compared provider by provider: every resource class and inventory field, every trait.
Each difference must be a row of the table "What nova 34 reports, what the agent
reports" in docs/tree-shape.md, and each row must be a difference seen here, with
what each side reports as the table says: a difference not explained fails, and so
does a row that no longer holds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import libvirt
import pytest

from agent.model.exceptions import ConfigError
from agent.model.provider_tree import ProviderTree
from agent.model.resources import MAX_INT
from agent.shape.adapter import adapt
from drivers.libvirt import LibvirtDriver
from tests.helpers.libvirt_fixtures import make_conf
from tests.helpers.nova_libvirt import (
    NODENAME,
    SCENARIOS,
    Scenario,
    provider_config_dir,
    write_provider_config,
)
from tests.helpers.paths import LIBVIRT, REPO

TABLE = "### What nova 34 reports, what the agent reports"
PLACEMENT_DEFAULTS = {
    "reserved": 0,
    "min_unit": 1,
    "max_unit": MAX_INT,
    "step_size": 1,
    "allocation_ratio": 1.0,
}
FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio")

Report = dict[str, dict[str, dict]]


def start_nova_report(name: str, instances: Path) -> subprocess.Popen[str]:
    """nova's side of scenario ``name`` in a process of its own, started now (the
    scenarios run side by side; :func:`nova_report` reads the answer)."""
    return subprocess.Popen(
        [
            *(sys.executable, "-W", "ignore", "-m", "tests.helpers.nova_libvirt"),
            *("report", name, str(instances), str(libvirt.getVersion())),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def nova_report(process: subprocess.Popen[str]) -> Report | str:
    """nova's providers, or why nova-compute refuses to start (a string)."""
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    body = json.loads(stdout)
    if "refused" in body:
        return str(body["refused"])
    # A field nova leaves out is Placement's default (PUT .../inventories).
    return {
        name: {
            "inventory": {rc: {**PLACEMENT_DEFAULTS, **inv} for rc, inv in p["inventory"].items()},
            "traits": set(p["traits"]),
        }
        for name, p in body.items()
    }


def agent_report(scenario: Scenario, tmp_path: Path, instances: Path) -> Report:
    fixture = scenario.fixture
    options = dict(scenario.options)
    conf = make_conf(
        tmp_path,
        fixture,
        DEFAULT={
            "host": NODENAME,
            "reserved_host_memory_mb": 512,
            "instances_path": str(instances),
        },
        compute={"provider_config_location": str(provider_config_dir(instances))},
        # The host architecture's first, then every other guest architecture's, as nova asks.
        libvirt={
            **options.pop("libvirt", {}),
            "domain_capabilities_file": ",".join(
                str(p)
                for p in [
                    LIBVIRT / fixture / "domcapabilities.xml",
                    *sorted((LIBVIRT / fixture).glob("domcapabilities-*.xml")),
                ]
            ),
        },
        **options,
    )
    tree = ProviderTree()
    tree.new_root(NODENAME, "00000000-0000-0000-0000-0000000000c1")
    adapter = adapt(LibvirtDriver(conf))
    adapter.check_host_config()  # what `compute-agent run` checks at start
    adapter.update_provider_tree(tree, NODENAME)
    return {
        p.name: {
            "inventory": {
                rc: {f: getattr(inv, f) for f in FIELDS} for rc, inv in p.inventory.items()
            },
            "traits": set(p.traits),
        }
        for p in tree.all_data()
    }


def kind(name: str) -> str:
    """The provider's name as docs/tree-shape.md writes it (``{nodename}_pci_{address}``)."""
    name = name.replace(NODENAME, "{nodename}", 1)
    name = re.sub(r"_pci_[0-9a-f]{4}_[0-9a-f]{2}_[0-9a-f]{2}_[0-9a-f]$", "_pci_{address}", name)
    return re.sub(r"_[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$", "_{ADDRESS}", name)


def differences(nova: Report, agent: Report) -> dict[tuple[str, str], tuple[str, str]]:
    """``{(provider, item): (what nova reports, what the agent reports)}``, ``-`` for
    nothing; an item is a provider, a resource class, ``CLASS.field`` or a trait."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for name in sorted(set(nova) | set(agent)):
        if name not in nova or name not in agent:
            where = ("yes" if name in nova else "-", "yes" if name in agent else "-")
            out[(kind(name), "provider")] = where
            continue
        n, a = nova[name], agent[name]
        for rc in sorted(set(n["inventory"]) | set(a["inventory"])):
            ni, ai = n["inventory"].get(rc), a["inventory"].get(rc)
            if ni is None or ai is None:
                out[(kind(name), rc)] = ("-" if ni is None else "yes", "-" if ai is None else "yes")
                continue
            for f in FIELDS:
                if ni[f] != ai[f]:
                    out[(kind(name), f"{rc}.{f}")] = (str(ni[f]), str(ai[f]))
        for trait in sorted(n["traits"] ^ a["traits"]):
            out[(kind(name), trait)] = (
                "yes" if trait in n["traits"] else "-",
                "yes" if trait in a["traits"] else "-",
            )
    return out


def documented() -> dict[tuple[str, str], tuple[str, str]]:
    """The table's rows: ``| provider | item | nova 34 | agent | why |``, each row's
    provider and item (one or more, comma-separated, in backquotes) -> the two columns."""
    text = (REPO / "docs/tree-shape.md").read_text()
    assert TABLE in text, f"docs/tree-shape.md has no section {TABLE!r}"
    rows: dict[tuple[str, str], tuple[str, str]] = {}
    for line in text.split(TABLE, 1)[1].splitlines()[1:]:
        if line.startswith("#"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("provider", "---") or set(cells[0]) <= {"-"}:
            continue
        provider, items, nova, agent, why = cells
        assert why, f"row {line!r} gives no reason"
        for item in re.findall(r"`([^`]+)`", items):
            rows[(provider.strip("`"), item)] = (nova, agent)
    return rows


def test_every_difference_with_novas_libvirt_driver_is_explained(tmp_path):
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    started = {}
    for name in SCENARIOS:
        (tmp_path / name / "instances").mkdir(parents=True)
        # Written once, before either side reads it.
        write_provider_config(SCENARIOS[name], tmp_path / name / "instances")
        started[name] = start_nova_report(name, tmp_path / name / "instances")
    for name, scenario in SCENARIOS.items():
        instances = tmp_path / name / "instances"
        nova = nova_report(started[name])
        if isinstance(nova, str):
            # nova-compute refuses to start: so does the agent, naming the option.
            with pytest.raises(ConfigError, match=r"\[pci\] device_spec .*live_migratable"):
                agent_report(scenario, tmp_path / name, instances)
            seen[(name, "refused")] = ("refused", "refused")
            continue
        agent = agent_report(scenario, tmp_path / name, instances)
        # The comparison is meaningful: the compute node and its children on both sides.
        assert NODENAME in nova and len(nova) >= 2, (name, sorted(nova))
        # nova's own driver offers TDX there: the agent must lay out the same child.
        assert scenario.tdx is (f"{NODENAME}_intel_tdx" in nova), (name, sorted(nova))
        for key, values in differences(nova, agent).items():
            assert seen.setdefault(key, values) == values, (name, key, values, seen[key])
    refused = {k for k in seen if k[1] == "refused"}
    assert {k[0] for k in refused} == {"live-migratable"}, refused
    seen = {k: v for k, v in seen.items() if k not in refused}
    table = documented()
    unexplained = {k: v for k, v in seen.items() if table.get(k) != v}
    stale = {k: v for k, v in table.items() if k not in seen}
    assert not unexplained, f"differences missing from docs/tree-shape.md's table: {unexplained}"
    assert not stale, f"rows of docs/tree-shape.md's table these hosts do not show: {stale}"
