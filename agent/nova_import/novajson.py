"""nova's JSON columns: versioned objects as nova serialises them.

nova stores objects as ``{"nova_object.name": ..., "nova_object.data": {...}}``
(oslo.versionedobjects' primitive form, ``obj_to_primitive``):

- ``compute_nodes.numa_topology``: ``NUMATopology`` of ``NUMACell`` (nova
  1.5: ``cpuset`` shared CPUs, ``pcpuset`` dedicated CPUs, ``memory`` MiB,
  ``pinned_cpus``);
- ``compute_nodes.pci_stats``: ``PciDevicePoolList`` of ``PciDevicePool``
  (``vendor_id``, ``product_id``, ``numa_node``, ``count``, ``tags``);
- ``instance_extra.flavor``: ``{"cur": Flavor, "old": Flavor|null, "new": Flavor|null}``;
- ``instance_extra.numa_topology``: ``InstanceNUMATopology`` of
  ``InstanceNUMACell`` (``id`` = the host cell, ``cpu_policy``).

Every parser raises ``ValueError`` with what is wrong; the caller names the
row and column (:class:`agent.nova_import.refusal.RowRefused`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from drivers.records import Flavor


def _load(text: str | None) -> Any:
    if text is None or not str(text).strip():
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"unparsable JSON ({exc})") from None


def unwrap(value: Any, name: str) -> Mapping[str, Any]:
    """The ``nova_object.data`` of a ``nova_object.name == name`` envelope.

    Raises:
        ValueError: not such an object.
    """
    if not isinstance(value, Mapping) or value.get("nova_object.name") != name:
        got = value.get("nova_object.name") if isinstance(value, Mapping) else type(value).__name__
        raise ValueError(f"expected a nova {name} object, found {got!r}")
    data = value.get("nova_object.data")
    if not isinstance(data, Mapping):
        raise ValueError(f"nova {name} object has no nova_object.data")
    return data


def _int(data: Mapping[str, Any], key: str, what: str, minimum: int = 0) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what} {key} = {value!r} is not a whole number >= {minimum}")
    return value


def _cpus(data: Mapping[str, Any], key: str, what: str) -> frozenset[int]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(c, int) and c >= 0 for c in value):
        raise ValueError(f"{what} {key} = {value!r} is not a list of CPU numbers")
    return frozenset(value)


@dataclass(frozen=True, slots=True)
class HostCell:
    """One cell of ``compute_nodes.numa_topology``.

    Attributes:
        id: the cell number.
        cpus: shared CPUs (``cpuset``): VCPU.
        pcpus: dedicated CPUs (``pcpuset``): PCPU.
        memory_mb: MiB.
        pinned: dedicated CPUs pinned to instances now.
    """

    id: int
    cpus: frozenset[int]
    pcpus: frozenset[int]
    memory_mb: int
    pinned: frozenset[int] = frozenset()


def host_numa_cells(text: str | None) -> list[HostCell]:
    """``compute_nodes.numa_topology`` -> cells (empty for NULL: no NUMA reported).

    Raises:
        ValueError: unparsable, not a NUMATopology, or a cell's figures are not
            numbers; a cell pins CPUs it does not dedicate (impossible).
    """
    doc = _load(text)
    if doc is None:
        return []
    cells = unwrap(doc, "NUMATopology").get("cells")
    if not isinstance(cells, list):
        raise ValueError("NUMATopology has no list of cells")
    out = []
    for raw in cells:
        data = unwrap(raw, "NUMACell")
        what = f"NUMACell {data.get('id')!r}"
        cell = HostCell(
            id=_int(data, "id", what),
            cpus=_cpus(data, "cpuset", what),
            pcpus=_cpus(data, "pcpuset", what),
            memory_mb=_int(data, "memory", what),
            pinned=_cpus(data, "pinned_cpus", what),
        )
        if not cell.pinned <= cell.pcpus:
            raise ValueError(
                f"{what} pins CPUs {sorted(cell.pinned - cell.pcpus)} that are not among "
                f"its dedicated CPUs {sorted(cell.pcpus)}"
            )
        out.append(cell)
    if len({c.id for c in out}) != len(out):
        raise ValueError("NUMATopology lists a cell id twice")
    return sorted(out, key=lambda c: c.id)


@dataclass(frozen=True, slots=True)
class PciPool:
    """One pool of ``compute_nodes.pci_stats``: available devices of one kind.

    Attributes:
        vendor_id: 4 hex digits, lower-case.
        product_id: 4 hex digits, lower-case.
        numa_node: the cell, or None.
        count: devices available now.
        tags: ``dev_type``, ``physical_network``, ``resource_class``, ``traits``, ...
    """

    vendor_id: str
    product_id: str
    numa_node: int | None
    count: int
    tags: Mapping[str, str] = field(default_factory=dict)


def pci_pools(text: str | None) -> list[PciPool]:
    """``compute_nodes.pci_stats`` -> pools (empty for NULL).

    Raises:
        ValueError: unparsable, not a PciDevicePoolList, or a negative count.
    """
    doc = _load(text)
    if doc is None:
        return []
    pools = unwrap(doc, "PciDevicePoolList").get("objects")
    if not isinstance(pools, list):
        raise ValueError("PciDevicePoolList has no list of objects")
    out = []
    for raw in pools:
        data = unwrap(raw, "PciDevicePool")
        tags = data.get("tags") or {}
        if not isinstance(tags, Mapping):
            raise ValueError(f"PciDevicePool tags = {tags!r} is not an object")
        numa = data.get("numa_node")
        out.append(
            PciPool(
                vendor_id=str(data.get("vendor_id", "")).lower(),
                product_id=str(data.get("product_id", "")).lower(),
                numa_node=numa if isinstance(numa, int) else None,
                count=_int(data, "count", "PciDevicePool"),
                tags={str(k): str(v) for k, v in tags.items()},
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class FlavorColumn:
    """``instance_extra.flavor``.

    Attributes:
        cur: the flavor the instance has now.
        old: the flavor before a resize in progress, or None.
        new: the flavor after a resize in progress, or None.
        cpu_policy: ``hw:cpu_policy`` of ``cur``'s extra specs (``dedicated``,
            ``shared``, ``mixed``), or None.
        specs: the extra specs of ``cur``, ``old`` and ``new``, in that order
            (empty for a flavor absent).
    """

    cur: Flavor
    old: Flavor | None = None
    new: Flavor | None = None
    cpu_policy: str | None = None
    specs: tuple[Mapping[str, str], ...] = ({}, {}, {})

    def specs_of(self, flavor: Flavor) -> Mapping[str, str]:
        """The extra specs of ``flavor`` (``cur``, ``old`` or ``new``, compared by value)."""
        for candidate, specs in zip((self.cur, self.old, self.new), self.specs, strict=True):
            if candidate == flavor:
                return specs
        return self.specs[0]


def _flavor(raw: Any, key: str) -> tuple[Flavor, Mapping[str, Any]]:
    data = unwrap(raw, "Flavor")
    what = f"flavor {key!r}"
    extra = data.get("extra_specs") or {}
    if not isinstance(extra, Mapping):
        raise ValueError(f"{what} extra_specs is not an object")
    flavor = Flavor(
        vcpus=_int(data, "vcpus", what, 1),
        memory_mb=_int(data, "memory_mb", what, 1),
        root_gb=_int(data, "root_gb", what),
        ephemeral_gb=_int(data, "ephemeral_gb", what),
        swap_mb=_int(data, "swap", what),
        name=str(data.get("name") or ""),
    )
    return flavor, extra


def flavor_column(text: str | None) -> FlavorColumn:
    """``instance_extra.flavor`` -> :class:`FlavorColumn`.

    Raises:
        ValueError: NULL, unparsable, no ``cur`` flavor, or a flavor figure
            that is not a whole number (vcpus and memory_mb at least 1).
    """
    doc = _load(text)
    if not isinstance(doc, Mapping) or doc.get("cur") is None:
        raise ValueError("no current flavor ('cur') in the column")
    cur, extra = _flavor(doc["cur"], "cur")
    old, old_extra = _flavor(doc["old"], "old") if doc.get("old") else (None, {})
    new, new_extra = _flavor(doc["new"], "new") if doc.get("new") else (None, {})
    policy = extra.get("hw:cpu_policy")
    specs = tuple({str(k): str(v) for k, v in e.items()} for e in (extra, old_extra, new_extra))
    return FlavorColumn(cur, old, new, str(policy) if policy else None, specs)


@dataclass(frozen=True, slots=True)
class InstanceNuma:
    """``instance_extra.numa_topology``: the host cells an instance is pinned to."""

    cells: tuple[int, ...] = ()
    cpu_policy: str | None = None


def instance_numa(text: str | None) -> InstanceNuma:
    """``instance_extra.numa_topology`` -> :class:`InstanceNuma` (empty for NULL).

    Raises:
        ValueError: unparsable or not an InstanceNUMATopology.
    """
    doc = _load(text)
    if doc is None:
        return InstanceNuma()
    cells = unwrap(doc, "InstanceNUMATopology").get("cells")
    if not isinstance(cells, list):
        raise ValueError("InstanceNUMATopology has no list of cells")
    ids, policies = [], set()
    for raw in cells:
        data = unwrap(raw, "InstanceNUMACell")
        ids.append(_int(data, "id", "InstanceNUMACell"))
        if data.get("cpu_policy"):
            policies.add(str(data["cpu_policy"]))
    policy = "mixed" if len(policies) > 1 else next(iter(policies), None)
    return InstanceNuma(tuple(sorted(set(ids))), policy)
