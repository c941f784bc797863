"""Reads that pay once: beside nova's claims, each fact is read once per cycle (issue 33).

A compute node and 19 SR-IOV PFs; nova 34's own ``SchedulerReportClient``
(:class:`tests.helpers.nova_client.Nova`) claims instances with VCPU and
MEMORY_MB on the compute node and one VF on a PF of their own, as nova's
scheduler does at every boot. Each claim moves the compute node's generation
and its PF's. The agent reads the compute node's allocations every cycle; its
consumer generations name the consumers written since the last audit, each
is read once (``GET /allocations/{consumer}``), and those reads explain each
PF's move, so neither the PF's allocations nor its inventories, traits and
aggregates are read (:mod:`agent.placement.allocation_reads`; before, the
vouch read every moved PF's allocations and the audit then read every
consumer: unchanged + 2k + 1). bench/claims.py prints the same at 1,000
providers.

The figures asserted, for k claims:

- the first cycle after them costs the unchanged cycle plus k;
- a restart with the state kept and nothing changed costs the unchanged cycle
  plus the root document (``GET /``, the microversion, read once per process):
  the vouched PFs' details are not read again, their vouch is in the state
  directory with its age;
- a restart after k more claims made while the agent was down costs that
  unchanged restart plus k: what changed is the k consumers, read once each.

And the rule's limit: a consumer another writer put on a PF alone (not on
the compute node) is named by no consumer generation there, so the consumers
read leave the PF's move unexplained and the PF's allocations are read.
"""

from __future__ import annotations

import uuid as uuidlib
from collections import Counter
from pathlib import Path

import pytest
import requests
import yaml

from agent.placement.embedded import EmbeddedPlacement
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver
from tests.helpers.conf import make_conf
from tests.helpers.names import unique
from tests.helpers.nova_client import Flavor, Nova
from tests.helpers.placement_http import HEADERS

PROVIDERS = 20
CLAIMS = 3
PROJECT, USER = "reads-project", "reads-user"
FLAVOR = Flavor(1, 512, 0, (("resources:SRIOV_NET_VF", "1"),))
DETAILS = {
    ("GET", "/resource_providers/{uuid}/inventories"),
    ("GET", "/resource_providers/{uuid}/traits"),
    ("GET", "/resource_providers/{uuid}/aggregates"),
}
PROVIDER_READS = ("GET", "/resource_providers/{uuid}/allocations")
CONSUMER_READS = ("GET", "/allocations/{consumer}")


class Host:
    """The agent on a fake host of a compute node and ``PROVIDERS - 1`` PFs, and nova."""

    def __init__(self, tmp_path: Path, embedded: EmbeddedPlacement) -> None:
        self.nodename = unique("reads")
        pfs = [
            {"address": f"0000:{i:02x}:00.0", "total_vfs": 8, "numa_node": 0}
            for i in range(PROVIDERS - 1)
        ]
        node = {"nodename": self.nodename, "cpu": {"vcpus": 64}, "memory_mb": 65536}
        host = {"nodes": [{**node, "disk_gb": 1000, "sriov_pfs": pfs, "instances": []}]}
        path = tmp_path / "host.yaml"
        path.write_text(yaml.safe_dump(host))
        self.conf = make_conf(tmp_path)
        self.driver = FakeDriver(self.conf, path)
        self.embedded = embedded
        self.state = StateStore(tmp_path / "state")
        self.tracker = self.restart()
        assert self.tracker.update_available_resource(True).ok
        assert self.tracker.update_available_resource(False).ok
        self.nova = Nova(embedded.url, PROJECT, USER)
        tree = self.tracker.report.mirror.tree(self.nodename)
        self.pfs = sorted(u for u in tree.get_provider_uuids() if tree.data(u).parent_uuid)

    def restart(self) -> ResourceTracker:
        """A new agent on the same state directory (the old one is dropped)."""
        report = ReportClient(self.embedded.client(), self.state)
        self.tracker = ResourceTracker(self.conf, self.driver, report, self.state)
        return self.tracker

    def cycle(self, startup: bool = False) -> Counter:
        """One cycle of the current agent; its requests by ``(method, path)``."""
        client = self.tracker.report.client
        before = Counter(client.counts)
        outcome = self.tracker.update_available_resource(startup)
        assert outcome.ok, outcome.summary()
        counts = Counter(client.counts)
        counts.subtract(before)
        return +counts

    def claim(self, pfs: list[str]) -> list[str]:
        """nova's scheduler claims one instance per PF of ``pfs``; returns the instances."""
        made = []
        for pf in pfs:
            made.append(str(uuidlib.uuid4()))
            self.nova.schedule(made[-1], FLAVOR, self.nodename, via=pf)
        assert not self.nova.refused, self.nova.refused
        return made

    def recorded(self, rp: str) -> dict[str, dict[str, int]]:
        """What the audit's record holds on ``rp`` (the state directory)."""
        return (self.state.consumers(self.nodename) or {})["held"].get(rp, {})


