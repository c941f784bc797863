"""A ``compute_nodes`` row (and its ``pci_devices``) as the records drivers produce.

Mapping (compute-node-inventory.rst, "Alignment of database schema" and 4a-4d):

- ``vcpus`` -> VCPU, ``memory_mb`` -> MEMORY_MB, ``local_gb`` -> DISK_GB
  (not with shared storage, 4b), each with the row's allocation ratio;
- ``disk_available_least`` -> DISK_GB ``max_unit``;
- ``numa_topology`` -> NUMA cells (VCPU ``cpuset``, PCPU ``pcpuset``, MiB);
- ``pci_devices`` -> one provider per whole device (``type-PCI``, a
  ``type-PF`` without VFs) in the class ``pci_stats`` names for its pool
  (``resource_class`` tag) or ``CUSTOM_PCI_{VENDOR}_{PRODUCT}``; ``type-VF``
  rows grouped under their PF (``parent_addr``) as SRIOV_NET_VF (4c).

The tree itself is laid out by :func:`agent.shape.layout.apply_layout`, as for
any driver.
"""

from __future__ import annotations

import uuid as uuidlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.nova_import.novajson import HostCell, PciPool, host_numa_cells, pci_pools
from agent.nova_import.refusal import Refusal, RowRefused, whole_number
from drivers.records import HostResources, NumaCell, PciDevice, SriovPF, normalize_pci_address

GONE_PCI_STATUSES = frozenset({"removed", "deleted"})
"""``pci_devices.status`` of a device the host no longer offers."""

_FIX = "correct the row in nova (the resource tracker rewrites it on its next update)"


@dataclass(frozen=True, slots=True)
class NodeImport:
    """One compute node to import.

    Attributes:
        id: ``compute_nodes.id``.
        host: ``compute_nodes.host`` (the nova-compute service).
        uuid: ``compute_nodes.uuid``; None when the row has none.
        resources: the node as a driver would report it.
        ratios: ``{"cpu"|"ram"|"disk": ratio}`` the row sets (NULL or 0.0 left out).
        disk_available_least: GiB, or None.
        pci_refusals: ``pci_devices`` rows left out, one each.
    """

    id: int
    host: str
    uuid: str | None
    resources: HostResources
    ratios: Mapping[str, float]
    disk_available_least: int | None
    pci_refusals: tuple[Refusal, ...] = ()

    @property
    def nodename(self) -> str:
        """``hypervisor_hostname``: the root provider's name."""
        return self.resources.nodename


def _ratios(row: Mapping[str, Any], key: str) -> dict[str, float]:
    out = {}
    for kind in ("cpu", "ram", "disk"):
        column = f"{kind}_allocation_ratio"
        value = row.get(column)
        if value is None or value == 0.0:
            continue  # nova's "not set": the configured rule applies
        if not isinstance(value, int | float) or value < 0 or value != value:
            raise RowRefused("compute_nodes", key, column, f"{value!r} is not a ratio > 0", _FIX)
        out[kind] = float(value)
    return out


def _check_figures(row: Mapping[str, Any], key: str) -> dict[str, int]:
    """The capacity columns, checked against each other (nova keeps free = total - used)."""
    f = {
        c: whole_number("compute_nodes", key, c, row.get(c))
        for c in ("vcpus", "memory_mb", "local_gb", "vcpus_used", "memory_mb_used", "local_gb_used")
    }
    for free, total, used in (
        ("free_ram_mb", "memory_mb", "memory_mb_used"),
        ("free_disk_gb", "local_gb", "local_gb_used"),
    ):
        value = row.get(free)
        if value is not None and value != f[total] - f[used]:
            raise RowRefused(
                "compute_nodes",
                key,
                free,
                f"{value} is not {total} - {used} = {f[total] - f[used]} (inconsistent figures)",
                _FIX,
            )
    return f


def _cells(row: Mapping[str, Any], key: str, vcpus: int) -> list[HostCell]:
    try:
        cells = host_numa_cells(row.get("numa_topology"))
    except ValueError as exc:
        raise RowRefused("compute_nodes", key, "numa_topology", str(exc), _FIX) from None
    shared = sum(len(c.cpus) for c in cells)
    if shared > vcpus:
        raise RowRefused(
            "compute_nodes",
            key,
            "numa_topology",
            f"its cells hold {shared} shared CPUs, more than vcpus = {vcpus}",
            _FIX,
        )
    return cells


def _pools(row: Mapping[str, Any], key: str, devices: list[Mapping[str, Any]]) -> list[PciPool]:
    try:
        pools = pci_pools(row.get("pci_stats"))
    except ValueError as exc:
        raise RowRefused("compute_nodes", key, "pci_stats", str(exc), _FIX) from None
    known = Counter(
        (str(d["vendor_id"]).lower(), str(d["product_id"]).lower())
        for d in devices
        if d["status"] not in GONE_PCI_STATUSES
    )
    counted: Counter[tuple[str, str]] = Counter()
    for pool in pools:
        counted[(pool.vendor_id, pool.product_id)] += pool.count
    for (vendor, product), n in sorted(counted.items()):
        if n > known[(vendor, product)]:
            raise RowRefused(
                "compute_nodes",
                key,
                "pci_stats",
                f"pools count {n} available {vendor}:{product} devices but pci_devices holds "
                f"{known[(vendor, product)]} (impossible)",
                _FIX,
            )
    return pools


