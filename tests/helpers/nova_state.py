"""Placement as nova 34's nova-compute leaves it for examples/big-host.yaml's hardware.

Written by plain HTTP, as test data taken from nova's code (openstack/nova
at 00a030403f672b975364c855b7d25b40ef83e757, "Report OWNER_NOVA trait on
resource providers"):

* compute node: name = hypervisor hostname, a random UUID (the compute
  node record's); VCPU, PCPU, MEMORY_MB, DISK_GB with ``max_unit = total``
  (nova/virt/libvirt/driver.py ``update_provider_tree``), initial ratios
  4.0 / 1.0 / 1.0, ``reserved_host_memory_mb`` 512; traits ``COMPUTE_NODE``,
  ``OWNER_NOVA`` (nova/compute/resource_tracker.py ``_get_traits``) and
  the CPU traits;
* one vGPU provider per physical GPU, ``{nodename}_pci_{dddd_bb_ss_f}``
  under the root (libvirt driver ``_get_pgpu_provider_name``), VGPU total =
  existing mdevs of the type + available instances, ``OWNER_NOVA``, plus
  the type trait an operator sets by hand (nova's vGPU admin guide);
* PCI in placement: ``{nodename}_{ADDRESS}`` under the root, class
  ``CUSTOM_PCI_{VENDOR}_{PRODUCT}``, traits ``COMPUTE_MANAGED_PCI_DEVICE``
  and ``OWNER_NOVA`` (nova/compute/pci_placement_translator.py), a random UUID;
* allocations: every instance's flavor (DISK_GB = root + ephemeral + swap,
  root 0 when booted from volume), its vGPU and PCI device; VFs of neutron
  SR-IOV ports are not in Placement (nova tracks them in its PCI tracker);
  one migration record's allocation (a resize in progress: the source-host
  side held by the migration UUID, consumer_type MIGRATION).
"""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, field

import requests

from tests.helpers.placement_http import HEADERS

VDI_OWNER = ("0c4e2f1a3b5d4c6e8f9a0b1c2d3e4f50", "a1b2c3d4e5f60718293a4b5c6d7e8f90")
NFV_OWNER = ("3e5f7a9b1c2d4e6f8a0b2c4d6e8f0a1b", "b2c3d4e5f6a7489aab1c2d3e4f5a6b7c")
CPU_TRAITS = [
    "HW_CPU_X86_AVX",
    "HW_CPU_X86_AVX2",
    "HW_CPU_X86_AVX512F",
    "HW_CPU_X86_AESNI",
    "HW_CPU_X86_SSE42",
    "HW_CPU_X86_VMX",
    "HW_CPU_HYPERTHREADING",
]


def inventory(total: int, reserved: int = 0, ratio: float = 1.0) -> dict:
    return {"total": total, "reserved": reserved, "max_unit": total, "allocation_ratio": ratio}


@dataclass
class NovaHost:
    """The UUIDs nova chose, by provider name, and the allocations it wrote."""

    base: str
    nodename: str
    uuids: dict[str, str] = field(default_factory=dict)
    allocations: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    """consumer -> provider name -> resources."""

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        resp = requests.request(method, self.base + path, headers=HEADERS, json=body, timeout=10)
        assert resp.status_code < 300, (method, path, resp.status_code, resp.text)
        return resp.json() if resp.content else {}

    def provider(self, name: str, parent: str | None, inv: dict, traits: list[str]) -> str:
        uuid = str(uuidlib.uuid4())
        body = {"name": name, "uuid": uuid}
        if parent:
            body["parent_provider_uuid"] = self.uuids[parent]
        self.call("POST", "/resource_providers", body)
        self.uuids[name] = uuid
        for rc in inv:
            if rc.startswith("CUSTOM_"):
                self.call("PUT", f"/resource_classes/{rc}")
        self.call(
            "PUT",
            f"/resource_providers/{uuid}/inventories",
            {
                "resource_provider_generation": 0,
                "inventories": inv,
            },
        )
        for trait in traits:
            if trait.startswith("CUSTOM_"):
                self.call("PUT", f"/traits/{trait}")
        gen = self.call("GET", f"/resource_providers/{uuid}")["generation"]
        self.call(
            "PUT",
            f"/resource_providers/{uuid}/traits",
            {
                "resource_provider_generation": gen,
                "traits": traits,
            },
        )
        return uuid

    def allocate(
        self,
        consumer: str,
        by_name: dict[str, dict[str, int]],
        kind: str,
        owner: tuple[str, str] = VDI_OWNER,
    ) -> None:
        self.allocations[consumer] = by_name
        self.call(
            "PUT",
            f"/allocations/{consumer}",
            {
                "allocations": {self.uuids[n]: {"resources": r} for n, r in by_name.items()},
                "project_id": owner[0],
                "user_id": owner[1],
                "consumer_generation": None,
                "consumer_type": kind,
            },
        )


def write_nova_host(
    base: str, nodename: str, instance_prefix: str, spare: bool = False
) -> NovaHost:
    """Write nova 34's providers and allocations for big-host's hardware as ``nodename``.

    ``instance_prefix`` + ``01``..``04`` are the instances of examples/big-host.yaml;
    ``spare``: a second NVMe ``0000:87:00.0``, unused.
    """
    host = NovaHost(base, nodename)
    n = nodename
    host.provider(
        n,
        None,
        {
            "VCPU": inventory(80, 0, 4.0),
            "PCPU": inventory(16),
            "MEMORY_MB": inventory(786432, 512),
            "DISK_GB": inventory(3500),
        },
        ["COMPUTE_NODE", "OWNER_NOVA", *CPU_TRAITS, "COMPUTE_VOLUME_EXTEND"],
    )
    for gpu in ("0000_5e_00_0", "0000_af_00_0"):
        host.provider(
            f"{n}_pci_{gpu}", n, {"VGPU": inventory(4)}, ["OWNER_NOVA", "CUSTOM_NVIDIA_35"]
        )
    host.provider(
        f"{n}_0000:86:00.0",
        n,
        {"CUSTOM_PCI_8086_0A54": inventory(1)},
        [
            "COMPUTE_MANAGED_PCI_DEVICE",
            "OWNER_NOVA",
        ],
    )
    for address in ["0000:87:00.0"] if spare else []:
        host.provider(
            f"{n}_{address}",
            n,
            {"CUSTOM_PCI_8086_0A54": inventory(1)},
            ["COMPUTE_MANAGED_PCI_DEVICE", "OWNER_NOVA"],
        )
    gpu = f"{n}_pci_0000_5e_00_0"
    vdi = {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 40}
    host.allocate(f"{instance_prefix}01", {n: vdi, gpu: {"VGPU": 1}}, "INSTANCE")
    host.allocate(f"{instance_prefix}02", {n: vdi, gpu: {"VGPU": 1}}, "INSTANCE")
    nfv = {"PCPU": 8, "MEMORY_MB": 16384, "DISK_GB": 2}
    host.allocate(f"{instance_prefix}03", {n: nfv}, "INSTANCE", NFV_OWNER)
    storage = {"VCPU": 8, "MEMORY_MB": 32768, "DISK_GB": 180}
    pci = {"CUSTOM_PCI_8086_0A54": 1}
    host.allocate(
        f"{instance_prefix}04", {n: storage, f"{n}_0000:86:00.0": pci}, "INSTANCE", NFV_OWNER
    )
    migration = str(uuidlib.uuid4())
    host.allocate(migration, {n: {"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 20}}, "MIGRATION")
    return host
