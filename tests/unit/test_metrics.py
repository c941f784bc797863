"""The service's metrics: what each source (cycle outcome, client observer, state) feeds."""

from __future__ import annotations

import json
import platform
from types import SimpleNamespace

import pytest

from agent import __version__
from agent.placement.client import PlacementClient, RequestEvent
from agent.placement.errors import GenerationConflict, PlacementUnavailable
from agent.placement.writer import SyncResult
from agent.service.metric_families import owned_providers
from agent.service.metrics import AgentMetrics
from agent.shape.layout import OWNER_TRAIT
from agent.state.store import StateStore
from agent.tracker.outcome import CycleOutcome, NodeOutcome


def test_cycles_are_counted_per_node_and_outcome():
    metrics = AgentMetrics()
    ok = CycleOutcome(startup=True, started=100.0, duration=0.5)
    ok.nodes.append(
        NodeOutcome(
            "cn1",
            allocations_written=["a", "b"],
            unknown_consumers=["u"],
            sync=SyncResult(reshaped=True),
        )
    )
    ok.nodes.append(NodeOutcome("cn2"))
    metrics.observe_cycle(ok)
    half = CycleOutcome(startup=False, started=200.0, duration=1.0)
    half.nodes += [NodeOutcome("cn1"), NodeOutcome("cn2", ok=False, error="boom")]
    metrics.observe_cycle(half)
    metrics.observe_cycle(CycleOutcome(startup=False, started=300.0, error="no nodes"))
    value = metrics.registry.get_sample_value
    assert value("compute_agent_cycles_total", {"nodename": "cn1", "outcome": "ok"}) == 2
    assert value("compute_agent_cycles_total", {"nodename": "cn2", "outcome": "ok"}) == 1
    assert value("compute_agent_cycles_total", {"nodename": "cn2", "outcome": "failed"}) == 1
    assert value("compute_agent_cycles_total", {"nodename": "", "outcome": "failed"}) == 1
    # Only the fully successful cycle moves the last-success time.
    assert value("compute_agent_last_success_timestamp_seconds") == 100.5
    assert value("compute_agent_allocations_written_total", {"nodename": "cn1"}) == 2
    assert value("compute_agent_unknown_consumers", {"nodename": "cn1"}) == 0  # last cycle
    assert value("compute_agent_reshapes_total", {"nodename": "cn1"}) == 1
    assert value("compute_agent_cycle_duration_seconds_count") == 3
    build = {"version": __version__, "python_version": platform.python_version()}
    assert value("compute_agent_build_info", build) == 1


def test_request_events_feed_latency_retries_and_conflicts():
    metrics = AgentMetrics()
    path = "/resource_providers/{uuid}/inventories"
    metrics.on_request(RequestEvent("answer", "PUT", path, "200", 0.02))
    metrics.on_request(RequestEvent("answer", "PUT", path, "409", 0.2))
    metrics.on_request(RequestEvent("conflict", "PUT", path, "409"))
    metrics.on_request(RequestEvent("answer", "GET", "/resource_providers", "transport", 3.0))
    metrics.on_request(RequestEvent("retry", "GET", "/resource_providers", "transport"))
    value = metrics.registry.get_sample_value
    labels = {"method": "PUT", "path": path, "status": "200"}
    assert value("compute_agent_placement_request_duration_seconds_count", labels) == 1
    assert value("compute_agent_placement_request_duration_seconds_sum", labels) == 0.02
    bucket = {**labels, "le": "0.025"}
    assert value("compute_agent_placement_request_duration_seconds_bucket", bucket) == 1
    assert value("compute_agent_placement_requests_total", {"method": "PUT", "status": "409"}) == 1
    conflicts = {"method": "PUT", "path": path}
    assert value("compute_agent_generation_conflicts_total", conflicts) == 1
    retries = {"method": "GET", "path": "/resource_providers"}
    assert value("compute_agent_placement_retries_total", retries) == 1


