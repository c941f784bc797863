"""Intel TDX end to end: the libvirt driver on tdx-host, a real Placement (``served``: one
of its own per test, the fixture's domain UUIDs are fixed), nova 34's own scheduler code
as the judge (tests/helpers/nova_request.py).

* nova's ``ResourceRequest`` for a TDX flavor (``hw:mem_encryption_model=intel-tdx``)
  or a TDX image (``hw_mem_encryption_model=intel-tdx``) finds the host, its
  ``MEM_ENCRYPTION_CONTEXT`` on the agent's ``{node}_intel_tdx`` child; an AMD SEV
  flavor finds none;
* the agent's own start-up cycle writes the TDX guest's allocation with its one
  ``MEM_ENCRYPTION_CONTEXT`` on that child, as nova's request for its flavor asks;
* without ``cpu_mode = host-passthrough`` there is no child, and a TDX flavor finds no
  host (nova's own rule).

The TDX guest's ``<launchSecurity type='tdx'>`` is added to what libvirt's test driver
returns for it (:class:`tests.helpers.libvirt_fixtures.TdxDomain`): this environment's
libvirt 9.0 cannot define such a domain.
"""

from __future__ import annotations

from agent.placement.report import ReportClient
from agent.state.store import StateStore
from tests.helpers.libvirt_fixtures import libvirt_driver, tdx_host_groups, with_tdx_guests
from tests.helpers.names import unique
from tests.helpers.nova_client import Nova
from tests.helpers.nova_request import candidates, flavor, requested_resources
from tests.helpers.placement_http import held_by_name, http_get
from tests.helpers.sync import cycle, remote_client, startup_cycle

TDX_GUEST = "7d7d7d7d-0000-4000-8000-000000000001"
PLAIN_GUEST = "7d7d7d7d-0000-4000-8000-000000000002"
# What nova's TDX guests need of their image (nova/virt/hardware.py MemEncryptionConfigTDX:
# UEFI, stateless firmware, q35, no video device).
TDX_IMAGE = {
    "hw_firmware_type": "uefi",
    "hw_firmware_stateless": True,
    "hw_machine_type": "q35",
    "hw_video_model": "none",
}


def tdx_driver(tmp_path, name, **libvirt_opts):
    groups = tdx_host_groups()
    groups["DEFAULT"] = {"host": name}
    groups["libvirt"].update(libvirt_opts)
    return with_tdx_guests(libvirt_driver(tmp_path, "tdx-host", **groups), {TDX_GUEST})


def report_client(tmp_path, served) -> ReportClient:
    return ReportClient(
        remote_client(tmp_path, served.url), StateStore(tmp_path / "state"), sleep=lambda s: None
    )


def by_name(base: str, found: list[dict]) -> list[dict]:
    names = {
        p["uuid"]: p["name"] for p in http_get(base, "/resource_providers")["resource_providers"]
    }
    return [{names[rp]: r for rp, r in c.items()} for c in found]


def test_nova_finds_the_tdx_child_for_a_tdx_flavor_or_image(tmp_path, served):
    name = unique("tdx")
    cycle(report_client(tmp_path, served), tdx_driver(tmp_path, name), name)
    child = http_get(served.url, "/resource_providers", name=f"{name}_intel_tdx")
    [rp] = child["resource_providers"]
    assert rp["parent_provider_uuid"] == rp["root_provider_uuid"] != rp["uuid"]
    inv = http_get(served.url, f"/resource_providers/{rp['uuid']}/inventories")["inventories"]
    assert inv["MEM_ENCRYPTION_CONTEXT"]["total"] == 63
    assert inv["MEM_ENCRYPTION_CONTEXT"]["max_unit"] == 1
    nova = Nova(served.url, "p", "u")
    tdx = flavor(2, 2048, 20, hw_mem_encryption="true", hw_mem_encryption_model="intel-tdx")
    found = by_name(served.url, candidates(nova, tdx, name, **TDX_IMAGE))
    assert found and all(c[f"{name}_intel_tdx"] == {"MEM_ENCRYPTION_CONTEXT": 1} for c in found)
    image = {**TDX_IMAGE, "hw_mem_encryption": True, "hw_mem_encryption_model": "intel-tdx"}
    found = by_name(served.url, candidates(nova, flavor(2, 2048, 20), name, **image))
    assert found and all(c[f"{name}_intel_tdx"] == {"MEM_ENCRYPTION_CONTEXT": 1} for c in found)
    sev = flavor(2, 2048, 20, hw_mem_encryption="true", hw_mem_encryption_model="amd-sev")
    assert candidates(nova, sev, name, hw_firmware_type="uefi") == []
    # A flavor without memory encryption takes nothing from the child.
    plain = by_name(served.url, candidates(nova, flavor(2, 2048, 20), name))
    assert plain and all(set(c) == {name} for c in plain)


def test_the_agents_cycle_writes_the_tdx_guest_as_nova_asks(tmp_path, served):
    name = unique("tdx")
    outcome = startup_cycle(tmp_path, served.url, tdx_driver(tmp_path, name))
    assert outcome.ok
    tdx = flavor(2, 2048, 20, hw_mem_encryption="true", hw_mem_encryption_model="intel-tdx")
    asked = requested_resources(tdx, **TDX_IMAGE)
    held = held_by_name(served.url, TDX_GUEST)
    assert held == {
        name: {"DISK_GB": 20, "MEMORY_MB": 2048, "VCPU": 2},
        f"{name}_intel_tdx": {"MEM_ENCRYPTION_CONTEXT": 1},
    }
    merged: dict[str, int] = {}
    for amounts in held.values():
        merged.update(amounts)
    assert merged == asked
    assert held_by_name(served.url, PLAIN_GUEST) == {
        name: {"DISK_GB": 20, "MEMORY_MB": 2048, "VCPU": 1}
    }
    [rp] = http_get(served.url, "/resource_providers", name=f"{name}_intel_tdx")[
        "resource_providers"
    ]
    usages = http_get(served.url, f"/resource_providers/{rp['uuid']}/usages")["usages"]
    assert usages == {"MEM_ENCRYPTION_CONTEXT": 1}


def test_without_host_passthrough_no_child_and_no_tdx_host(tmp_path, served):
    name = unique("tdx")
    cycle(report_client(tmp_path, served), tdx_driver(tmp_path, name, cpu_mode="host-model"), name)
    listed = http_get(served.url, "/resource_providers", name=f"{name}_intel_tdx")
    assert listed["resource_providers"] == []
    nova = Nova(served.url, "p", "u")
    tdx = flavor(2, 2048, 20, hw_mem_encryption="true", hw_mem_encryption_model="intel-tdx")
    assert candidates(nova, tdx, name, **TDX_IMAGE) == []
