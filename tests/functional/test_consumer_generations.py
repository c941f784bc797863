"""After another writer's change, the audit reads the consumers that changed, not every provider.

``GET /resource_providers/{uuid}/allocations`` carries each consumer's
generation (microversion 1.28; placement's
``_serialize_allocations_for_resource_provider``), and every write of a
consumer's allocations moves it. The compute node's CPU and memory providers
(here the two NUMA cells) are read every cycle anyway, so a consumer whose
generation moved, appeared or disappeared there is read with ``GET
/allocations/{consumer}``: what it holds now on every provider, including a
part removed from a device provider, where Placement moves no generation
(issue 28; before, every device provider was read again).
"""

from __future__ import annotations

import uuid as uuidlib
from collections import Counter

import pytest
import requests

from tests.helpers.placement_http import HEADERS, http_get
from tests.helpers.tracker import PROJECT, USER, Setup

PROVIDER_READS = ("GET", "/resource_providers/{uuid}/allocations")
CONSUMER_READS = ("GET", "/allocations/{consumer}")


@pytest.fixture
def setup(tmp_path, embedded) -> Setup:
    return Setup.started(tmp_path, embedded)


def counted(s: Setup) -> tuple[Counter, bool]:
    counts, outcome = s.counted_cycle()
    return counts, outcome.ok


def test_a_part_another_writer_removed_from_a_device_is_seen_through_its_consumer(setup):
    s = setup
    n = s.nodename
    consumer = s.inst(3)  # PCPUs on both cells, 2 VFs on 0000:3b:00.0 and 1 on 0000:d8:00.0
    pf = s.uuid(f"{n}_pci_0000_d8_00_0")
    held = http_get(s.base, f"/allocations/{consumer}")
    kept = {rp: a for rp, a in held["allocations"].items() if rp != pf}
    body = {
        "allocations": kept,
        "project_id": PROJECT,
        "user_id": USER,
        "consumer_generation": held["consumer_generation"],
        "consumer_type": "INSTANCE",
    }
    answer = requests.put(
        f"{s.base}/allocations/{consumer}", json=body, headers=HEADERS, timeout=10
    )
    assert answer.status_code == 204, answer.text
    assert f"{n}_pci_0000_d8_00_0" not in s.held(consumer)

    counts, ok = counted(s)
    assert ok
    # the two cells (read every cycle) and the two the write named (their generations
    # moved: the compute node's DISK_GB, the VFs of 0000:3b:00.0); not the other five
    assert counts[PROVIDER_READS] == 4
    assert counts[CONSUMER_READS] >= 1
    assert s.held(consumer)[f"{n}_pci_0000_d8_00_0"] == {"SRIOV_NET_VF": 1}  # healed


def test_a_new_consumer_of_another_writer_costs_one_read(setup):
    s = setup
    steady, ok = counted(s)
    assert ok
    cell = s.uuid(f"{s.nodename}_NUMA0")
    body = {
        "allocations": {cell: {"resources": {"VCPU": 1, "MEMORY_MB": 256}}},
        "project_id": PROJECT,
        "user_id": USER,
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }
    other = str(uuidlib.uuid4())
    answer = requests.put(f"{s.base}/allocations/{other}", json=body, headers=HEADERS, timeout=10)
    assert answer.status_code == 204, answer.text

    counts, ok = counted(s)
    assert ok
    assert counts[PROVIDER_READS] == steady[PROVIDER_READS] == 2
    assert counts[CONSUMER_READS] == 1
    # the cell's generation moved by the claim alone: its inventories, traits and
    # aggregates are kept (agent.placement.allocation_reads); the unchanged cycle + 1
    assert sum(counts.values()) == sum(steady.values()) + 1
    assert http_get(s.base, f"/allocations/{other}")["allocations"]  # not ours: left alone