class FakeAdapter:
    """keystoneauth's Adapter as the client uses it: answers in order."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def request(self, path, method, **kw):
        status, body = self.answers.pop(0)
        text = json.dumps(body) if body is not None else ""
        return SimpleNamespace(
            status_code=status, text=text, content=text.encode(), json=lambda: json.loads(text)
        )


ROOT = {"versions": [{"max_version": "1.39"}]}
CONFLICT = {"errors": [{"status": 409, "code": "placement.concurrent_update", "detail": "x"}]}


def test_the_client_tells_its_observers_of_answers_retries_and_conflicts():
    adapter = FakeAdapter((200, ROOT), (503, None), (200, {"a": 1}), (409, CONFLICT))
    client = PlacementClient(adapter, retries=2, retry_max_wait=0)
    events: list[RequestEvent] = []
    client.observers.append(events.append)
    assert client.get("/resource_providers/{uuid}", uuid="u1") == {"a": 1}
    with pytest.raises(GenerationConflict):
        client.put("/resource_providers/{uuid}/traits", uuid="u1", json={})
    kinds = [(e.kind, e.method, e.template, e.status) for e in events]
    assert kinds == [
        ("answer", "GET", "/", "200"),
        ("answer", "GET", "/resource_providers/{uuid}", "503"),
        ("retry", "GET", "/resource_providers/{uuid}", "503"),
        ("answer", "GET", "/resource_providers/{uuid}", "200"),
        ("answer", "PUT", "/resource_providers/{uuid}/traits", "409"),
        ("conflict", "PUT", "/resource_providers/{uuid}/traits", "409"),
    ]
    assert all(e.seconds >= 0 for e in events)


def test_the_client_reports_transport_failures():
    class Down:
        def request(self, *a, **kw):
            from keystoneauth1 import exceptions as ks_exc

            raise ks_exc.ConnectFailure("refused")

    client = PlacementClient(Down(), retries=1, retry_max_wait=0)
    events: list[RequestEvent] = []
    client.observers.append(events.append)
    with pytest.raises(PlacementUnavailable):
        client.negotiate()
    assert [(e.kind, e.status) for e in events] == [
        ("answer", "transport"),
        ("retry", "transport"),
        ("answer", "transport"),
    ]


# Placement's providers have UUIDs; ownership's derived-UUID rule reads them.
R = "0f1c9d7e-2a4b-4c6d-8e0f-1a2b3c4d5e60"
P = "1e2d3c4b-5a69-4788-97a6-b5c4d3e2f101"
B = "2a3b4c5d-6e7f-4081-9283-a4b5c6d7e802"
X = "3b4c5d6e-7f80-4192-a3b4-c5d6e7f80903"


def record(uuid, name, parent=None, traits=(), **inventories):
    return {
        "uuid": uuid,
        "name": name,
        "generation": 1,
        "parent_provider_uuid": parent,
        "inventories": {
            rc: {"total": t, "reserved": r, "allocation_ratio": 2.0, "min_unit": 1}
            for rc, (t, r) in inventories.items()
        },
        "traits": sorted(traits),
        "aggregates": [],
    }


def test_state_feeds_owned_providers_and_inventory_total_reserved_used(tmp_path):
    state = StateStore(tmp_path)
    root = record(R, "cn1", VCPU=(16, 2), MEMORY_MB=(4096, 512))
    pf = record(P, "cn1_pci_0000_3b_00_0", R, [OWNER_TRAIT], SRIOV_NET_VF=(8, 0))
    bandwidth = record(B, "cn1:ovs-agent", R, [], NET_BW_EGR_KILOBIT_PER_SEC=(1000, 0))
    state.set_seen_providers("cn1", [root, pf, bandwidth])
    held = {R: {"i1": {"VCPU": 2, "MEMORY_MB": 512}, "i2": {"VCPU": 1}}, P: {"i1": {}}}
    state.set_consumers("cn1", {"instances": [], "unknown": {}, "held": held, "generations": {}})
    metrics = AgentMetrics()
    metrics.observe_state("cn1", state)
    value = metrics.registry.get_sample_value

    def labels(provider, rc):
        return {"nodename": "cn1", "provider": provider, "resource_class": rc}

    # The bandwidth provider is a network agent's: not counted, not graphed.
    assert value("compute_agent_providers", {"nodename": "cn1"}) == 2
    assert value("compute_agent_inventory_total_units", labels("cn1", "VCPU")) == 16
    assert value("compute_agent_inventory_reserved_units", labels("cn1", "VCPU")) == 2
    assert value("compute_agent_inventory_used_units", labels("cn1", "VCPU")) == 3
    assert value("compute_agent_inventory_used_units", labels("cn1", "MEMORY_MB")) == 512
    assert value("compute_agent_inventory_allocation_ratio", labels("cn1", "VCPU")) == 2.0
    pf_vf = labels("cn1_pci_0000_3b_00_0", "SRIOV_NET_VF")
    assert value("compute_agent_inventory_used_units", pf_vf) == 0
    bw = labels("cn1:ovs-agent", "NET_BW_EGR_KILOBIT_PER_SEC")
    assert value("compute_agent_inventory_total_units", bw) is None
    # The PF is unplugged: its series go away.
    state.set_seen_providers("cn1", [root])
    metrics.observe_state("cn1", state)
    assert value("compute_agent_inventory_total_units", pf_vf) is None
    assert value("compute_agent_providers", {"nodename": "cn1"}) == 1


def test_owned_providers_keeps_the_compute_node_without_the_trait():
    records = [record(R, "cn1"), record(X, "other", R)]
    assert [r["name"] for r in owned_providers("cn1", records)] == ["cn1"]


def test_owned_providers_follow_the_configured_owner_trait():
    """``[compute] owner_trait`` decides, as in the cycle (agent.model.ownership)."""
    child = record(X, "cn1_pci_0000_3b_00_0", R, ["CUSTOM_OWNER_SITE_A"])
    records = [record(R, "cn1"), child]
    assert [r["name"] for r in owned_providers("cn1", records, "CUSTOM_OWNER_SITE_A")] == [
        "cn1",
        "cn1_pci_0000_3b_00_0",
    ]
    # Under the default owner trait that child is somebody else's.
    assert [r["name"] for r in owned_providers("cn1", records)] == ["cn1"]
