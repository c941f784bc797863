"""Nova 34's scheduler queries against trees the agent wrote, on a real Placement of their own.

Each query is written down from nova's code (openstack/nova at
00a030403f672b975364c855b7d25b40ef83e757) as nova sends it, at microversion
1.36 (``nova/scheduler/client/report.py`` ``get_allocation_candidates``:
``SAME_SUBTREE_VERSION``):

* ``nova/scheduler/utils.py`` ``ResourceRequest.to_querystring``: ``limit``
  (``[scheduler] max_placement_results`` = 1000), ``group_policy``,
  ``root_required`` (sorted required, then ``!forbidden``), ``same_subtree``,
  then each group's ``resources{suffix}`` / ``required{suffix}``
  (``nova/objects/request_spec.py`` ``RequestGroup.to_queryparams``: sorted
  ``RC:N``), all sorted and urlencoded;
* ``nova/scheduler/request_filter.py``: ``owner_nova`` adds ``OWNER_NOVA``
  and ``compute_status_filter`` forbids ``COMPUTE_STATUS_DISABLED`` on the root;
* ``ResourceRequest._translate_pinning_policies``: ``hw:cpu_policy=dedicated``
  asks PCPU, ``hw:cpu_thread_policy=require`` requires ``HW_CPU_HYPERTHREADING``;
* flavor ``trait:X=required`` / ``=forbidden`` go in the unsuffixed group;
  ``resources1:VGPU=1`` + ``trait1:CUSTOM_NVIDIA_35=required`` in group 1
  (nova's vGPU guide) with ``group_policy`` defaulting to ``none``;
* ``RequestSpec._generate_request_groups_from_pci_requests``: a ``[pci]
  alias`` asks one group per device, suffix ``{request_id}-{i}``, class
  ``CUSTOM_PCI_{VENDOR}_{PRODUCT}``;
* a port's groups come from neutron's extended resource request
  (``RequestGroup.from_extended_port_request``: suffix = the group id) with
  its ``same_subtree``; here a VF group and a resourceless NUMA-cell group.

Placement runs as its own process per test (``served``), so no other test's
providers compete for the 1000 candidates.
"""

from __future__ import annotations

import uuid as uuidlib
from urllib.parse import urlencode

import requests

from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver
from tests.helpers.nova_state import write_nova_host
from tests.helpers.placement_http import HEADERS
from tests.helpers.sync import remote_client
from tests.helpers.tracker import Setup

ROOT = "root_required=OWNER_NOVA%2C%21COMPUTE_STATUS_DISABLED"
PCI_REQUEST = "8f1e9c2a-3b4d-4e5f-8a6b-7c8d9e0f1a2b"
PORT_GROUP = "2b4d6f8a-0c1e-4a3b-9c5d-7e9f1a3b5c7d"
NUMA_GROUP = "9e8d7c6b-5a49-4838-a271-605f4e3d2c1b"

QUERIES = {
    # m1.large: nova/scheduler/utils.py to_querystring + owner_nova + compute_status_filter.
    "flavor": f"limit=1000&resources=DISK_GB%3A80%2CMEMORY_MB%3A8192%2CVCPU%3A4&{ROOT}",
    # hw:cpu_policy=dedicated, hw:cpu_thread_policy=require.
    "pinned": (
        "limit=1000&required=HW_CPU_HYPERTHREADING"
        f"&resources=DISK_GB%3A20%2CMEMORY_MB%3A4096%2CPCPU%3A4&{ROOT}"
    ),
    # trait:HW_CPU_X86_AVX512F=required, boot from volume (no DISK_GB).
    "cpu-trait-bfv": (
        f"limit=1000&required=HW_CPU_X86_AVX512F&resources=MEMORY_MB%3A2048%2CVCPU%3A2&{ROOT}"
    ),
    # resources:VGPU=1 and trait:CUSTOM_NVIDIA_35=required, unsuffixed.
    "vgpu": (
        "limit=1000&required=CUSTOM_NVIDIA_35"
        f"&resources=DISK_GB%3A20%2CMEMORY_MB%3A4096%2CVCPU%3A2%2CVGPU%3A1&{ROOT}"
    ),
    # resources1:VGPU=1, trait1:CUSTOM_NVIDIA_35=required.
    "vgpu-group": (
        "group_policy=none&limit=1000&required1=CUSTOM_NVIDIA_35"
        "&resources=DISK_GB%3A20%2CMEMORY_MB%3A4096%2CVCPU%3A2&resources1=VGPU%3A1"
        f"&{ROOT}"
    ),
    # [pci] alias {"vendor_id": "8086", "product_id": "0a54", "name": "nvme"}, count 1.
    "pci-alias": (
        f"group_policy=none&limit=1000&resources=DISK_GB%3A20%2CMEMORY_MB%3A4096%2CVCPU%3A2"
        f"&resources{PCI_REQUEST}-0=CUSTOM_PCI_8086_0A54%3A1&{ROOT}"
    ),
}
FORBIDDEN = (
    f"limit=1000&required=%21HW_CPU_X86_AVX512F&resources=MEMORY_MB%3A2048%2CVCPU%3A2&{ROOT}"
)


