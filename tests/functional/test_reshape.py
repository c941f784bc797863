"""Reshapes against a real Placement (issue #7; spec: reshape-provider-tree.txt).

Each test writes an "old shape" into Placement with plain HTTP (or syncs
with one configuration), puts live allocations on several consumers, lets
the agent reshape, and reads Placement back with plain HTTP.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from agent.model.exceptions import ReshapeFailed
from agent.placement.report import ReportClient
from agent.shape.adapter import adapt
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from agent.tracker.reshape import reshape_node
from drivers.fake import FakeDriver
from drivers.records import vf_addresses
from tests.helpers.conf import make_conf
from tests.helpers.hosts import HostDescription
from tests.helpers.names import unique
from tests.helpers.nova_client import Flavor, Nova
from tests.helpers.placement_http import HEADERS, call, http, http_get, put_allocations
from tests.helpers.placement_snapshot import amounts, class_totals, inventories, snapshot
from tests.helpers.served import ServedPlacement
from tests.helpers.service import run_cli
from tests.helpers.sync import cycle, remote_client

M1, M2, M3 = (f"7f0b3c1e-0a3d-4a4b-9f8a-1c2d3e4f5a0{i}" for i in range(1, 4))
I1, I2, I3, I4, I5 = (f"4f7d1e2a-5b6c-4d8e-9f01-a2b3c4d5e60{i}" for i in range(1, 6))
VF = vf_addresses("0000:3b:00.0", 1, 128, 1)[0]


def reshape_host(name: str) -> HostDescription:
    """Two NUMA cells, a PF, two vGPU GPUs with mdevs, three NVMe; five instances using them."""
    nvme = {"vendor_id": "8086", "product_id": "0a54"}
    return HostDescription.of_node(
        {
            "nodename": name,
            "memory_mb": 65536,
            "disk_gb": 1000,
            "numa_cells": [
                {"id": 0, "vcpus": 16, "pcpus": 4, "memory_mb": 32768},
                {"id": 1, "vcpus": 16, "pcpus": 4, "memory_mb": 32768},
            ],
            "sriov_pfs": [
                {"address": "0000:3b:00.0", "total_vfs": 8, "numa_node": 1, "physnet": "physnet1"}
            ],
            "gpus": [
                {
                    "address": "0000:5e:00.0",
                    "numa_node": 0,
                    "mdev_types": [{"id": "nvidia-35", "available_instances": 2}],
                    "mdevs": [{"uuid": M1, "type": "nvidia-35"}, {"uuid": M2, "type": "nvidia-35"}],
                },
                {
                    "address": "0000:af:00.0",
                    "numa_node": 1,
                    "mdev_types": [{"id": "nvidia-35", "available_instances": 3}],
                    "mdevs": [{"uuid": M3, "type": "nvidia-35"}],
                },
            ],
            "pci_devices": [
                {"address": "0000:86:00.0", **nvme, "numa_node": 1},
                {"address": "0000:87:00.0", **nvme, "numa_node": 0},
                {"address": "0000:88:00.0", **nvme},
            ],
            "instances": [
                {
                    "uuid": I1,
                    "project_id": "p1",
                    "user_id": "u1",
                    "numa_cells": [0],
                    "mdevs": [M1],
                    "pci_devices": ["0000:87:00.0"],
                    "flavor": {"vcpus": 4, "memory_mb": 4096, "root_gb": 20},
                },
                {
                    "uuid": I2,
                    "project_id": "p1",
                    "user_id": "u1",
                    "numa_cells": [0],
                    "mdevs": [M2],
                    "flavor": {"vcpus": 2, "memory_mb": 2048, "root_gb": 10},
                },
                {
                    "uuid": I3,
                    "project_id": "p2",
                    "user_id": "u2",
                    "numa_cells": [1],
                    "mdevs": [M3],
                    "pci_devices": [VF, "0000:86:00.0"],
                    "flavor": {"vcpus": 4, "memory_mb": 8192, "root_gb": 10},
                },
                {
                    "uuid": I4,
                    "project_id": "p2",
                    "user_id": "u2",
                    "pinned": True,
                    "numa_cells": [0, 1],
                    "flavor": {"vcpus": 6, "memory_mb": 6144, "root_gb": 10},
                },
                {
                    "uuid": I5,
                    "project_id": "p2",
                    "user_id": "u2",
                    "flavor": {"vcpus": 2, "memory_mb": 1024, "root_gb": 5},
                },
            ],
        }
    )


GPU_A, GPU_B = "0000_5e_00_0", "0000_af_00_0"
PCI_CLASS = "CUSTOM_PCI_8086_0A54"


def write_host(
    tmp_path: Path, name: str, build: Callable[[str], HostDescription] = reshape_host
) -> Path:
    return build(name).write(tmp_path / f"{name}.yaml")


def driver_for(tmp_path: Path, host: Path, *, numa=False, mdev=True, renames=()) -> FakeDriver:
    conf = make_conf(
        tmp_path,
        numa={"model_in_placement": numa},
        devices={"enabled_mdev_types": ["nvidia-35"] if mdev else []},
        compute={"resource_class_renames": list(renames)},
    )
    return FakeDriver(conf, host)


def new_report(placement, tmp_path: Path) -> ReportClient:
    return ReportClient(placement.client(), StateStore(tmp_path / "state"), sleep=lambda s: None)


# -- plain HTTP helpers -------------------------------------------------------------


def root_of(base: str, name: str) -> str:
    return http_get(base, "/resource_providers", name=name)["resource_providers"][0]["uuid"]


def allocate_instances(base: str, driver: FakeDriver, report: ReportClient, name: str) -> None:
    """Each instance's allocation as the driver expects it on the tree Placement holds."""
    tree = report.get_provider_tree_and_ensure_root(name)
    adapt(driver, driver.conf).update_provider_tree(tree, name)
    for consumer, rec in adapt(driver, driver.conf).expected_allocations(tree, name).items():
        put_allocations(base, consumer, rec.allocations, rec.project_id)


