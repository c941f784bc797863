"""agent.model.allocations: Placement's allocation JSON in one place, and the merge rule."""

from __future__ import annotations

import pytest

from agent.model.allocations import (
    MIGRATION,
    ConsumerAllocations,
    ProviderAllocations,
    by_consumer,
    merge_ours,
)

CN, CELL, GPU, OTHER_HOST, BW = "cn", "cell", "gpu", "other-host", "bandwidth"

GET_BODY = {
    "allocations": {
        CN: {"generation": 7, "resources": {"DISK_GB": 20}},
        CELL: {"generation": 3, "resources": {"VCPU": 2, "MEMORY_MB": 2048, "PCPU": 0}},
    },
    "project_id": "p",
    "user_id": "u",
    "consumer_generation": 4,
    "consumer_type": "INSTANCE",
}


def test_get_body_round_trips_to_put_body_without_provider_generations_or_zeros():
    held = ConsumerAllocations.from_placement(GET_BODY)
    assert held.allocations == {CELL: {"MEMORY_MB": 2048, "VCPU": 2}, CN: {"DISK_GB": 20}}
    assert held.generation == 4
    assert held.to_placement() == {
        "allocations": {
            CELL: {"resources": {"MEMORY_MB": 2048, "VCPU": 2}},
            CN: {"resources": {"DISK_GB": 20}},
        },
        "project_id": "p",
        "user_id": "u",
        "consumer_generation": 4,
        "consumer_type": "INSTANCE",
    }
    assert ConsumerAllocations.from_placement(held.to_spec()) == held


def test_unknown_consumer_is_empty_with_no_generation_and_cannot_be_written_without_owner():
    unknown = ConsumerAllocations.from_placement({"allocations": {}})
    assert not unknown and unknown.generation is None and unknown.consumer_type == "INSTANCE"
    with pytest.raises(ValueError, match="project_id and user_id"):
        unknown.with_allocations({CN: {"VCPU": 1}}).to_placement()


def test_merge_ours_keeps_foreign_parts_and_replaces_our_own():
    held = ConsumerAllocations(
        {
            CN: {"DISK_GB": 20},
            CELL: {"VCPU": 4},
            GPU: {"VGPU": 1},
            OTHER_HOST: {"VCPU": 2},
            BW: {"NET_BW_EGR_KILOBIT_PER_SEC": 1000},
        },
        "p",
        "u",
        generation=9,
    )
    want = ConsumerAllocations({CN: {"DISK_GB": 20}, CELL: {"VCPU": 2}}, "p2", "u2")
    out = merge_ours(held, want, ours={CN, CELL, GPU})
    assert out.allocations == {
        BW: {"NET_BW_EGR_KILOBIT_PER_SEC": 1000},
        CELL: {"VCPU": 2},
        CN: {"DISK_GB": 20},
        OTHER_HOST: {"VCPU": 2},
    }
    assert (out.generation, out.project_id, out.user_id) == (9, "p2", "u2")
    kept = merge_ours(held, want, ours={CN, CELL, GPU}, keep={GPU})
    assert kept.allocations[GPU] == {"VGPU": 1}


def test_merge_ours_keeps_classes_the_writer_does_not_produce():
    """Issue 26: a class the planner cannot produce is never dropped from a consumer."""
    held = ConsumerAllocations(
        {
            CN: {"DISK_GB": 20, "CUSTOM_LICENSE": 1},
            CELL: {"VCPU": 4, "MEMORY_MB": 4096},
            GPU: {"VGPU": 1},
            OTHER_HOST: {"VCPU": 2},
        },
        "p",
        "u",
        generation=3,
    )
    want = ConsumerAllocations(
        {CN: {"DISK_GB": 10}, CELL: {"VCPU": 2, "MEMORY_MB": 2048}}, "p", "u"
    )
    produces = {"VCPU", "PCPU", "MEMORY_MB", "DISK_GB"}
    out = merge_ours(held, want, ours={CN, CELL, GPU}, produces=produces)
    assert out.allocations == {
        CELL: {"MEMORY_MB": 2048, "VCPU": 2},
        CN: {"CUSTOM_LICENSE": 1, "DISK_GB": 10},
        GPU: {"VGPU": 1},
        OTHER_HOST: {"VCPU": 2},
    }
    # A produced class is decided: the plan's amount, or dropped when the plan has none.
    dropped = merge_ours(held, want, ours={CN, CELL, GPU}, produces={*produces, "VGPU"})
    assert GPU not in dropped.allocations
    # The plan cannot override what it does not produce.
    greedy = ConsumerAllocations({**want.allocations, GPU: {"VGPU": 3}}, "p", "u")
    assert merge_ours(held, greedy, {CN, CELL, GPU}, produces=produces).allocations[GPU] == {
        "VGPU": 1
    }
    # None: today's rule, every part on ours is the plan's.
    assert GPU not in merge_ours(held, want, ours={CN, CELL, GPU}).allocations
    assert merge_ours(held, want, ours={CN, CELL, GPU}).allocations[CN] == {"DISK_GB": 10}


def test_provider_allocations_parse_and_turn_by_consumer():
    body = {
        "allocations": {
            "c1": {"resources": {"VCPU": 2}, "consumer_generation": 1},
            "c2": {"resources": {"VCPU": 0}},
        },
        "resource_provider_generation": 12,
    }
    pa = ProviderAllocations.from_placement(body)
    assert pa == ProviderAllocations(12, {"c1": {"VCPU": 2}})
    assert by_consumer({CELL: pa, CN: ProviderAllocations(1, {"c1": {"DISK_GB": 5}})}) == {
        "c1": {CELL: {"VCPU": 2}, CN: {"DISK_GB": 5}}
    }


def test_migration_type_survives_the_round_trip():
    body = {**GET_BODY, "consumer_type": MIGRATION}
    assert ConsumerAllocations.from_placement(body).to_placement()["consumer_type"] == MIGRATION
