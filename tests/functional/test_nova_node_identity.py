"""Taking over a host whose nova compute node is named after libvirt's hostname.

nova 34 names a libvirt compute node after ``getHostname()``
(``LibvirtDriver.get_available_nodes``), which may differ from ``[DEFAULT]
host`` (e.g. ``cn7.example.org`` against ``cn7``), and keeps its UUID in
``$state_path/compute_id`` (``nova/virt/node.py``). The agent, run with
nova.conf (the same state_path), must take that provider over, not create a
second compute node named ``[DEFAULT] host`` beside it. Real Placement,
real libvirt (test driver).
"""

from __future__ import annotations

import uuid as uuidlib

import libvirt
import pytest

from agent.model.exceptions import ConfigError
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from tests.helpers.libvirt_fixtures import libvirt_driver
from tests.helpers.names import unique
from tests.helpers.placement_http import call, http
from tests.helpers.sync import cycle


def _nova_compute_node(base: str, name: str, uuid: str) -> None:
    """What nova-compute left: its root provider, a VCPU inventory, its traits."""
    http(base, "POST", "/resource_providers", {"name": name, "uuid": uuid})
    inv = {"VCPU": {"total": 8, "max_unit": 8}}
    http(
        base,
        "PUT",
        f"/resource_providers/{uuid}/inventories",
        {"inventories": inv, "resource_provider_generation": 0},
    )
    traits = {"traits": ["COMPUTE_NODE", "OWNER_NOVA"], "resource_provider_generation": 1}
    http(base, "PUT", f"/resource_providers/{uuid}/traits", traits)


def test_novas_provider_is_found_by_its_compute_id_and_renamed(tmp_path, embedded):
    host = unique("cn7")
    uuid = str(uuidlib.uuid4())  # the embedded Placement is shared by the session
    _nova_compute_node(embedded.url, f"{host}.example.org", uuid)
    (tmp_path / "compute_id").write_text(f"{uuid}\n")
    report = ReportClient(embedded.client(), StateStore(tmp_path), sleep=lambda s: None)
    driver = libvirt_driver(tmp_path, "small-host", DEFAULT={"host": host})

    cycle(report, driver, host)

    named = call(embedded.url, "GET", f"/resource_providers?name={host}")["resource_providers"]
    assert [p["uuid"] for p in named] == [uuid]
    old = call(embedded.url, "GET", f"/resource_providers?name={host}.example.org")
    assert old["resource_providers"] == []
    assert StateStore(tmp_path).root_uuid(host) == uuid
    inventory = call(embedded.url, "GET", f"/resource_providers/{uuid}/inventories")
    assert inventory["inventories"]["MEMORY_MB"]["total"] == 16384  # the agent's now
    # A second cycle keeps it: no other compute node appears.
    cycle(report, driver, host)
    assert [
        p["uuid"]
        for p in call(embedded.url, "GET", f"/resource_providers?name={host}")["resource_providers"]
    ] == [uuid]


def test_a_compute_id_without_a_uuid_is_refused_naming_the_file(tmp_path, embedded):
    host = unique("cn8")
    (tmp_path / "compute_id").write_text("not-a-uuid\n")
    report = ReportClient(embedded.client(), StateStore(tmp_path), sleep=lambda s: None)
    driver = libvirt_driver(tmp_path, "small-host", DEFAULT={"host": host})
    with pytest.raises(ConfigError, match="compute_id holds no UUID"):
        cycle(report, driver, host)


def test_novas_provider_is_found_by_libvirts_hostname_without_a_compute_id(tmp_path, served):
    """No compute_id file (an older nova): nova's compute node is the root provider named
    after libvirt's hostname (``virConnectGetHostname``; the test driver answers this
    machine's hostname). A Placement of its own: that name is the same in every test."""
    conn = libvirt.open("test:///default")
    try:
        nova_name = conn.getHostname()
    finally:
        conn.close()
    host = unique("cn9")
    uuid = str(uuidlib.uuid4())
    _nova_compute_node(served.url, nova_name, uuid)
    driver = libvirt_driver(tmp_path, "small-host", DEFAULT={"host": host})
    store = StateStore(driver.conf.state_path)
    report = ReportClient(served.client(), store, sleep=lambda s: None)
    tracker = ResourceTracker(driver.conf, driver, report, store)

    assert tracker.update_available_resource(True).progressed

    named = call(served.url, "GET", f"/resource_providers?name={host}")["resource_providers"]
    assert [p["uuid"] for p in named] == [uuid]
    old = call(served.url, "GET", f"/resource_providers?name={nova_name}")
    assert old["resource_providers"] == []
    roots = call(served.url, "GET", "/resource_providers")["resource_providers"]
    assert [p["uuid"] for p in roots if p["parent_provider_uuid"] is None] == [uuid]
    assert tracker.update_available_resource(False).progressed
    assert store.root_uuid(host) == uuid
