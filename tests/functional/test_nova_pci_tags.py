"""One-time-use PCI devices in a real Placement, judged by nova 34's own scheduler query.

nova (pci_placement_translator.py ``_handle_one_time_use``) reserves a
``one_time_use`` device's whole inventory while an instance holds it and
never unreserves it: the device stays out of every candidate until an
operator sets its reserved back to 0. The numa-sriov libvirt fixture (real
libvirt, test driver): NVMe 0000:d8:00.0 held by domain vm-nvme, NVMe
0000:5e:00.0 free; ``[pci] report_in_placement`` on. A flavor asking
``resources:CUSTOM_PCI_8086_0A54=1`` is turned into the query by nova's
``process_reqspec`` and ``ResourceRequest`` (tests/helpers/nova_requests.py).
"""

from __future__ import annotations

import pytest

from agent.placement.report import ReportClient
from agent.state.store import StateStore
from tests.helpers.libvirt_fixtures import libvirt_driver
from tests.helpers.nova_requests import candidate_providers, request_spec
from tests.helpers.placement_http import http
from tests.helpers.sync import cycle, remote_client

NODE = "otu-host"
SPEC = '{"vendor_id": "8086", "product_id": "0a54", "one_time_use": "true"}'
RC = "CUSTOM_PCI_8086_0A54"
FREE, HELD = f"{NODE}_0000:5E:00.0", f"{NODE}_0000:D8:00.0"


@pytest.fixture
def report(tmp_path, served) -> ReportClient:
    return ReportClient(
        remote_client(tmp_path, served.url), StateStore(tmp_path / "state"), sleep=lambda s: None
    )


def _devices_nova_may_give(base: str, uuids: dict[str, str]) -> set[str]:
    spec = request_spec({f"resources:{RC}": "1"})
    names = {u: n for n, u in uuids.items()}
    return {names[p] for c in candidate_providers(base, spec) for p in c if p in names} - {NODE}


def test_a_used_one_time_use_device_stays_reserved_until_an_operator_clears_it(
    tmp_path, served, report
):
    driver = libvirt_driver(
        tmp_path,
        "numa-sriov",
        DEFAULT={"host": NODE},
        pci={"device_spec": [SPEC], "report_in_placement": True},
    )
    cycle(report, driver, NODE)
    tree = report.get_provider_tree_and_ensure_root(NODE)
    uuids = {p.name: p.uuid for p in tree.all_data()}
    for name in (FREE, HELD):
        assert "HW_PCI_ONE_TIME_USE" in tree.data(name).traits
    assert _devices_nova_may_give(served.url, uuids) == {FREE}

    # vm-nvme goes away: nova never unreserves the device it used.
    domain = driver.connection.get().lookupByName("vm-nvme")
    domain.destroy()
    domain.undefine()
    cycle(report, driver, NODE)
    assert _devices_nova_may_give(served.url, uuids) == {FREE}

    # The operator clears it (openstack resource provider inventory set ... reserved=0).
    path = f"/resource_providers/{uuids[HELD]}/inventories/{RC}"
    held = http(served.url, "GET", path).json()
    body = {**held, "reserved": 0}
    assert http(served.url, "PUT", path, body).status_code == 200
    cycle(report, driver, NODE)
    assert _devices_nova_may_give(served.url, uuids) == {FREE, HELD}
    assert http(served.url, "GET", path).json()["reserved"] == 0