def old_vgpu_shape(base: str, tmp_path: Path, name: str, report: ReportClient) -> str:
    """Nova's old flat vGPU shape: VGPU 4 + 4 on the compute node, each instance's VGPU there.

    Returns the compute node's UUID.
    """
    host = write_host(tmp_path, name)
    flat = driver_for(tmp_path, host, mdev=False)  # no GPU providers
    cycle(report, flat, name)
    allocate_instances(base, flat, report, name)
    root = root_of(base, name)
    held = http_get(base, f"/resource_providers/{root}/inventories")
    inv = held["inventories"]
    inv["VGPU"] = {"total": 8, "max_unit": 8}
    http(
        base,
        "PUT",
        f"/resource_providers/{root}/inventories",
        {"inventories": inv, "resource_provider_generation": held["resource_provider_generation"]},
    )
    for consumer in (I1, I2, I3):
        rec = http_get(base, f"/allocations/{consumer}")
        per_rp = {rp: a["resources"] for rp, a in rec["allocations"].items()}
        per_rp[root]["VGPU"] = 1
        put_allocations(base, consumer, per_rp, rec["project_id"])
    return root


# -- 1. vGPUs to one provider per physical GPU ----------------------------------------


def test_vgpus_move_to_their_gpu_with_every_allocation(embedded, tmp_path):
    name = unique("vgpu")
    base = embedded.url
    report = new_report(embedded, tmp_path)
    root = old_vgpu_shape(base, tmp_path, name, report)
    # I2 resizes to another host: nova's migration record (untyped, I2's project and user)
    # holds its share here, its own consumer the destination's; its domain and mdev M2
    # (on GPU A) are still here.
    migration = str(uuidlib.uuid4())
    http(base, "DELETE", f"/allocations/{I2}")
    held = {root: {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 10, "VGPU": 1}}
    as_nova(base, migration, held, "p1", "u1")
    before = snapshot(base, root)

    driver = driver_for(tmp_path, write_host(tmp_path, name))
    client = report.client
    start = dict(client.counts)
    outcome = reshape_node(report, adapt(driver), name)

    assert outcome.needed and outcome.reshaped and outcome.attempts == 1
    assert client.counts[("POST", "/reshaper")] - start.get(("POST", "/reshaper"), 0) == 1
    after = snapshot(base, root)
    inv = inventories(after)
    assert "VGPU" not in inv[name]
    assert inv[f"{name}_pci_{GPU_A}"] == {"VGPU": 4}  # 2 mdevs + 2 available
    assert inv[f"{name}_pci_{GPU_B}"] == {"VGPU": 4}  # 1 mdev + 3 available
    got = amounts(after)
    assert got[I1][f"{name}_pci_{GPU_A}"] == {"VGPU": 1}
    assert got[I3][f"{name}_pci_{GPU_B}"] == {"VGPU": 1}
    # the migration record's vGPU follows the source domain's mdev (GPU A), not the GPU
    # with the most free (B: 3 left, A: 2); issue 33, case 8
    assert got[migration] == {
        name: {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 10},
        f"{name}_pci_{GPU_A}": {"VGPU": 1},
    }
    assert outcome.placed_by[migration] == "driver" and outcome.placed_by[I1] == "driver"
    # nova's untyped record stays untyped (the reshaper goes at 1.37, without types)
    assert http_get(base, f"/allocations/{migration}")["consumer_type"] == "unknown"
    # nothing lost or doubled, and the rest of each allocation untouched
    assert class_totals(after) == class_totals(before)
    assert got[I4] == amounts(before)[I4] and got[I5] == amounts(before)[I5]
    # the next start-up has nothing to do
    assert reshape_node(report, adapt(driver), name).needed is False