@pytest.fixture
def host(tmp_path, embedded) -> Host:
    return Host(tmp_path, embedded)


def details(counts: Counter) -> int:
    return sum(n for key, n in counts.items() if key in DETAILS)


def test_the_first_cycle_after_k_claims_costs_the_unchanged_cycle_plus_k(host):
    unchanged = sum(host.cycle().values())
    instances = host.claim(host.pfs[:CLAIMS])
    counts = host.cycle()
    assert sum(counts.values()) == unchanged + CLAIMS, counts
    assert counts[CONSUMER_READS] == CLAIMS
    assert details(counts) == 0
    assert counts[PROVIDER_READS] == 1  # the compute node, read every cycle; no PF
    for pf, instance in zip(host.pfs, instances, strict=False):
        assert pf in host.tracker.report.mirror.vouched
        assert host.recorded(pf) == {instance: {"SRIOV_NET_VF": 1}}  # known without a read
    assert sum(host.cycle().values()) == unchanged  # and then unchanged again


def test_a_restart_with_the_state_kept_costs_what_changed_while_it_was_down(host):
    unchanged = sum(host.cycle().values())
    host.claim(host.pfs[:CLAIMS])
    host.cycle()
    host.restart()
    counts = host.cycle(startup=True)
    assert details(counts) == 0  # the vouched PFs' details are not read again
    restart = sum(counts.values())
    assert restart == unchanged + 1, counts  # + GET /, once per process
    instances = host.claim(host.pfs[CLAIMS : 2 * CLAIMS])
    host.restart()
    counts = host.cycle(startup=True)
    assert sum(counts.values()) == restart + CLAIMS, counts
    assert details(counts) == 0
    for pf, instance in zip(host.pfs[CLAIMS:], instances, strict=False):
        assert host.recorded(pf) == {instance: {"SRIOV_NET_VF": 1}}


def test_a_consumer_on_a_pf_alone_leaves_its_move_unexplained(host):
    """Another writer's consumer on a PF alone (no CPU or memory on the compute node) is
    named by no consumer generation of the compute node: with nova's claim on the same PF,
    two moves and one changed consumer read, so the PF's allocations are read; they show two
    new consumers for two moves, which explains them (no details read), and the record
    holds both."""
    unchanged = sum(host.cycle().values())
    pf = host.pfs[0]
    (instance,) = host.claim([pf])
    other = str(uuidlib.uuid4())
    body = {
        "allocations": {pf: {"resources": {"SRIOV_NET_VF": 1}}},
        "project_id": PROJECT,
        "user_id": USER,
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }
    base = host.embedded.url
    answer = requests.put(f"{base}/allocations/{other}", json=body, headers=HEADERS, timeout=10)
    assert answer.status_code == 204, answer.text
    counts = host.cycle()
    assert counts[PROVIDER_READS] == 2  # the compute node and the PF
    assert counts[CONSUMER_READS] == 1  # nova's instance; the other is on the PF alone
    assert details(counts) == 0
    assert sum(counts.values()) == unchanged + 2
    assert host.recorded(pf) == {instance: {"SRIOV_NET_VF": 1}, other: {"SRIOV_NET_VF": 1}}
    assert pf in host.tracker.report.mirror.vouched


def test_novas_delete_by_an_empty_put_is_explained_by_the_consumer_gone(host):
    """nova's ``delete_allocation_for_instance`` without ``force`` (a resize confirm's
    migration record, nova/compute/manager.py ``_delete_allocation_after_move``; deferred
    deletes) reads the consumer and PUTs empty allocations with its generation, which
    Placement records as allocations of 0 on each provider it held: the compute node's
    and the PF's generations move by one. The consumer gone from the compute node's
    listing is read once and accounts for both moves: no details are read, nor the PF."""
    (instance,) = host.claim(host.pfs[:1])
    host.cycle()
    unchanged = sum(host.cycle().values())
    assert host.nova.client.delete_allocation_for_instance(host.nova.context, instance, force=False)
    counts = host.cycle()
    assert details(counts) == 0, counts
    assert sum(counts.values()) == unchanged + 1, counts  # the consumer gone, read once
    assert host.recorded(host.pfs[0]) == {}
    assert sum(host.cycle().values()) == unchanged
