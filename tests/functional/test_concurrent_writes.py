"""Concurrent writes (issue #16): several requests in flight, the same result as one at a time.

Placement runs on MariaDB under two gunicorn workers (real concurrency on
the server side). A cold sync at 4 in flight must leave exactly what the
sequential one leaves, in the same number of requests; a generation conflict
met by one of the parallel writes is retried for that provider alone; the
allocations of a tree are read in parallel with the same answer.
"""

from __future__ import annotations

import uuid as uuidlib

from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver
from tests.helpers.conf import make_conf
from tests.helpers.faults import before_send
from tests.helpers.hosts import HostDescription, host_file
from tests.helpers.names import unique
from tests.helpers.placement_http import call, http_get


def wide_host(tmp_path, nodename: str, devices: int = 24):
    """big-host.yaml plus ``devices`` whole PCI devices: a tree of many siblings."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    host = HostDescription.load(host_file(tmp_path, nodename))
    host.prefix_instances(str(uuidlib.uuid4())[:-2])  # consumers of its own
    for i in range(devices):
        host.add(
            "pci_devices",
            {"address": f"0000:c{i // 16:x}:{i % 16:02x}.0", "vendor_id": "10de",
             "product_id": "1db4", "numa_node": i % 2},
        )  # fmt: skip
    return host.write(tmp_path / f"{nodename}.yaml")


def tracker_for(tmp_path, placement, nodename: str, in_flight: int) -> ResourceTracker:
    conf = make_conf(
        tmp_path,
        numa={"model_in_placement": True},
        devices={"enabled_mdev_types": ["nvidia-35", "nvidia-36"]},
    )
    driver = FakeDriver(conf, wide_host(tmp_path, nodename))
    state = StateStore(tmp_path / "state")
    report = ReportClient(
        placement.client(), state, sleep=lambda _s: None, max_concurrent_requests=in_flight
    )
    return ResourceTracker(conf, driver, report, state)


def shape(base: str, nodename: str) -> dict[str, object]:
    """Every provider of the tree by name: parent's name, inventories, traits."""
    (root,) = http_get(base, "/resource_providers", name=nodename)["resource_providers"]
    listed = http_get(base, "/resource_providers", in_tree=root["uuid"])["resource_providers"]
    names = {p["uuid"]: p["name"].replace(nodename, "N") for p in listed}
    out: dict[str, object] = {}
    for p in listed:
        inv = http_get(base, f"/resource_providers/{p['uuid']}/inventories")["inventories"]
        traits = http_get(base, f"/resource_providers/{p['uuid']}/traits")["traits"]
        out[names[p["uuid"]]] = (
            names.get(p["parent_provider_uuid"]),
            {rc: v["total"] for rc, v in inv.items()},
            sorted(traits),
        )
    return out


def test_a_cold_sync_at_4_in_flight_equals_the_sequential_one(tmp_path, served_mariadb):
    base = served_mariadb.url
    one, four = unique("seq"), unique("par")
    seq = tracker_for(tmp_path / "1", served_mariadb, one, 1)
    par = tracker_for(tmp_path / "4", served_mariadb, four, 4)
    a = seq.update_available_resource(True)
    b = par.update_available_resource(True)
    assert a.ok and b.ok, (a.summary(), b.summary())
    assert a.requests == b.requests  # the minimum either way
    assert a.nodes[0].providers == b.nodes[0].providers > 30
    assert shape(base, one) == shape(base, four)
    counts = par.report.client.counts
    assert counts[("POST", "/resource_providers")] == b.nodes[0].providers
    # The tree's allocations, read 4 at a time, are the ones read one at a time.
    seq_alloc = seq.report.get_allocations_for_provider_tree(one)
    par_alloc = par.report.get_allocations_for_provider_tree(four)
    assert len(seq_alloc) == len(par_alloc) == 4
    assert all(r["consumer_generation"] is not None for r in par_alloc.values())


def test_a_conflict_met_by_a_parallel_write_is_retried_for_that_provider(tmp_path, served_mariadb):
    base = served_mariadb.url
    nodename = unique("cf")
    t = tracker_for(tmp_path, served_mariadb, nodename, 4)
    assert t.update_available_resource(True).ok
    victim = f"{nodename}_pci_0000_c0_05_0"
    (rp,) = http_get(base, "/resource_providers", name=victim)["resource_providers"]
    # The driver now gives every device a trait: 24 traits writes, 4 at a time.
    host = HostDescription.load(tmp_path / f"{nodename}.yaml")
    for device in host.node()["pci_devices"]:
        device["traits"] = ["CUSTOM_GPU_SLOT"]
    host.write(tmp_path / f"{nodename}.yaml")
    t.driver.reload()

    def operator_tags_the_victim() -> None:
        call(base, "PUT", "/traits/CUSTOM_OPERATOR_TAG")
        held = http_get(base, f"/resource_providers/{rp['uuid']}/traits")
        call(base, "PUT", f"/resource_providers/{rp['uuid']}/traits", {
            "traits": [*held["traits"], "CUSTOM_OPERATOR_TAG"],
            "resource_provider_generation": held["resource_provider_generation"],
        })  # fmt: skip

    fired = before_send(
        t.report.client,
        lambda m, _t, path: m == "PUT" and path.endswith(f"{rp['uuid']}/traits"),
        operator_tags_the_victim,
    )
    counts = t.report.client.counts
    puts = counts[("PUT", "/resource_providers/{uuid}/traits")]
    outcome = t.update_available_resource(False)
    assert fired and outcome.ok, outcome.summary()
    written = outcome.nodes[0].sync.traits
    assert written >= 24  # every device (and whatever else the reload changed)
    traits = set(http_get(base, f"/resource_providers/{rp['uuid']}/traits")["traits"])
    assert {"CUSTOM_GPU_SLOT", "CUSTOM_OPERATOR_TAG"} <= traits  # ours and the operator's
    # The one conflict was retried for that provider alone: one more PUT, no other.
    assert counts[("PUT", "/resource_providers/{uuid}/traits")] - puts == written + 1