def as_nova(base: str, consumer: str, per_rp: dict[str, dict[str, int]], project: str, user: str):
    """A new consumer's allocations as nova writes them: at microversion 1.36, untyped."""
    body = {
        "allocations": {rp: {"resources": r} for rp, r in per_rp.items()},
        "project_id": project,
        "user_id": user,
        "consumer_generation": None,
    }
    headers = {**HEADERS, "OpenStack-API-Version": "placement 1.36"}
    resp = requests.put(f"{base}/allocations/{consumer}", json=body, headers=headers, timeout=10)
    assert resp.status_code == 204, resp.text


def test_a_vgpu_no_domain_here_explains_refuses_the_reshape(embedded, tmp_path):
    """A consumer holding VGPU that no domain listed here explains (another owner's, no
    mdev free of its own consumer): the reshape is refused, as nova's own
    (``_get_assigned_mdevs_for_reshape``), and Placement is unchanged."""
    name = unique("vgpu")
    base = embedded.url
    report = new_report(embedded, tmp_path)
    root = old_vgpu_shape(base, tmp_path, name, report)
    stray = str(uuidlib.uuid4())
    put_allocations(base, stray, {root: {"VCPU": 2, "MEMORY_MB": 1024, "VGPU": 2}})
    before = snapshot(base, root)
    driver = driver_for(tmp_path, write_host(tmp_path, name))
    with pytest.raises(ReshapeFailed, match=f"consumer {stray} holds VGPU 2"):
        reshape_node(report, adapt(driver), name)
    after = snapshot(base, root)
    assert inventories(after) == inventories(before) and amounts(after) == amounts(before)


# -- 2. flat to NUMA, and back ----------------------------------------------------------