def port_query() -> str:
    """A VF on physnet1 in the same NUMA cell (same_subtree), as to_querystring sorts it."""
    params = [
        ("group_policy", "none"),  # resources_from_request_spec: several groups -> none
        ("limit", "1000"),
        ("resources", "DISK_GB:20,MEMORY_MB:4096,VCPU:2"),
        ("root_required", "OWNER_NOVA,!COMPUTE_STATUS_DISABLED"),
        ("same_subtree", f"_{NUMA_GROUP},_{PORT_GROUP}"),
        (f"required_{NUMA_GROUP}", "HW_NUMA_ROOT"),
        (f"resources_{PORT_GROUP}", "SRIOV_NET_VF:1"),
        (f"required_{PORT_GROUP}", "CUSTOM_PHYSNET_PHYSNET1"),
    ]
    return urlencode(sorted(params))


class Served:
    """The ``served`` Placement in the shape :class:`Setup` expects of ``embedded``."""

    def __init__(self, tmp_path, served) -> None:
        self.url = served.url
        self._client = remote_client(tmp_path, served.url)

    def client(self):
        return self._client


def candidates(base: str, query: str, root_uuid: str, names: dict[str, str]) -> list[dict]:
    """Nova's query at 1.36: the allocation requests on ``root_uuid``'s tree, by name."""
    headers = {**HEADERS, "OpenStack-API-Version": "placement 1.36"}
    resp = requests.get(f"{base}/allocation_candidates?{query}", headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert len(body["allocation_requests"]) < 1000
    summaries = body["provider_summaries"]
    out = []
    for request in body["allocation_requests"]:
        rps = request["allocations"]
        if all(summaries[rp]["root_provider_uuid"] == root_uuid for rp in rps):
            out.append({names[rp]: a["resources"] for rp, a in rps.items()})
    return out


SPARE_NVME = {"address": "0000:87:00.0", "vendor_id": "8086", "product_id": "0a54", "numa_node": 0}


def agent_host(tmp_path, served, **groups) -> tuple[Setup, dict[str, str]]:
    """big-host with a second, unused NVMe (storage-1 holds the first), one start-up cycle."""
    s = Setup(tmp_path, Served(tmp_path, served), **groups)
    path = s.host.add("pci_devices", SPARE_NVME, position=0).write(s.host_path)
    s.driver = FakeDriver(s.conf, path)
    s.tracker = ResourceTracker(s.conf, s.driver, s.report, s.state, clock=lambda: s.now)
    assert s.cycle(startup=True).ok
    tree = s.report.get_provider_tree_and_ensure_root(s.nodename)
    names = {p.uuid: p.name.replace(s.nodename, "{node}") for p in tree.all_data()}
    return s, names


def test_every_nova_query_finds_the_numa_tree(tmp_path, served):
    s, names = agent_host(tmp_path, served, pci={"report_in_placement": True})
    root = s.uuid(s.nodename)
    for name, query in sorted(QUERIES.items()):
        found = candidates(s.base, query, root, names)
        assert found, f"{name}: no candidate on the agent's NUMA tree"
        for alloc in found:
            cpu = {rc for rp, r in alloc.items() if "_NUMA" in rp for rc in r}
            assert cpu & {"VCPU", "PCPU"}, name  # CPUs from a cell, whose CPU traits matched
    assert not candidates(s.base, FORBIDDEN, root, names)
    port = candidates(s.base, port_query(), root, names)
    # physnet1 is the PF 0000:3b:00.0 on cell 0: the VF and the cell group agree.
    assert port and all(a["{node}_pci_0000_3b_00_0"] == {"SRIOV_NET_VF": 1} for a in port)


def test_flat_tree_gives_the_candidates_of_novas_own_tree(tmp_path, served):
    groups = {"numa": {"model_in_placement": False}, "pci": {"report_in_placement": True}}
    s, names = agent_host(tmp_path, served, **groups)
    nova = write_nova_host(s.base, f"{s.nodename}-nova", str(uuidlib.uuid4())[:-2], spare=True)
    nova_names = {u: n.replace(f"{s.nodename}-nova", "{node}") for n, u in nova.uuids.items()}
    for name, query in sorted(QUERIES.items()):
        ours = candidates(s.base, query, s.uuid(s.nodename), names)
        theirs = candidates(s.base, query, nova.uuids[f"{s.nodename}-nova"], nova_names)
        key = sorted(map(repr, ours))
        assert ours and key == sorted(map(repr, theirs)), name
    assert not candidates(s.base, FORBIDDEN, s.uuid(s.nodename), names)
