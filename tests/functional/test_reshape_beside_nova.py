"""The start-up reshape with nova 34's own client claiming beside it (issue 33, case 8).

A flat host runs the agent (state kept), then restarts with NUMA in Placement: its start-up
cycle must reshape. nova's ``SchedulerReportClient`` (tests/helpers/nova_client.py) claims
a new instance on the compute node between the agent's read of the tree's allocations and
its ``POST /reshaper``, once or on every attempt, against a real Placement.
"""

from __future__ import annotations

import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from agent.model.exceptions import ReshapeFailed
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from tests.functional.test_reshape import (
    driver_for,
    new_report,
    reshape_host,
    root_of,
    write_host,
)
from tests.helpers.hosts import HostDescription
from tests.helpers.names import unique
from tests.helpers.nova_client import Flavor, Nova
from tests.helpers.placement_http import call, http_get
from tests.helpers.placement_snapshot import amounts, inventories, snapshot

TINY = Flavor(vcpus=1, memory_mb=512, root_gb=1)


def flat_then_numa(embedded: Any, tmp_path: Path, nova: Nova) -> tuple[str, ResourceTracker, Any]:
    """The flat host's agent cycles twice (its instances healed, state kept); nova claims an
    instance while it is down (the root's generation moves: the restart vouches for its
    details, and reads them again before writing); then a new agent on the same state
    directory with NUMA in Placement: ``(name, tracker, report)``."""
    name = unique("race")
    host = write_host(tmp_path, name)
    state = tmp_path / "state"
    flat = driver_for(tmp_path, host)
    tracker = ResourceTracker(flat.conf, flat, new_report(embedded, tmp_path), StateStore(state))
    for startup in (True, False):
        assert tracker.update_available_resource(startup).ok
    nova.schedule(str(uuidlib.uuid4()), TINY, name)
    numa = driver_for(tmp_path, host, numa=True)
    report = new_report(embedded, tmp_path)
    return name, ResourceTracker(numa.conf, numa, report, StateStore(state)), report


def claim_after_reading(report: Any, nova: Nova, name: str, every: bool) -> list[str]:
    """nova claims a new instance on ``name`` just after the agent reads the tree's
    allocations for its reshape (the first time, or ``every`` time); the claimed UUIDs."""
    claimed: list[str] = []
    real = report.get_allocations_for_provider_tree

    def read(nodename: str) -> dict[str, Any]:
        got = real(nodename)
        if every or not claimed:
            claimed.append(str(uuidlib.uuid4()))
            nova.schedule(claimed[-1], TINY, name)
        return got

    report.get_allocations_for_provider_tree = read
    return claimed


def consumer_type(base: str, consumer: str) -> str:
    """The consumer's type as Placement holds it (``unknown``: none, as nova writes at 1.36)."""
    return http_get(base, f"/allocations/{consumer}")["consumer_type"]


def test_a_claim_between_the_read_and_the_reshaper_is_read_again(embedded, tmp_path):
    """The POST carries the generations of the snapshot it was computed from: nova's claim
    is a conflict, read again and moved with the rest (it used to end the agent, exit 5,
    on Placement's ``inventory in use``). nova's untyped consumer stays untyped."""
    nova = Nova(embedded.url, "p-nova", "u-nova")
    name, tracker, report = flat_then_numa(embedded, tmp_path, nova)
    claimed = claim_after_reading(report, nova, name, every=False)

    outcome = tracker.update_available_resource(startup=True)

    assert outcome.ok and outcome.nodes[0].sync.reshaped
    root = root_of(embedded.url, name)
    got = amounts(snapshot(embedded.url, root))
    (inst,) = claimed
    cells = {rp for rp in got[inst] if rp.startswith(f"{name}_NUMA")}
    assert len(cells) == 1 and got[inst][cells.pop()] == {"VCPU": 1, "MEMORY_MB": 512}
    assert got[inst][name] == {"DISK_GB": 1}
    assert consumer_type(embedded.url, inst) == "unknown"
    assert not nova.refused


def test_claims_on_every_attempt_end_with_a_clear_error_and_placement_unchanged(embedded, tmp_path):
    nova = Nova(embedded.url, "p-nova", "u-nova")
    name, tracker, report = flat_then_numa(embedded, tmp_path, nova)
    root = root_of(embedded.url, name)
    before = inventories(snapshot(embedded.url, root))
    claimed = claim_after_reading(report, nova, name, every=True)

    with pytest.raises(ReshapeFailed, match="still conflicting after 3 attempts"):
        tracker.update_available_resource(startup=True)

    assert len(claimed) == 3
    after = snapshot(embedded.url, root)
    assert inventories(after) == before
    for inst in claimed:
        assert amounts(after)[inst] == {name: TINY.resources()}


def shared_host(name: str) -> HostDescription:
    """:func:`tests.functional.test_reshape.reshape_host` on shared storage."""
    return reshape_host(name).set("shared_storage", True)


def test_a_start_up_reshape_on_shared_storage_plans_disks_on_the_pool(embedded, tmp_path, caplog):
    """A host in an aggregate with a sharing provider reshapes at start-up (flat -> NUMA):
    the plan the reshape asks of the driver knows the pool, so no instance is logged as
    "no sharing provider is associated" while one is (it was, once per instance)."""
    name = unique("pool")
    host = write_host(tmp_path, name, shared_host)
    state = tmp_path / "state"
    flat = driver_for(tmp_path, host)
    tracker = ResourceTracker(flat.conf, flat, new_report(embedded, tmp_path), StateStore(state))
    assert tracker.update_available_resource(True).ok
    pool = add_pool(embedded.url, root_of(embedded.url, name))
    assert tracker.update_available_resource(False).ok
    numa = driver_for(tmp_path, host, numa=True)
    tracker = ResourceTracker(numa.conf, numa, new_report(embedded, tmp_path), StateStore(state))
    caplog.clear()
    on_pool = http_get(embedded.url, f"/resource_providers/{pool}/usages")["usages"]

    outcome = tracker.update_available_resource(startup=True)

    assert outcome.ok and outcome.nodes[0].sync.reshaped
    assert "no sharing provider" not in caplog.text
    assert http_get(embedded.url, f"/resource_providers/{pool}/usages")["usages"] == on_pool


def add_pool(base: str, root: str) -> str:
    """A sharing provider of DISK_GB in one aggregate with ``root`` (plain HTTP); its UUID."""
    aggregate = str(uuidlib.uuid4())
    uuid = call(base, "POST", "/resource_providers", {"name": unique("pool")})["uuid"]
    for rp, path, body in (
        (uuid, "inventories", {"inventories": {"DISK_GB": {"total": 10_000}}}),
        (uuid, "traits", {"traits": ["MISC_SHARES_VIA_AGGREGATE"]}),
        (uuid, "aggregates", {"aggregates": [aggregate]}),
        (root, "aggregates", {"aggregates": [aggregate]}),
    ):
        generation = http_get(base, f"/resource_providers/{rp}")["generation"]
        body["resource_provider_generation"] = generation
        call(base, "PUT", f"/resource_providers/{rp}/{path}", body)
    return uuid