def test_numa_on_splits_allocations_by_cell_and_off_puts_them_back(embedded, tmp_path):
    name = unique("numa")
    base = embedded.url
    host = write_host(tmp_path, name)
    report = new_report(embedded, tmp_path)
    flat = driver_for(tmp_path, host)
    cycle(report, flat, name)
    allocate_instances(base, flat, report, name)
    root = root_of(base, name)
    unknown = str(uuidlib.uuid4())
    put_allocations(base, unknown, {root: {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 30}})
    flat_snap = snapshot(base, root)

    numa = driver_for(tmp_path, host, numa=True)
    outcome = reshape_node(report, adapt(numa), name)
    assert outcome.reshaped
    snap = snapshot(base, root)
    got = amounts(snap)
    n0, n1 = f"{name}_NUMA0", f"{name}_NUMA1"
    assert inventories(snap)[name] == {"DISK_GB": 1000}
    assert inventories(snap)[n0] == {"VCPU": 16, "PCPU": 4, "MEMORY_MB": 32768}
    # pinned to cell 0 / cell 1 / both (dedicated CPUs: PCPU, split evenly)
    assert got[I1][n0] == {"VCPU": 4, "MEMORY_MB": 4096}
    assert got[I2][n0] == {"VCPU": 2, "MEMORY_MB": 2048}
    assert got[I3][n1] == {"VCPU": 4, "MEMORY_MB": 8192}
    assert got[I4] == {name: {"DISK_GB": 10}, n0: {"PCPU": 3, "MEMORY_MB": 3072},
                       n1: {"PCPU": 3, "MEMORY_MB": 3072}}  # fmt: skip
    # unpinned instance: the cell with the most free VCPU (cell 0 has lent 6, cell 1 4)
    assert got[I5] == {name: {"DISK_GB": 5}, n1: {"VCPU": 2, "MEMORY_MB": 1024}}
    # unknown consumer: VCPU free is equal (58 and 58), cell 0 has more memory free
    assert got[unknown] == {name: {"DISK_GB": 30}, n0: {"VCPU": 2, "MEMORY_MB": 2048}}
    # devices hang under their cell now; their allocations did not move
    pf = snap["providers"][default_uuid(snap, f"{name}_pci_0000_3b_00_0")]
    assert snap["providers"][pf["parent"]]["name"] == n1
    assert got[I3][f"{name}_pci_0000_3b_00_0"] == {"SRIOV_NET_VF": 1}
    assert got[I3][f"{name}_pci_{GPU_B}"] == {"VGPU": 1}
    assert class_totals(snap) == class_totals(flat_snap)

    off = driver_for(tmp_path, host, numa=False)
    assert reshape_node(report, adapt(off), name).reshaped
    back = snapshot(base, root)
    assert amounts(back) == amounts(flat_snap)  # every consumer exactly as before
    assert inventories(back) == inventories(flat_snap)
    for n in (n0, n1):
        assert http_get(base, "/resource_providers", name=n)["resource_providers"] == []


def default_uuid(snap: dict[str, Any], name: str) -> str:
    return next(u for u, p in snap["providers"].items() if p["name"] == name)


# -- 3. a custom resource class renamed to a standard one ---------------------------------


def test_renamed_class_moves_inventory_and_allocations(embedded, tmp_path):
    name = unique("rename")
    base = embedded.url
    host = write_host(tmp_path, name)
    report = new_report(embedded, tmp_path)
    old = driver_for(tmp_path, host)
    cycle(report, old, name)
    allocate_instances(base, old, report, name)  # I1 holds 87:00.0, I3 holds 86:00.0
    root = root_of(base, name)
    spare = f"{name}_pci_0000_88_00_0"
    spare_uuid = http_get(base, "/resource_providers", name=spare)["resource_providers"][0]["uuid"]
    other = str(uuidlib.uuid4())  # another service holds the third device
    put_allocations(base, other, {spare_uuid: {PCI_CLASS: 1}})
    before = snapshot(base, root)

    renamed = driver_for(tmp_path, host, renames=[f"{PCI_CLASS}:PCI_DEVICE"])
    assert reshape_node(report, adapt(renamed), name).reshaped
    after = snapshot(base, root)
    got = amounts(after)
    for dev in ("86", "87", "88"):
        assert inventories(after)[f"{name}_pci_0000_{dev}_00_0"] == {"PCI_DEVICE": 1}
    assert got[I1][f"{name}_pci_0000_87_00_0"] == {"PCI_DEVICE": 1}
    assert got[I3][f"{name}_pci_0000_86_00_0"] == {"PCI_DEVICE": 1}
    assert got[other] == {spare: {"PCI_DEVICE": 1}}
    assert not any(PCI_CLASS in r for c in got.values() for r in c.values())
    renamed_back = {c: {k.replace(PCI_CLASS, "PCI_DEVICE"): n for k, n in t.items()}
                    for c, t in class_totals(before).items()}  # fmt: skip
    assert class_totals(after) == renamed_back


# -- concurrent writers ---------------------------------------------------------------------


