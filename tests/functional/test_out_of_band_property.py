"""Property: any sequence of out-of-band writes converges within one cycle (real Placement).

Hypothesis draws short sequences of what other writers do to a warm host
(examples/big-host.yaml, NUMA modelled): delete an instance's allocations,
empty them, rewrite them with other amounts, move their CPUs and memory to
the other cell, drop their device part, remove one of the agent's traits,
add an operator's trait. After one cycle, checked from Placement over plain
HTTP against what the host says, not against the agent's own planner:

- every instance holds its flavor's CPUs and memory on this node's NUMA
  cells (pinned ones split over their cells, the others whole on one cell),
  its disk on the compute node, and each device on the provider of the
  hardware it uses;
- a second cycle writes nothing (converged in one);
- a foreign consumer and every instance's part on a foreign provider are
  as they were (unless the drawn write itself removed them);
- the agent's traits are back, the operator's trait is still there.

The agent runs with ``[compute] rewrite_differing_allocations`` on: an
allocation rewritten, moved or stripped of its devices is drift, which by
default is only reported (tests/functional/test_allocation_states.py); an
operator who turns the option on gets this convergence.
"""

from __future__ import annotations

import tempfile
import uuid as uuidlib
from pathlib import Path

import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.names import unique
from tests.helpers.placement_http import HEADERS, call, http_get
from tests.helpers.tracker import PROJECT, USER, Setup

KINDS = ("delete", "empty", "rewrite", "move", "drop_devices", "trait_remove", "trait_add")
OPERATOR_TRAIT = "CUSTOM_OPERATOR_MAINTENANCE_WINDOW"


def put_consumer(base: str, consumer: str, current: dict, per_rp: dict[str, dict[str, int]]):
    body = {
        "allocations": {rp: {"resources": r} for rp, r in per_rp.items() if r},
        "project_id": current.get("project_id", PROJECT),
        "user_id": current.get("user_id", USER),
        "consumer_generation": current.get("consumer_generation"),
        "consumer_type": current.get("consumer_type", "INSTANCE"),
    }
    call(base, "PUT", f"/allocations/{consumer}", body)


class Host:
    """A warm host with a foreign consumer and a foreign part on one instance."""

    def __init__(self, tmp: Path, embedded) -> None:
        self.s = Setup(tmp, embedded, compute={"rewrite_differing_allocations": True})
        s = self.s
        assert s.cycle(startup=True).ok
        self.names = {
            p.uuid: p.name
            for p in s.report.get_provider_tree_and_ensure_root(s.nodename).all_data()
        }
        self.uuid = {name: u for u, name in self.names.items()}
        bw = http_post_provider(s.base, unique("eth0-bw"), s.uuid(s.nodename))
        self.bw = bw
        self.foreign = str(uuidlib.uuid4())
        put_consumer(
            s.base,
            self.foreign,
            {},
            {bw: {"NET_BW_EGR_KILOBIT_PER_SEC": 100}, s.uuid(s.nodename): {"DISK_GB": 1}},
        )
        current = http_get(s.base, f"/allocations/{s.inst(4)}")
        per_rp = {rp: a["resources"] for rp, a in current["allocations"].items()}
        per_rp[bw] = {"NET_BW_EGR_KILOBIT_PER_SEC": 500}
        put_consumer(s.base, s.inst(4), current, per_rp)
        assert s.cycle().ok and s.cycle().nodes[0].allocations_written == []
        self.foreign_before = self.held(self.foreign)[1]

    def held(self, consumer: str) -> tuple[dict, dict[str, dict[str, int]]]:
        body = http_get(self.s.base, f"/allocations/{consumer}")
        return body, {rp: dict(a["resources"]) for rp, a in body["allocations"].items()}

    def apply(self, kind: str, n: int) -> None:
        s, consumer = self.s, self.s.inst(n)
        body, per_rp = self.held(consumer)
        cells = [u for u in per_rp if "_NUMA" in self.names.get(u, "")]
        if kind == "delete":
            call(s.base, "DELETE", f"/allocations/{consumer}")
        elif kind == "empty" and body["allocations"]:
            put_consumer(s.base, consumer, body, {})
        elif kind == "rewrite" and cells:
            per_rp[cells[0]] = {rc: a * 2 for rc, a in per_rp[cells[0]].items()}
            put_consumer(s.base, consumer, body, per_rp)
        elif kind == "move" and len(cells) == 1:
            name = self.names[cells[0]]
            other = self.uuid[name[:-1] + str(1 - int(name[-1]))]
            per_rp[other] = per_rp.pop(cells[0])
            put_consumer(s.base, consumer, body, per_rp)
        elif kind == "drop_devices" and body["allocations"]:
            keep = {self.uuid[s.nodename], *cells, self.bw}
            put_consumer(s.base, consumer, body, {rp: r for rp, r in per_rp.items() if rp in keep})
        elif kind == "trait_remove":
            cell = self.uuid[f"{s.nodename}_NUMA{n % 2}"]
            traits = http_get(s.base, f"/resource_providers/{cell}/traits")
            kept = [t for t in traits["traits"] if t != "HW_NUMA_ROOT"]
            call(
                s.base,
                "PUT",
                f"/resource_providers/{cell}/traits",
                {
                    "traits": kept,
                    "resource_provider_generation": traits["resource_provider_generation"],
                },
            )
        elif kind == "trait_add":
            root = self.uuid[s.nodename]
            call(s.base, "PUT", f"/traits/{OPERATOR_TRAIT}")
            traits = http_get(s.base, f"/resource_providers/{root}/traits")
            call(
                s.base,
                "PUT",
                f"/resource_providers/{root}/traits",
                {
                    "traits": sorted({*traits["traits"], OPERATOR_TRAIT}),
                    "resource_provider_generation": traits["resource_provider_generation"],
                },
            )


