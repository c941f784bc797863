"""``compute-agent discover --devices``: every PCI device, its names, and why it is offered or not.

The JSON format (``compute-agent.devices/1``) is documented in docs/discover.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from agent.cli.output import Output
from agent.cli.pci_ids import PciIds
from agent.shape.pci import pci_resource_class
from drivers.device_views import DeviceView

JSON_FORMAT = "compute-agent.devices/1"

HEADERS = (
    "ADDRESS",
    "DEVICE",
    "CLASS",
    "DRIVER",
    "NETDEV",
    "NUMA",
    "VFS",
    "MDEV TYPES",
    "OFFERED AS",
    "WHY",
)


def offered_as(view: DeviceView) -> str | None:
    """What the device is counted as in Placement (the layout's default class filled in)."""
    if not view.offered:
        return None
    if view.offered_as is None and view.vendor_id and view.product_id:
        return pci_resource_class(view.vendor_id, view.product_id)
    return view.offered_as


def device_document(view: DeviceView, names: PciIds) -> dict[str, Any]:
    """One device as the JSON document shows it: the view's fields plus names."""
    doc = asdict(view)
    doc["netdevs"] = list(view.netdevs)
    doc["mdev_types"] = list(view.mdev_types)
    doc["offered_as"] = offered_as(view)
    doc["vendor_name"] = names.vendor(view.vendor_id) if view.vendor_id else ""
    doc["product_name"] = names.device(view.vendor_id, view.product_id) if view.vendor_id else ""
    doc["class_name"] = names.class_name(view.class_code) if view.class_code else ""
    return doc


def devices_document(
    nodes: Sequence[tuple[str, Sequence[DeviceView]]], driver: str, names: PciIds
) -> dict[str, Any]:
    """The ``--devices --format json`` document."""
    return {
        "format": JSON_FORMAT,
        "driver": driver,
        "pci_ids": names.path,
        "nodes": [
            {"nodename": n, "devices": [device_document(v, names) for v in views]}
            for n, views in nodes
        ],
    }


def device_label(doc: dict[str, Any]) -> str:
    """``vendor product (vvvv:pppp)`` as ``lspci -nn`` writes it; the id alone without names.

    The numeric id stays beside the name: it is what ``[pci] device_spec``
    and the ``CUSTOM_PCI_{VENDOR}_{PRODUCT}`` class are written with, and
    what a database older than the device still knows it by.
    """
    if not doc["vendor_id"]:
        return "-"
    ident = f"{doc['vendor_id']}:{doc['product_id']}"
    name = " ".join(p for p in (doc["vendor_name"], doc["product_name"]) if p)
    return f"{name} ({ident})" if name else ident


def _row(doc: dict[str, Any]) -> list[str]:
    klass = doc["class_code"] or "-"
    if doc["class_name"]:
        klass = f"{klass} {doc['class_name']}"
    vfs = f"{doc['num_vfs']}/{doc['total_vfs']}" if doc["total_vfs"] else "-"
    if doc["physfn"]:
        vfs = f"VF of {doc['physfn']}"
    numa = "-" if doc["numa_node"] is None else str(doc["numa_node"])
    return [
        doc["address"],
        device_label(doc),
        klass,
        doc["driver"] or "-",
        ", ".join(doc["netdevs"]) or "-",
        numa,
        vfs,
        ", ".join(doc["mdev_types"]) or "-",
        doc["offered_as"] or "no",
        doc["reason"],
    ]


def render_devices(document: dict[str, Any], out: Output) -> None:
    """The devices of each node as a table (tab-separated lines in a pipe)."""
    for node in document["nodes"]:
        rows = [_row(d) for d in node["devices"]]
        out.table(f"PCI devices of {node['nodename']}", HEADERS, rows)