def hook_reshaper(report: ReportClient, before_post) -> list[int]:
    """Run ``before_post(n)`` just before the n-th ``POST /reshaper`` the agent sends.

    The write it makes is real (plain HTTP to the same Placement); only the
    moment is chosen, which a test cannot otherwise catch.
    """
    client = report.client
    real_post = client.post
    calls: list[int] = []

    def post(template: str, **kw: Any) -> Any:
        if template == "/reshaper":
            calls.append(len(calls) + 1)
            before_post(len(calls))
        return real_post(template, **kw)

    client.post = post  # type: ignore[method-assign]
    return calls


def test_a_concurrent_allocation_on_a_moving_provider_is_moved_too(embedded, tmp_path):
    name = unique("race")
    base = embedded.url
    report = new_report(embedded, tmp_path)
    root = old_vgpu_shape(base, tmp_path, name, report)
    http(base, "DELETE", f"/allocations/{I2}")  # I2 is being moved off this host
    before = snapshot(base, root)
    intruder = str(uuidlib.uuid4())

    def another_service(n: int) -> None:
        if n == 1:  # after the agent read tree and allocations, before its write
            # nova's conductor: I2's migration record (its vGPU is mdev M2's, on GPU A)
            as_nova(base, intruder, {root: {"VGPU": 1, "MEMORY_MB": 512}}, "p1", "u1")

    calls = hook_reshaper(report, another_service)
    outcome = reshape_node(report, adapt(driver_for(tmp_path, write_host(tmp_path, name))), name)
    assert calls == [1, 2] and outcome.attempts == 2 and outcome.reshaped
    after = snapshot(base, root)
    got = amounts(after)
    # moved with the rest, to its source domain's GPU; not lost, not doubled
    assert got[intruder] == {name: {"MEMORY_MB": 512}, f"{name}_pci_{GPU_A}": {"VGPU": 1}}
    expected_totals = {**class_totals(before), intruder: {"VGPU": 1, "MEMORY_MB": 512}}
    assert class_totals(after) == expected_totals
    usages = {
        p["name"]: http_get(base, f"/resource_providers/{u}/usages")["usages"]
        for u, p in after["providers"].items()
    }
    assert usages[name].get("VGPU", 0) == 0
    assert usages[f"{name}_pci_{GPU_A}"]["VGPU"] + usages[f"{name}_pci_{GPU_B}"]["VGPU"] == 3


def test_conflicts_on_every_attempt_fail_and_leave_placement_as_it_was(embedded, tmp_path):
    name = unique("busy")
    base = embedded.url
    report = new_report(embedded, tmp_path)
    root = old_vgpu_shape(base, tmp_path, name, report)
    intruders: list[str] = []

    def another_service(n: int) -> None:
        intruders.append(str(uuidlib.uuid4()))
        put_allocations(base, intruders[-1], {root: {"MEMORY_MB": 256}})

    hook_reshaper(report, another_service)
    driver = driver_for(tmp_path, write_host(tmp_path, name))
    before_tree = snapshot(base, root)["providers"]
    with pytest.raises(ReshapeFailed) as err:
        reshape_node(report, adapt(driver), name, attempts=3)
    assert "after 3 attempts" in str(err.value)
    assert len(intruders) == 3
    after = snapshot(base, root)
    # only the intruders' own writes: same providers (the GPU children created
    # for each attempt are gone again), same inventories
    assert {u: p["name"] for u, p in after["providers"].items()} == {
        u: p["name"] for u, p in before_tree.items()
    }
    assert inventories(after) == {p["name"]: {rc: i["total"] for rc, i in p["inventories"].items()}
                                  for p in before_tree.values()}  # fmt: skip
    for c in intruders:
        assert amounts(after)[c] == {name: {"MEMORY_MB": 256}}


# -- a reshape that cannot fit ----------------------------------------------------------------


def tight_host(name: str) -> HostDescription:
    """Two NUMA cells of 16 GiB; two instances of 10 GiB each pinned to cell 0."""
    instance = {"project_id": "p", "user_id": "u", "numa_cells": [0]}
    flavor = {"vcpus": 2, "memory_mb": 10240}
    return HostDescription.of_node(
        {
            "nodename": name,
            "memory_mb": 32768,
            "disk_gb": 100,
            "numa_cells": [
                {"id": 0, "vcpus": 8, "memory_mb": 16384},
                {"id": 1, "vcpus": 8, "memory_mb": 16384},
            ],
            "instances": [
                {"uuid": I1, **instance, "flavor": flavor},
                {"uuid": I2, **instance, "flavor": flavor},
            ],
        }
    )