def node_uuid(row: Mapping[str, Any], key: str) -> str | None:
    """``compute_nodes.uuid`` in canonical form, or None when NULL.

    Raises:
        RowRefused: the column holds something that is not a UUID.
    """
    value = row.get("uuid")
    if value is None or value == "":
        return None
    try:
        return str(uuidlib.UUID(str(value)))
    except ValueError:
        raise RowRefused("compute_nodes", key, "uuid", f"{value!r} is not a UUID", _FIX) from None


def compute_node(
    row: Mapping[str, Any], pci_rows: Iterable[Mapping[str, Any]], shared_storage: bool
) -> NodeImport:
    """Map one ``compute_nodes`` row and its ``pci_devices`` rows.

    Args:
        row: the ``compute_nodes`` row.
        pci_rows: its live ``pci_devices`` rows.
        shared_storage: instance disks of this node are on shared storage
            (``--shared-storage``): no DISK_GB on the node (spec 4b).

    Returns:
        A :class:`NodeImport`; single bad ``pci_devices`` rows are left out
        and listed in ``pci_refusals``.

    Raises:
        RowRefused: the row's figures are missing, negative or inconsistent,
            or a JSON column is unparsable.
    """
    key = f"id {row.get('id')}"
    name = row.get("hypervisor_hostname")
    if not name:
        raise RowRefused("compute_nodes", key, "hypervisor_hostname", "is empty", _FIX)
    key = f"id {row['id']} ({name})"
    uuid = node_uuid(row, key)
    figures = _check_figures(row, key)
    cells = _cells(row, key, figures["vcpus"])
    devices = list(pci_rows)
    pools = _pools(row, key, devices)
    whole, pfs, refusals = pci_records(devices, pools)
    dal = row.get("disk_available_least")
    resources = HostResources(
        nodename=name,
        vcpus=figures["vcpus"],
        pcpus=sum(len(c.pcpus) for c in cells),
        memory_mb=figures["memory_mb"],
        disk_gb=figures["local_gb"],
        shared_storage=shared_storage,
        numa_cells=tuple(
            NumaCell(c.id, vcpus=len(c.cpus), pcpus=len(c.pcpus), memory_mb=c.memory_mb)
            for c in cells
        ),
        pci_devices=whole,
        sriov_pfs=pfs,
    )
    return NodeImport(
        id=row["id"],
        host=row.get("host") or name,
        uuid=uuid,
        resources=resources,
        ratios=_ratios(row, key),
        disk_available_least=dal if isinstance(dal, int) else None,
        pci_refusals=tuple(refusals),
    )


def _pool_tags(pools: list[PciPool], vendor: str, product: str) -> Mapping[str, str]:
    for pool in pools:
        if (pool.vendor_id, pool.product_id) == (vendor, product):
            return pool.tags
    return {}


def pci_records(
    devices: list[Mapping[str, Any]], pools: list[PciPool]
) -> tuple[tuple[PciDevice, ...], tuple[SriovPF, ...], list[Refusal]]:
    """Whole devices and PFs (with their VFs) from ``pci_devices`` rows.

    Returns:
        ``(whole devices, PFs, refusals)``; a row with an unparsable address
        or an unknown ``dev_type`` is a refusal, the others are kept.
    """
    whole, vfs, pf_rows, refusals = [], {}, {}, []
    for dev in devices:
        if dev["status"] in GONE_PCI_STATUSES:
            continue
        key = f"id {dev['id']} ({dev['address']})"
        try:
            address = normalize_pci_address(str(dev["address"]))
            parent = normalize_pci_address(dev["parent_addr"]) if dev.get("parent_addr") else None
        except ValueError as exc:
            refusals.append(Refusal("pci_devices", key, "address", str(exc), _FIX))
            continue
        kind = dev["dev_type"]
        if kind == "type-VF" and parent:
            vfs.setdefault(parent, []).append((address, dev))
        elif kind == "type-PF":
            pf_rows[address] = dev
        elif kind == "type-PCI":
            whole.append((address, dev))
        else:
            refusals.append(
                Refusal(
                    "pci_devices",
                    key,
                    "dev_type",
                    f"{kind!r} is not imported (type-PCI, type-PF, type-VF with parent_addr)",
                    "the agent reports it once it runs on the host, if its driver supports it",
                )
            )
    # A PF none of whose VFs nova tracks is offered whole (PF passthrough).
    whole.extend((a, d) for a, d in pf_rows.items() if a not in vfs)
    devices_out = tuple(_whole_device(a, d, pools) for a, d in sorted(whole, key=lambda x: x[0]))
    pfs = tuple(_pf(pf, sorted(vfs[pf], key=lambda x: x[0]), pools) for pf in sorted(vfs))
    return devices_out, pfs, refusals


def _whole_device(address: str, dev: Mapping[str, Any], pools: list[PciPool]) -> PciDevice:
    vendor, product = str(dev["vendor_id"]).lower(), str(dev["product_id"]).lower()
    tags = _pool_tags(pools, vendor, product)
    traits = frozenset(t.strip() for t in tags.get("traits", "").split(",") if t.strip())
    return PciDevice(
        address=address,
        vendor_id=vendor,
        product_id=product,
        numa_node=dev.get("numa_node"),
        resource_class=tags.get("resource_class") or None,
        traits=traits,
    )


def _pf(pf: str, vfs: list[tuple[str, Mapping[str, Any]]], pools: list[PciPool]) -> SriovPF:
    first = vfs[0][1]
    tags = _pool_tags(pools, str(first["vendor_id"]).lower(), str(first["product_id"]).lower())
    return SriovPF(
        address=pf,
        total_vfs=len(vfs),
        vf_addresses=tuple(a for a, _ in vfs),
        numa_node=first.get("numa_node"),
        physnet=tags.get("physical_network") or None,
    )
