"""The JSON schema of a fake host description (docs/fake-host.md), one part per section.

The schema checks structure and types: required keys, no unknown keys,
counts that are not negative, hex ids of four digits. What a schema cannot
say (unique addresses, devices that instances name, VF counts against
``total_vfs``) is checked by :mod:`drivers.fake_host.nodes` while reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_COUNT = {"type": "integer", "minimum": 0}
_STRS = {"type": "array", "items": {"type": "string", "minLength": 1}}
_HEX4 = {"type": "string", "pattern": "^[0-9a-fA-F]{4}$"}
_NUMA = {"type": ["integer", "null"], "minimum": 0}
_NAME = {"type": "string", "minLength": 1}


def _obj(props: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    """An object with exactly ``props`` (no others), ``required`` among them."""
    return {
        "type": "object",
        "properties": props,
        "required": list(required),
        "additionalProperties": False,
    }


def _array(items: dict[str, Any], min_items: int = 0) -> dict[str, Any]:
    """A list whose every item matches ``items``, at least ``min_items`` long."""
    schema: dict[str, Any] = {"type": "array", "items": items}
    if min_items:
        schema["minItems"] = min_items
    return schema


NUMA_CELL = _obj(
    {
        "id": _COUNT,
        "vcpus": _COUNT,
        "pcpus": _COUNT,
        "memory_mb": _COUNT,
        "hugepages": {
            "type": "object",
            "patternProperties": {"^[0-9]+$": _COUNT},
            "additionalProperties": False,
        },
    },
    ["id", "memory_mb"],
)
"""One entry of ``numa_cells``: hugepages are keyed by page size in KiB."""

PCI_DEVICE = _obj(
    {
        "address": {"type": "string"},
        "vendor_id": _HEX4,
        "product_id": _HEX4,
        "numa_node": _NUMA,
        "resource_class": _NAME,
        "traits": _STRS,
    },
    ["address", "vendor_id", "product_id"],
)
"""One entry of ``pci_devices``: a whole device for passthrough."""

SRIOV_PF = _obj(
    {
        "address": {"type": "string"},
        "total_vfs": {"type": "integer", "minimum": 1},
        "num_vfs": _COUNT,
        "vf_offset": {"type": "integer", "minimum": 1},
        "vf_stride": {"type": "integer", "minimum": 1},
        "numa_node": _NUMA,
        "physnet": _NAME,
        "netdev": _NAME,
        "traits": _STRS,
        "vf_vendor_id": _HEX4,
        "vf_product_id": _HEX4,
        "resource_class": _NAME,
    },
    ["address", "total_vfs"],
)
"""One entry of ``sriov_pfs``: a physical function and how its VFs are numbered."""

MDEV_TYPE = _obj(
    {
        "id": _NAME,
        "name": {"type": "string"},
        "available_instances": _COUNT,
        "device_api": {"type": "string"},
    },
    ["id", "available_instances"],
)
"""One mdev type a GPU offers."""

GPU = _obj(
    {
        "address": {"type": "string"},
        "numa_node": _NUMA,
        "mdev_types": _array(MDEV_TYPE, min_items=1),
        "mdevs": _array(
            _obj({"uuid": {"type": "string"}, "type": {"type": "string"}}, ["uuid", "type"])
        ),
    },
    ["address", "mdev_types"],
)
"""One entry of ``gpus``: its mdev types and the mdevs already created on it."""

FLAVOR = _obj(
    {
        "name": {"type": "string"},
        "vcpus": _COUNT,
        "memory_mb": _COUNT,
        "root_gb": _COUNT,
        "ephemeral_gb": _COUNT,
        "swap_mb": _COUNT,
    },
    ["vcpus", "memory_mb"],
)
"""An instance's flavor: the amounts its allocation is computed from."""

INSTANCE = _obj(
    {
        "uuid": {"type": "string"},
        "name": {"type": "string"},
        "project_id": _NAME,
        "user_id": _NAME,
        "flavor": FLAVOR,
        "boot_from_volume": {"type": "boolean"},
        "pinned": {"type": "boolean"},
        "numa_cells": _array(_COUNT),
        "pci_devices": _array({"type": "string"}),
        "mdevs": _array({"type": "string"}),
    },
    ["uuid", "project_id", "user_id", "flavor"],
)
"""One entry of ``instances``: flavor, and the devices, mdevs and cells it holds."""

NODE = _obj(
    {
        "nodename": _NAME,
        "cpu": _obj({"vcpus": _COUNT, "pcpus": _COUNT, "traits": _STRS}),
        "memory_mb": _COUNT,
        "disk_gb": _COUNT,
        "shared_storage": {"type": "boolean"},
        "traits": _STRS,
        "numa_cells": _array(NUMA_CELL),
        "pci_devices": _array(PCI_DEVICE),
        "sriov_pfs": _array(SRIOV_PF),
        "gpus": _array(GPU),
        "instances": _array(INSTANCE),
    },
    ["nodename", "memory_mb"],
)
"""One entry of ``nodes``: a compute node, its hardware and its instances."""

SCHEMA: dict[str, Any] = _obj({"nodes": _array(NODE, min_items=1)}, ["nodes"])
"""A whole description: at least one node."""