def http_post_provider(base: str, name: str, parent: str) -> str:
    resp = requests.post(
        f"{base}/resource_providers",
        json={"name": name, "parent_provider_uuid": parent},
        headers=HEADERS,
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    uuid = resp.json()["uuid"]
    call(
        base,
        "PUT",
        f"/resource_providers/{uuid}/inventories",
        {
            "resource_provider_generation": 0,
            "inventories": {"NET_BW_EGR_KILOBIT_PER_SEC": {"total": 1_000_000}},
        },
    )
    return uuid


def check_instance(host: Host, n: int, lost_foreign: bool) -> None:
    """What instance ``n`` holds is what the host says, read from Placement."""
    s = host.s
    inst = next(i for i in s.driver.list_instances(s.nodename) if i.uuid == s.inst(n))
    _, per_rp = host.held(inst.uuid)
    by_name = {host.names.get(rp, rp): a for rp, a in per_rp.items()}
    cpu_rc = "PCPU" if inst.pinned else "VCPU"
    cells = {name: a for name, a in by_name.items() if "_NUMA" in name}
    assert sum(a.get(cpu_rc, 0) for a in cells.values()) == inst.flavor.vcpus
    assert sum(a.get("MEMORY_MB", 0) for a in cells.values()) == inst.flavor.memory_mb
    if inst.numa_cells:
        assert sorted(cells) == [f"{s.nodename}_NUMA{c}" for c in inst.numa_cells]
    else:
        assert len(cells) == 1
    root_gb = 0 if inst.boot_from_volume else inst.flavor.root_gb
    disk = root_gb + inst.flavor.ephemeral_gb + -(-inst.flavor.swap_mb // 1024)
    assert by_name.get(s.nodename, {}).get("DISK_GB", 0) == disk
    devices = {name: a for name, a in by_name.items() if "_pci_" in name}
    assert sum(devices.get(f"{s.nodename}_pci_0000_5e_00_0", {}).values()) == len(inst.mdevs)
    vfs = sum(a.get("SRIOV_NET_VF", 0) for a in devices.values())
    assert vfs == sum(1 for a in inst.pci_devices if a != "0000:86:00.0")
    if n == 4:
        assert by_name[f"{s.nodename}_pci_0000_86_00_0"] == {"CUSTOM_PCI_8086_0A54": 1}
        assert (host.bw in per_rp) is not lost_foreign
        if not lost_foreign:
            assert per_rp[host.bw] == {"NET_BW_EGR_KILOBIT_PER_SEC": 500}


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    writes=st.lists(
        st.tuples(st.sampled_from(KINDS), st.integers(min_value=1, max_value=4)),
        min_size=1,
        max_size=4,
    )
)
def test_out_of_band_writes_converge_in_one_cycle(embedded, writes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        host = Host(Path(tmp), embedded)
        s = host.s
        for kind, n in writes:
            host.apply(kind, n)
        outcome = s.cycle()
        assert outcome.ok, outcome.summary()
        assert outcome.nodes[0].problems == []
        lost = any(kind in ("delete", "empty") and n == 4 for kind, n in writes)
        for n in (1, 2, 3, 4):
            check_instance(host, n, lost_foreign=lost)
        assert s.cycle().nodes[0].allocations_written == []  # converged in one cycle
        assert host.held(host.foreign)[1] == host.foreign_before
        for cell in (f"{s.nodename}_NUMA0", f"{s.nodename}_NUMA1"):
            traits = http_get(s.base, f"/resource_providers/{host.uuid[cell]}/traits")["traits"]
            assert "HW_NUMA_ROOT" in traits
        root = http_get(s.base, f"/resource_providers/{host.uuid[s.nodename]}/traits")["traits"]
        assert (OPERATOR_TRAIT in root) is any(kind == "trait_add" for kind, _ in writes)
