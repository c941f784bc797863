"""Bulk allocation writes (issue #16): new instances many per ``POST /allocations``.

Against real Placement (the session's in-process one): a start-up writes
every instance of examples/big-host.yaml in one request; a batch that holds
a consumer Placement already knows (a migration's consumer holding its
source host) is refused whole by Placement and written again consumer by
consumer, merging, so the other host's part survives.
"""

from __future__ import annotations

import uuid as uuidlib

import pytest

from tests.helpers.names import unique
from tests.helpers.placement_http import call, put_allocations
from tests.helpers.tracker import Setup


@pytest.fixture
def setup(tmp_path, embedded) -> Setup:
    return Setup(tmp_path, embedded)


def writes(s: Setup) -> dict[tuple[str, str], int]:
    counts = s.client.counts
    return {
        k: counts[k]
        for k in (("POST", "/allocations"), ("PUT", "/allocations/{consumer}"))
        if counts[k]
    }


def test_start_up_writes_every_new_instance_in_one_request(setup):
    s = setup
    outcome = s.cycle(startup=True)
    written = outcome.nodes[0].allocations_written
    assert outcome.ok and len(written) == 4  # the four instances of big-host.yaml
    assert writes(s) == {("POST", "/allocations"): 1}
    # Nothing read per consumer either: no GET /allocations/{consumer} at start-up.
    assert s.client.counts[("GET", "/allocations/{consumer}")] == 0
    for consumer in written:
        assert s.held(consumer)
    assert s.cycle().nodes[0].allocations_written == []


def test_a_batch_with_a_known_consumer_is_refused_whole_and_written_one_by_one(setup):
    s = setup
    other = unique("src-host")
    src = str(uuidlib.uuid4())
    call(s.base, "POST", "/resource_providers", {"name": other, "uuid": src}, expect=200)
    call(
        s.base,
        "PUT",
        f"/resource_providers/{src}/inventories",
        {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}},
    )
    # Instance 1's consumer holds CPUs on another compute node only: nova is moving
    # it (a live migration away from here in progress): nothing is written for it.
    put_allocations(s.base, s.inst(1), {src: {"VCPU": 2}})
    outcome = s.cycle(startup=True)
    assert outcome.ok, outcome.summary()
    n = len(outcome.nodes[0].allocations_written)
    assert n == 3 and s.inst(1) not in outcome.nodes[0].allocations_written
    # One refused POST, then each instance read, and written with its generation.
    assert writes(s) == {("POST", "/allocations"): 1, ("PUT", "/allocations/{consumer}"): n}
    assert s.held(s.inst(1)) == {other: {"VCPU": 2}}  # nova's consumer untouched
    assert outcome.nodes[0].moving == [s.inst(1)]


def test_allocations_of_the_tree_cost_one_read_per_provider_and_per_consumer(setup):
    """Issue #16 item 3, as a count: providers + consumers, nothing more.

    One GET /allocations/{consumer} per consumer stays: the reshaper needs each
    consumer's generation, project and user (reshape-provider-tree.txt), which
    GET /resource_providers/{uuid}/allocations does not carry.
    """
    s = setup
    assert s.cycle(startup=True).ok
    providers = s.report.mirror.tree(s.nodename).get_provider_uuids()
    before = s.client.total_requests()
    found = s.report.get_allocations_for_provider_tree(s.nodename)
    assert len(found) == 4  # the four instances of big-host.yaml
    assert s.client.total_requests() - before == len(providers) + len(found)
    for body in found.values():
        assert body["consumer_generation"] is not None and body["project_id"]
