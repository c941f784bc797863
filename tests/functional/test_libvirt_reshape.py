"""The vGPU reshape with the libvirt driver: real libvirt (test driver), real Placement.

Placement first holds nova's old flat shape for the GPU host fixture: VGPU
inventory on the compute node and each domain's VGPU allocated there. The
libvirt driver with vGPU types enabled reports one provider per physical GPU;
the start-up algorithm must move every domain's VGPU to the GPU that holds
its mdev, in one ``POST /reshaper``.
"""

from __future__ import annotations

import pytest

from agent.placement.report import ReportClient
from agent.shape.adapter import adapt
from agent.state.store import StateStore
from agent.tracker.reshape import reshape_node
from tests.helpers.libvirt_fixtures import libvirt_driver
from tests.helpers.names import unique
from tests.helpers.placement_http import http, put_allocations
from tests.helpers.placement_snapshot import amounts, class_totals, snapshot
from tests.helpers.sync import cycle

DOMAINS = ("bbbbbbbb-0000-4000-8000-00000000000a", "bbbbbbbb-0000-4000-8000-00000000000b")


@pytest.fixture
def report(tmp_path, embedded) -> ReportClient:
    return ReportClient(embedded.client(), StateStore(tmp_path / "state"), sleep=lambda s: None)


def test_flat_vgpus_move_to_the_gpu_holding_each_domains_mdev(tmp_path, embedded, report):
    name = unique("lv-gpu")
    base = embedded.url
    node = {"DEFAULT": {"host": name}}
    flat = libvirt_driver(tmp_path, "gpu-host", **node, devices={"enabled_mdev_types": []})
    cycle(report, flat, name)
    root = report.get_provider_tree_and_ensure_root(name).data(name).uuid
    # nova's old shape: VGPU on the compute node, one per mdev a domain holds.
    held = http(base, "GET", f"/resource_providers/{root}/inventories").json()
    inventory = {**held["inventories"], "VGPU": {"total": 16, "max_unit": 16}}
    http(
        base,
        "PUT",
        f"/resource_providers/{root}/inventories",
        {
            "inventories": inventory,
            "resource_provider_generation": held["resource_provider_generation"],
        },
    )
    tree = report.get_provider_tree_and_ensure_root(name)
    adapt(flat, flat.conf).update_provider_tree(tree, name)
    expected_flat = adapt(flat, flat.conf).expected_allocations(tree, name)
    assert set(expected_flat) >= set(DOMAINS)
    for consumer, rec in expected_flat.items():
        per_rp = dict(rec.allocations)
        if consumer in DOMAINS:
            per_rp[root] = {**per_rp.get(root, {}), "VGPU": 1}
        put_allocations(base, consumer, per_rp, rec.project_id)
    before = snapshot(base, root)

    gpus = libvirt_driver(
        tmp_path, "gpu-host", **node, devices={"enabled_mdev_types": ["nvidia-35", "nvidia-36"]}
    )
    posts_before = report.client.counts[("POST", "/reshaper")]
    outcome = reshape_node(report, adapt(gpus), name)
    assert outcome.needed and outcome.reshaped
    assert report.client.counts[("POST", "/reshaper")] - posts_before == 1

    after = snapshot(base, root)
    assert class_totals(after) == class_totals(before)  # nothing lost, nothing doubled
    moved = amounts(after)
    for consumer in DOMAINS:
        assert moved[consumer][f"{name}_pci_0000_86_00_0"] == {"VGPU": 1}
        assert "VGPU" not in moved[consumer].get(name, {})
    root_inventory = after["providers"][root]["inventories"]
    assert "VGPU" not in root_inventory
    # And what Placement now holds is what the driver expects: no further writes.
    tree = report.get_provider_tree_and_ensure_root(name)
    adapt(gpus, gpus.conf).update_provider_tree(tree, name)
    for consumer, rec in adapt(gpus, gpus.conf).expected_allocations(tree, name).items():
        want = rec.allocations
        got = {
            rp: a["resources"] for rp, a in after["allocations"][consumer]["allocations"].items()
        }
        assert got == want, consumer
