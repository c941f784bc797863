"""Vendor-VFIO GPUs (NVIDIA vGPU without mdev) in a real Placement, judged by nova 34's
own scheduler query.

The H200 pair of tests/helpers/vendor_vgpu.py under the host driver: VF ``18:00.4``
holds ``H200X-141C``, VFs ``2a:00.4`` and ``2a:00.5`` hold ``H200X-1-18C``, one
``[pci] device_spec`` per such VF (``managed: no``), ``report_in_placement``. A flavor
``pci_passthrough:alias`` is turned into nova's PCI requests
(``pci_request.get_pci_requests_from_flavor`` with nova's ``[pci] alias``), their
Placement groups (``RequestSpec.from_components`` with ``[filter_scheduler]
pci_in_placement``) and the query (tests/helpers/nova_requests.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from nova import conf as nova_conf

from agent.placement.report import ReportClient
from agent.state.store import StateStore
from drivers.host import HostDriver
from tests.helpers.nova_requests import candidate_providers, request_spec
from tests.helpers.sync import cycle, remote_client
from tests.helpers.sysfs_fixtures import make_conf
from tests.helpers.vendor_vgpu import write_host

NODE = "cn1"
SPEC = '{"vendor_id": "10de", "product_id": "2335", "address": "%s", "resource_class": "%s", '
SPEC += '"managed": "no"}'
SPECS = [
    SPEC % ("0000:18:00.4", "CUSTOM_H200X_141C"),
    SPEC % ("0000:2a:00.4", "CUSTOM_H200X_1_18C"),
    SPEC % ("0000:2a:00.5", "CUSTOM_H200X_1_18C"),
]
ALIASES = [
    json.dumps({"name": name, "resource_class": rc, "device_type": "type-VF"})
    for name, rc in (("h200x-141c", "CUSTOM_H200X_141C"), ("h200x-1-18c", "CUSTOM_H200X_1_18C"))
]


@pytest.fixture
def nova_pci_scheduling() -> Iterator[None]:
    """nova-api's and the scheduler's ``[pci] alias`` and ``pci_in_placement``, for the test."""
    conf = nova_conf.CONF
    conf.set_override("alias", ALIASES, group="pci")
    conf.set_override("pci_in_placement", True, group="filter_scheduler")
    yield
    conf.clear_override("alias", group="pci")
    conf.clear_override("pci_in_placement", group="filter_scheduler")


def _providers_nova_may_use(base: str, uuids: dict[str, str], extra_specs: dict) -> list[set]:
    spec = request_spec(extra_specs)
    names = {u: n for n, u in uuids.items()}
    return [{names[p] for p in c} - {NODE} for c in candidate_providers(base, spec)]


def _synced(tmp_path, served, **groups) -> dict[str, str]:
    conf = make_conf(tmp_path, str(write_host(tmp_path, "h200-pair")), **groups)
    report = ReportClient(
        remote_client(tmp_path, served.url), StateStore(tmp_path / "state"), sleep=lambda s: None
    )
    cycle(report, HostDriver(conf), NODE)
    tree = report.get_provider_tree_and_ensure_root(NODE)
    return {p.name: p.uuid for p in tree.all_data()}


def test_nova_finds_the_vfs_holding_each_type_through_its_alias(
    tmp_path, served, nova_pci_scheduling
):
    uuids = _synced(
        tmp_path,
        served,
        pci={"device_spec": SPECS, "report_in_placement": True},
        devices={"enabled_mdev_types": ["nvidia-1428", "nvidia-1414"]},
    )
    alias = "pci_passthrough:alias"
    assert _providers_nova_may_use(served.url, uuids, {alias: "h200x-141c:1"}) == [
        {f"{NODE}_0000:18:00.0"}
    ]
    assert _providers_nova_may_use(served.url, uuids, {alias: "h200x-1-18c:1"}) == [
        {f"{NODE}_0000:2A:00.0"}
    ]
    # No VGPU by default: nova 34 could not start a server on it.
    assert _providers_nova_may_use(served.url, uuids, {"resources:VGPU": "1"}) == []


def test_without_a_device_spec_nova_is_offered_no_vgpu_it_cannot_use(tmp_path, served):
    """Issue 34: VGPU 32 per H200 used to schedule servers nova 34 cannot start there."""
    uuids = _synced(tmp_path, served, devices={"enabled_mdev_types": ["nvidia-1414"]})
    assert _providers_nova_may_use(served.url, uuids, {"resources:VGPU": "1"}) == []
    assert set(uuids) == {NODE}