def tight_setup(base: str, tmp_path: Path, report: ReportClient, name: str) -> tuple[Path, str]:
    """Two instances pinned to cell 0 with 20 GiB between them: fits flat, not on cell 0."""
    host = write_host(tmp_path, name, tight_host)
    flat = driver_for(tmp_path, host)
    cycle(report, flat, name)
    allocate_instances(base, flat, report, name)
    return host, root_of(base, name)


def test_a_reshape_that_cannot_fit_fails_and_changes_nothing(embedded, tmp_path):
    name = unique("tight")
    base = embedded.url
    report = new_report(embedded, tmp_path)
    host, root = tight_setup(base, tmp_path, report, name)
    before = snapshot(base, root)
    with pytest.raises(ReshapeFailed) as err:
        reshape_node(report, adapt(driver_for(tmp_path, host, numa=True)), name)
    assert "POST /reshaper" in str(err.value) and "docs/reshape.md" in str(err.value)
    assert snapshot(base, root) == before  # generations included


def agent_conf(tmp_path: Path, host: Path, extra: str = "", served: ServedPlacement | None = None):
    path = tmp_path / "agent.conf"
    text = (
        f"[DEFAULT]\nstate_path = {tmp_path / 'agent-state'}\n"
        f"[compute]\ndriver = fake\n[fake]\nhost_file = {host}\n"
        "[devices]\nenabled_mdev_types = nvidia-35\n"
    )
    if served is not None:
        text += (
            f"[placement]\nauth_type = admin_token\nendpoint = {served.url}\ntoken = admin\n"
            "noauth_roles = admin,service\n"
        )
    path.write_text(text + extra)
    return path


def test_commands_exit_5_when_the_reshape_cannot_fit(served, tmp_path):
    name = unique("tight")
    report = ReportClient(remote_client(tmp_path, served.url), StateStore(tmp_path / "state"))
    host, root = tight_setup(served.url, tmp_path, report, name)
    before = snapshot(served.url, root)
    conf = agent_conf(tmp_path, host, "[numa]\nmodel_in_placement = true\n", served)
    for argv in (("reshape",), ("sync", "--once")):
        proc = run_cli(*argv, "--config", str(conf))
        assert proc.returncode == 5, proc.stdout + proc.stderr
        assert "reshape failed" in proc.stdout + proc.stderr
        assert "Unable to allocate inventory" in proc.stdout + proc.stderr
    assert snapshot(served.url, root) == before


# -- offline, on the placement database ------------------------------------------------------


def test_offline_reshape_on_the_placement_database_and_its_dry_run(served, tmp_path):
    name = unique("ffu")
    base = served.url
    report = ReportClient(remote_client(tmp_path, served.url), StateStore(tmp_path / "state"))
    root = old_vgpu_shape(base, tmp_path, name, report)
    before = snapshot(base, root)
    served.stop()  # every service stopped, as in a fast-forward upgrade

    db = f"sqlite:///{served.state / 'placement.sqlite'}"
    conf = agent_conf(tmp_path, write_host(tmp_path, name))
    dry = run_cli("reshape", "--dry-run", "--placement-db", db, "--config", str(conf))
    assert dry.returncode == 0, dry.stderr
    out = dry.stdout
    assert f"node {name}: reshape needed" in out and "VGPU: " in out
    assert "inventories (would move):" in out
    # inventories before and after, per provider
    assert f"  {name}\n    before: DISK_GB 1000, MEMORY_MB 65536 (reserved 512), " in out
    assert f"  {name}_pci_{GPU_A}\n    before: (none)\n    after:  VGPU 4" in out
    # allocations before and after, per consumer
    dev = f"{name}_pci_0000"
    assert (
        f"  consumer {I3} (placed by the driver)\n"
        f"    before: {name}: DISK_GB 10, MEMORY_MB 8192, VCPU 4, VGPU 1; "
        f"{dev}_3b_00_0: SRIOV_NET_VF 1; {dev}_86_00_0: {PCI_CLASS} 1\n"
        f"    after:  {name}: DISK_GB 10, MEMORY_MB 8192, VCPU 4; "
        f"{dev}_3b_00_0: SRIOV_NET_VF 1; {dev}_86_00_0: {PCI_CLASS} 1; {dev}_af_00_0: VGPU 1\n"
    ) in out
    assert "allocations (would move, 3 consumers)" in out

    # the dry run wrote nothing: the real run still has the whole reshape to do
    done = run_cli("reshape", "--placement-db", db, "--config", str(conf))
    assert done.returncode == 0, done.stderr
    assert f"node {name}: reshape done" in done.stdout and "1 POST /reshaper" in done.stdout
    again = run_cli("reshape", "--placement-db", db, "--config", str(conf))
    assert again.returncode == 0 and f"node {name}: no reshape needed" in again.stdout

    served.start()
    after = snapshot(base, root)
    got = amounts(after)
    assert got[I1][f"{name}_pci_{GPU_A}"] == {"VGPU": 1}
    assert got[I3][f"{name}_pci_{GPU_B}"] == {"VGPU": 1}
    assert "VGPU" not in inventories(after)[name]
    assert class_totals(after) == class_totals(before)


