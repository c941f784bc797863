"""Provider-tree sync against a real Placement (issue: placement client and sync)."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import uuid as uuidlib

import pytest
import requests
from wsgi_intercept.interceptor import RequestsInterceptor

from agent.cli.render import json_document
from agent.model.allocations import ConsumerAllocations
from agent.placement.client import PlacementClient
from agent.placement.embedded import NOAUTH_HEADERS, placement_app
from agent.placement.errors import MicroversionTooLow, PlacementUnavailable
from agent.placement.report import ReportClient
from agent.placement.roots import RootConflict
from agent.shape.adapter import adapt
from agent.state.layout import PLACEMENT_SEEN_DIR, node_file
from agent.state.store import StateStore
from agent.tracker.discovery import discover
from drivers.fake import FakeDriver
from tests.helpers.conf import make_conf
from tests.helpers.hosts import host_file
from tests.helpers.names import unique
from tests.helpers.paths import EXAMPLES, REPO
from tests.helpers.placement_http import HEADERS, http_get
from tests.helpers.sync import cycle, remote_client


def fake(tmp_path, nodename, **groups):
    conf = make_conf(
        tmp_path,
        numa={"model_in_placement": True},
        devices={"enabled_mdev_types": ["nvidia-35", "nvidia-36"]},
        **groups,
    )
    return conf, FakeDriver(conf, host_file(tmp_path, nodename))


def check_matches_discover(base_url: str, tmp_path, driver, nodename: str) -> None:
    state = StateStore(tmp_path / "state")
    (node,) = json_document(discover(adapt(driver, driver.conf), state), "fake")["nodes"]
    root = state.root_uuid(nodename)
    listed = http_get(base_url, "/resource_providers", in_tree=root)["resource_providers"]
    assert {p["uuid"] for p in listed} == {p["uuid"] for p in node["providers"]}
    by_uuid = {p["uuid"]: p for p in listed}
    for want in node["providers"]:
        got = by_uuid[want["uuid"]]
        assert got["name"] == want["name"]
        assert got["parent_provider_uuid"] == want["parent_provider_uuid"]
        assert got["root_provider_uuid"] == want["root_provider_uuid"]
        inv = http_get(base_url, f"/resource_providers/{want['uuid']}/inventories")["inventories"]
        expected_inv = {
            rc: {k: v for k, v in i.items() if k != "capacity"}
            for rc, i in want["inventories"].items()
        }
        assert inv == expected_inv
        traits = http_get(base_url, f"/resource_providers/{want['uuid']}/traits")["traits"]
        assert sorted(traits) == want["traits"]


def test_first_sync_in_process_matches_discover(embedded, tmp_path):
    name = unique("cn")
    _, driver = fake(tmp_path, name)
    report = ReportClient(embedded.client(), StateStore(tmp_path / "state"))
    result = cycle(report, driver, name)
    assert (result.created, result.errors) == (7, [])
    check_matches_discover(embedded.url, tmp_path, driver, name)


def test_first_sync_over_loopback_matches_discover(served, tmp_path):
    name = unique("cn")
    _, driver = fake(tmp_path, name)
    client = remote_client(tmp_path, served.url)
    report = ReportClient(client, StateStore(tmp_path / "state"))
    cycle(report, driver, name)
    check_matches_discover(served.url, tmp_path, driver, name)


def test_request_counts_steady_change_restart(embedded, tmp_path):
    name = unique("cn")
    _, driver = fake(tmp_path, name)
    client = embedded.client()
    report = ReportClient(client, StateStore(tmp_path / "state"))
    cycle(report, driver, name)
    seen_file = tmp_path / "state" / node_file(PLACEMENT_SEEN_DIR, name)
    written = seen_file.stat().st_mtime_ns
    before = client.total_requests()
    cycle(report, driver, name)
    assert client.total_requests() - before == 1  # GET ?in_tree only
    assert seen_file.stat().st_mtime_ns == written  # and no state-file write
    driver.update_host(name, disk_gb=1000)
    before = client.total_requests()
    cycle(report, driver, name)
    assert client.total_requests() - before == 2  # GET ?in_tree + PUT inventories
    restarted = embedded.client()
    result = cycle(ReportClient(restarted, StateStore(tmp_path / "state")), driver, name)
    assert restarted.counts == {("GET", "/"): 1, ("GET", "/resource_providers"): 1}
    assert not result.created and not result.inventories


def test_child_removed_and_traits_and_aggregates_changed(embedded, tmp_path):
    name = unique("cn")
    _, driver = fake(tmp_path, name)
    report = ReportClient(embedded.client(), StateStore(tmp_path / "state"))
    cycle(report, driver, name)
    gpu = f"{name}_pci_0000_af_00_0"
    gpu_uuid = report.get_provider_tree_and_ensure_root(name).data(gpu).uuid
    driver.remove_device(name, "0000:af:00.0")
    result = cycle(report, driver, name)
    assert result.removed == 1
    resp = requests.get(f"{embedded.url}/resource_providers/{gpu_uuid}", headers=HEADERS)
    assert resp.status_code == 404
    agg = str(uuidlib.uuid4())
    tree = report.get_provider_tree_and_ensure_root(name)
    adapt(driver, driver.conf).update_provider_tree(tree, name)
    tree.update_aggregates(name, [agg])
    tree.update_traits(f"{name}_pci_0000_3b_00_0", ["CUSTOM_PHYSNET_OTHER"])
    result = report.update_from_provider_tree(tree)
    assert (result.aggregates, result.traits) == (1, 1)
    root = tree.data(name).uuid
    assert http_get(embedded.url, f"/resource_providers/{root}/aggregates")["aggregates"] == [agg]
    pf = tree.data(f"{name}_pci_0000_3b_00_0").uuid
    assert http_get(embedded.url, f"/resource_providers/{pf}/traits")["traits"] == [
        "CUSTOM_PHYSNET_OTHER"
    ]


def test_concurrent_writer_between_read_and_write_converges(embedded, tmp_path):
    name = unique("cn")
    _, driver = fake(tmp_path, name)
    report = ReportClient(embedded.client(), StateStore(tmp_path / "state"), sleep=lambda s: None)
    cycle(report, driver, name)
    tree = report.get_provider_tree_and_ensure_root(name)
    driver.update_host(name, disk_gb=777)
    adapt(driver, driver.conf).update_provider_tree(tree, name)
    tree.add_traits(name, "CUSTOM_OURS")
    root = tree.data(name).uuid
    # another service adds a trait, bumping the root's generation behind our back
    other = embedded.client()
    other.put("/traits/{name}", name="CUSTOM_THEIRS")
    held = other.get("/resource_providers/{uuid}/traits", uuid=root)
    other.put(
        "/resource_providers/{uuid}/traits",
        uuid=root,
        json={
            "traits": [*held["traits"], "CUSTOM_THEIRS"],
            "resource_provider_generation": held["resource_provider_generation"],
        },
    )
    result = report.update_from_provider_tree(tree)
    assert result.errors == []
    traits = set(http_get(embedded.url, f"/resource_providers/{root}/traits")["traits"])
    assert {"CUSTOM_OURS", "CUSTOM_THEIRS", "HW_CPU_X86_AVX2"} <= traits
    inv = http_get(embedded.url, f"/resource_providers/{root}/inventories")["inventories"]
    assert inv["DISK_GB"]["total"] == 777
    # and the next cycle is quiet again
    assert not cycle(report, driver, name).inventories


def test_inventory_in_use_is_reported_and_the_rest_written(embedded, tmp_path, caplog):
    name = unique("cn")
    _, driver = fake(tmp_path, name)
    report = ReportClient(embedded.client(), StateStore(tmp_path / "state"))
    cycle(report, driver, name)
    tree = report.get_provider_tree_and_ensure_root(name)
    root = tree.data(name).uuid
    consumer = str(uuidlib.uuid4())
    report.put_allocations(consumer, ConsumerAllocations({root: {"DISK_GB": 50}}, "p", "u"))
    # instance disks move to shared storage: DISK_GB would go while 50 GiB are allocated
    driver.update_host(name, shared_storage=True)
    driver.update_host(name, pci_devices=())  # and another provider changes too
    with caplog.at_level(logging.ERROR):
        result = cycle(report, driver, name)
    assert len(result.errors) == 1
    assert name in result.errors[0] and "DISK_GB" in result.errors[0]
    assert "DISK_GB" in caplog.text
    inv = http_get(embedded.url, f"/resource_providers/{root}/inventories")["inventories"]
    assert inv["DISK_GB"]["total"] == 3500  # kept while allocated
    assert result.removed == 1  # the passthrough device's provider still went
    assert report.delete_allocations(consumer) is True
    assert report.delete_allocations(consumer) is False  # nothing left: fine
    result = cycle(report, driver, name)
    assert result.errors == []
    inv = http_get(embedded.url, f"/resource_providers/{root}/inventories")["inventories"]
    assert "DISK_GB" not in inv


def test_root_uuid_file_lost_finds_the_provider_by_name(embedded, tmp_path):
    name = unique("cn")
    _, driver = fake(tmp_path, name)
    state = StateStore(tmp_path / "state")
    cycle(ReportClient(embedded.client(), state), driver, name)
    root = state.root_uuid(name)
    for f in (tmp_path / "state").iterdir():
        shutil.rmtree(f) if f.is_dir() else f.unlink()
    result = cycle(ReportClient(embedded.client(), state), driver, name)
    assert result.created == 0
    assert state.root_uuid(name) == root
    assert len(http_get(embedded.url, "/resource_providers", name=name)["resource_providers"]) == 1


def test_corrupt_state_file_is_read_again_from_placement(embedded, tmp_path):
    name = unique("cn")
    _, driver = fake(tmp_path, name)
    state = StateStore(tmp_path / "state")
    cycle(ReportClient(embedded.client(), state), driver, name)
    (tmp_path / "state" / node_file(PLACEMENT_SEEN_DIR, name)).write_text("{not json")
    client = embedded.client()
    result = cycle(ReportClient(client, state), driver, name)
    assert result.created == result.inventories == 0
    assert client.counts[("GET", "/resource_providers/{uuid}/inventories")] == 8


def test_name_held_by_another_uuid_is_a_clear_error(embedded, tmp_path):
    name = unique("cn")
    embedded.client().post("/resource_providers", json={"name": name})
    state = StateStore(tmp_path / "state")
    state.set_root_uuid(name, str(uuidlib.uuid4()))
    with pytest.raises(RootConflict) as err:
        ReportClient(embedded.client(), state).ensure_root(name)
    assert name in str(err.value) and "compute_nodes.json" in str(err.value)
    assert "[DEFAULT] host" in str(err.value)


def test_placement_stopped_mid_sync_then_back(served, tmp_path):
    name = unique("cn")
    _, driver = fake(tmp_path, name)
    client = remote_client(tmp_path, served.url, "request_retries = 1", "retry_max_wait = 0.05")
    report = ReportClient(client, StateStore(tmp_path / "state"))
    cycle(report, driver, name)
    tree = report.get_provider_tree_and_ensure_root(name)
    driver.update_host(name, disk_gb=1234)
    adapt(driver, driver.conf).update_provider_tree(tree, name)
    served.stop()
    with pytest.raises(PlacementUnavailable) as err:
        report.update_from_provider_tree(tree)
    assert "is Placement running" in str(err.value)
    served.start()
    result = cycle(report, driver, name)
    assert result.inventories == 1
    root = StateStore(tmp_path / "state").root_uuid(name)
    inv = http_get(served.url, f"/resource_providers/{root}/inventories")["inventories"]
    assert inv["DISK_GB"]["total"] == 1234


def test_server_below_1_30_is_refused():
    """A fake root document: a real openstack-placement 16 always offers 1.39, so an
    old server cannot be produced for real."""

    def old_placement(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/json")])
        doc = {"versions": [{"id": "v1.0", "max_version": "1.29", "min_version": "1.0"}]}
        return [json.dumps(doc).encode()]

    with RequestsInterceptor(lambda: old_placement, url="http://old-placement:80"):
        client = PlacementClient.for_endpoint("http://old-placement:80")
        with pytest.raises(MicroversionTooLow) as err:
            client.get("/resource_providers")
    assert "1.29" in str(err.value) and "1.30" in str(err.value)


def test_microversion_header_on_every_request(embedded, tmp_path):
    seen: list[tuple[str, str | None]] = []
    app = placement_app(embedded.state_path)

    def recording(environ, start_response):
        seen.append((environ["PATH_INFO"], environ.get("HTTP_OPENSTACK_API_VERSION")))
        return app(environ, start_response)

    with RequestsInterceptor(lambda: recording, url="http://recorded-placement:80"):
        client = PlacementClient.for_endpoint(
            "http://recorded-placement:80", extra_headers=NOAUTH_HEADERS
        )
        name = unique("cn")
        _, driver = fake(tmp_path, name)
        cycle(ReportClient(client, StateStore(tmp_path / "state")), driver, name)
    assert len(seen) > 20
    assert seen[0] == ("/", None)
    assert all(v == "placement 1.39" for path, v in seen[1:]), seen


def test_sync_and_show_commands(tmp_path):
    conf = tmp_path / "agent.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\n[compute]\ndriver = fake\n")
    args = [
        "--config",
        str(EXAMPLES / "compute-agent.conf"),
        "--config",
        str(conf),
        "--fake-host",
        str(EXAMPLES / "big-host.yaml"),
    ]

    def agent(*argv):
        return subprocess.run(
            [sys.executable, "-m", "agent.cli.main", *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )

    proc = agent("show", "--check", *args)
    assert proc.returncode == 3 and "no compute node" in proc.stdout
    proc = agent("sync", "--once", *args)
    assert proc.returncode == 0, proc.stderr
    assert "created 7" in proc.stdout
    proc = agent("show", "--check", *args)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "no drift" in proc.stdout and "used 0 of capacity 152" in proc.stdout
    proc = agent("sync", "--once", *args)
    assert "2 placement requests" in proc.stdout  # root document + one tree read