def test_offline_reshape_refuses_a_database_without_placement(tmp_path):
    empty = tmp_path / "not-placement.sqlite"
    empty.write_bytes(b"")
    conf = agent_conf(tmp_path, write_host(tmp_path, "cn"))
    proc = run_cli("reshape", "--placement-db", f"sqlite:///{empty}", "--config", str(conf))
    assert proc.returncode == 2
    assert "no Placement schema" in proc.stderr
    missing = run_cli(
        "reshape", "--placement-db", f"sqlite:///{tmp_path}/nope.sqlite", "--config", str(conf)
    )
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert not (tmp_path / "nope.sqlite").exists()


def test_a_start_up_reshape_discovers_the_host_once_and_reads_the_tree_once(
    embedded, tmp_path, monkeypatch
):
    """The tracker's start-up cycle over a flat -> NUMA reshape (issue #12: it used to
    discover the host four times and read the tree three times)."""

    name = unique("once")
    host = write_host(tmp_path, name)
    report = new_report(embedded, tmp_path)
    flat = driver_for(tmp_path, host)
    cycle(report, flat, name)
    allocate_instances(embedded.url, flat, report, name)
    numa = driver_for(tmp_path, host, numa=True)
    tracker = ResourceTracker(numa.conf, numa, report, StateStore(tmp_path / "state"))

    discovered: list[str] = []
    reads: list[str] = []
    listings: list[dict[str, Any]] = []
    discover, read = numa.get_host_resources, report.get_provider_tree_and_ensure_root
    get = report.client.get

    def counting_discover(nodename: str):
        discovered.append(nodename)
        return discover(nodename)

    def counting_read(nodename: str, **kw: Any):
        reads.append(nodename)
        return read(nodename, **kw)

    def counting_get(template: str, **kw: Any):
        if template == "/resource_providers" and "in_tree" in (kw.get("params") or {}):
            listings.append(kw["params"])
        return get(template, **kw)

    monkeypatch.setattr(numa, "get_host_resources", counting_discover)
    monkeypatch.setattr(report, "get_provider_tree_and_ensure_root", counting_read)
    monkeypatch.setattr(report.client, "get", counting_get)
    outcome = tracker.update_available_resource(startup=True)

    assert outcome.ok and outcome.nodes[0].sync.reshaped
    assert discovered == [name]
    assert reads == [name]
    # the read, the generations after POST /reshaper, the ordinary flush's check
    assert len(listings) == 3


# -- beside nova 34's own claims (issue 33, case 8) ---------------------------------------
#
# A flat host runs the agent (state kept), then restarts with NUMA in Placement: its start-up
# cycle must reshape. nova's ``SchedulerReportClient`` (tests/helpers/nova_client.py) claims
# a new instance on the compute node between the agent's read of the tree's allocations and
# its ``POST /reshaper``, once or on every attempt.

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
