"""``instances`` and ``migrations`` rows as the consumers the planner allocates for.

Rules (resource-providers-allocations.txt, "Proposed change"):

- VCPU and MEMORY_MB from the instance's flavor (``instance_extra.flavor``);
  PCPU instead of VCPU when ``hw:cpu_policy=dedicated`` (nova's PCPU rule),
  for the vCPUs of ``hw:cpu_dedicated_mask`` with ``hw:cpu_policy=mixed``, and
  one more PCPU with ``hw:emulator_threads_policy=isolate``
  (:mod:`drivers.flavor_specs`, after nova's ``_translate_pinning_policies``);
- DISK_GB = root_gb + ephemeral_gb + swap, root counting 0 when booted from
  volume (the root block device mapping, ``boot_index = 0``, has
  ``destination_type = volume``; with no root mapping, an instance without
  ``image_ref``: nova's ``is_volume_backed_instance``);
- PCI_DEVICE: ``pci_devices`` rows of the instance in status ``allocated``
  with ``dev_type = type-PCI``, one unit each of the device's class.

A move in progress (``migrations`` of type migration, resize or
live-migration whose status is not final) is held as nova holds it: the
**migration** consumer (``migrations.uuid``, type MIGRATION) holds the old
flavor on the source node, the instance the new flavor on the destination.
An evacuation nova has not completed leaves the instance's part on the
source node as Placement holds it (nova removes it when that node returns).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agent.model.allocations import INSTANCE, MIGRATION
from agent.nova_import.db import CellRows
from agent.nova_import.novajson import FlavorColumn, flavor_column, instance_numa
from agent.nova_import.refusal import Refusal, RowRefused
from drivers.flavor_specs import dedicated_vcpus, emulator_isolated
from drivers.records import Flavor, Instance, normalize_pci_address

MOVES_WITH_MIGRATION_CONSUMER = frozenset({"migration", "resize", "live-migration"})
"""``migrations.migration_type`` values for which nova holds the source on the migration."""


@dataclass(slots=True)
class Consumers:
    """Every consumer to import, by node.

    Attributes:
        by_node: ``{hypervisor_hostname: [Instance record]}``; a migration is
            an :class:`Instance` record whose ``uuid`` is the migration's.
        types: ``{consumer UUID: INSTANCE | MIGRATION}``.
        refusals: instances and migrations left out, one line each.
        keep_on: ``{instance UUID: {nodename}}``: nodes where Placement's part
            of the instance stays as held (the source of an unfinished evacuation).
    """

    by_node: dict[str, list[Instance]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    refusals: list[Refusal] = field(default_factory=list)
    keep_on: dict[str, set[str]] = field(default_factory=dict)

    def add(self, node: str, record: Instance, consumer_type: str) -> None:
        """Put ``record`` on ``node`` as a consumer of ``consumer_type``."""
        self.by_node.setdefault(node, []).append(record)
        self.types[record.uuid] = consumer_type


def _boot_from_volume(inst: Mapping[str, Any], bdms: list[Mapping[str, Any]]) -> bool:
    root = [b for b in bdms if b.get("boot_index") == 0]
    if root:
        return root[0].get("destination_type") == "volume"
    return not inst.get("image_ref")


def _flavors(uuid: str, extra: Mapping[str, Any] | None) -> FlavorColumn:
    if extra is None:
        raise RowRefused(
            "instance_extra",
            f"instance_uuid {uuid}",
            "",
            "no row: the instance's flavor cannot be read",
            "heal it with nova-manage placement heal_allocations, or repair instance_extra",
        )
    try:
        return flavor_column(extra.get("flavor"))
    except ValueError as exc:
        raise RowRefused(
            "instance_extra",
            f"instance_uuid {uuid}",
            "flavor",
            f"the instance's flavor cannot be read: {exc}",
            "repair the column (nova writes it from the Flavor object), then import again",
        ) from None


@dataclass(frozen=True, slots=True)
class _Cpus:
    """How the instance uses host CPUs: all dedicated, how many dedicated of a mixed one,
    isolated emulator threads, and the host cells it is pinned to."""

    pinned: bool
    dedicated: int
    isolated: bool
    cells: tuple[int, ...]


def _cpus(uuid: str, flavors: FlavorColumn, extra: Mapping[str, Any], flavor: Flavor) -> _Cpus:
    try:
        numa = instance_numa(extra.get("numa_topology"))
    except ValueError as exc:
        raise RowRefused(
            "instance_extra", f"instance_uuid {uuid}", "numa_topology", str(exc), "repair it"
        ) from None
    specs = flavors.specs_of(flavor)
    # The instance's NUMA topology also carries a policy an image asked for.
    policy = numa.cpu_policy or specs.get("hw:cpu_policy") or flavors.cpu_policy
    try:
        dedicated = dedicated_vcpus({**specs, "hw:cpu_policy": policy or ""}, flavor.vcpus)
    except ValueError as exc:
        raise RowRefused(
            "instance_extra", f"instance_uuid {uuid}", "flavor", str(exc), "repair the flavor"
        ) from None
    if policy == "mixed" and not dedicated:
        raise RowRefused(
            "instance_extra",
            f"instance_uuid {uuid}",
            "flavor",
            "hw:cpu_policy=mixed without hw:cpu_dedicated_mask (or a realtime mask): "
            "which vCPUs are dedicated is unknown",
            "heal this instance with nova-manage placement heal_allocations",
        )
    pinned = policy == "dedicated"
    isolated = bool(emulator_isolated(specs)) and bool(dedicated)
    return _Cpus(pinned, (dedicated or 0) if policy == "mixed" else 0, isolated, numa.cells)


def instance_record(
    inst: Mapping[str, Any], rows: CellRows, flavor: Flavor | None = None, uuid: str = ""
) -> Instance:
    """The :class:`Instance` record of an ``instances`` row.

    Args:
        inst: the ``instances`` row.
        rows: the cell's rows (its ``instance_extra``, mappings, PCI devices).
        flavor: the flavor to allocate (a move's old or new one); None: ``cur``.
        uuid: the consumer UUID when it is not the instance's (a migration).

    Raises:
        RowRefused: no owner, or the flavor or NUMA topology cannot be read.
    """
    iuuid = inst["uuid"]
    if not inst.get("project_id") or not inst.get("user_id"):
        raise RowRefused(
            "instances", f"uuid {iuuid}", "project_id", "no owner (project_id/user_id)", "repair it"
        )
    extra = rows.extras.get(iuuid)
    flavors = _flavors(iuuid, extra)
    assert extra is not None  # _flavors refused a missing row
    flavor = flavor or flavors.cur
    cpus = _cpus(iuuid, flavors, extra, flavor)
    devices = tuple(
        normalize_pci_address(d["address"])
        for d in rows.pci_devices
        if d["instance_uuid"] == iuuid
        and d["status"] == "allocated"
        and d["dev_type"] == "type-PCI"
    )
    return Instance(
        uuid=uuid or iuuid,
        project_id=inst["project_id"],
        user_id=inst["user_id"],
        flavor=flavor,
        boot_from_volume=_boot_from_volume(inst, rows.bdms.get(iuuid, [])),
        pinned=cpus.pinned,
        dedicated_vcpus=cpus.dedicated,
        emulator_isolated=cpus.isolated,
        numa_cells=cpus.cells,
        pci_devices=() if uuid else devices,
        name=inst.get("display_name") or "",
    )


def _migration(mig: Mapping[str, Any], rows: CellRows, out: Consumers) -> set[str]:
    """Add one move in progress; the instance UUIDs it places (so not placed again)."""
    iuuid = mig["instance_uuid"]
    inst = rows.instances.get(iuuid)
    key = f"id {mig['id']}"
    if mig.get("migration_type") == "evacuation" and mig.get("source_node"):
        # nova keeps the instance's allocation on the source until that compute
        # starts again: the import leaves it as Placement holds it.
        out.keep_on.setdefault(iuuid, set()).add(mig["source_node"])
        return set()
    if mig.get("migration_type") not in MOVES_WITH_MIGRATION_CONSUMER or mig.get("cross_cell_move"):
        return set()  # cross-cell moves: the instance row alone says where
    if inst is None or not mig.get("uuid"):
        raise RowRefused(
            "migrations",
            key,
            "uuid" if inst else "instance_uuid",
            "no migration UUID" if inst else f"instance {iuuid} is not a live instance",
            "finish or clean the migration in nova (confirm, revert or abort)",
        )
    flavors = _flavors(iuuid, rows.extras.get(iuuid))
    source = instance_record(inst, rows, flavors.old or flavors.cur, uuid=mig["uuid"])
    if mig.get("project_id") and mig.get("user_id"):
        source = _owned(source, mig["project_id"], mig["user_id"])
    dest = instance_record(inst, rows, flavors.new or flavors.cur)
    out.add(mig["source_node"], source, MIGRATION)
    out.add(mig["dest_node"], dest, INSTANCE)
    return {iuuid}


def _owned(record: Instance, project: str, user: str) -> Instance:
    return replace(record, project_id=project, user_id=user)


def consumers(rows: CellRows) -> Consumers:
    """Every instance and move in progress on the cell's nodes read, as consumers.

    One bad row costs a refusal in ``Consumers.refusals``; the others are kept.
    """
    out = Consumers()
    moved: set[str] = set()
    for mig in rows.migrations:
        try:
            moved |= _migration(mig, rows, out)
        except RowRefused as exc:
            out.refusals.append(exc.refusal)
            moved.add(mig["instance_uuid"])
    nodes = {r["hypervisor_hostname"] for r in rows.compute_nodes.values()}
    for uuid, inst in rows.instances.items():
        if uuid in moved or inst.get("node") not in nodes:
            continue
        try:
            out.add(inst["node"], instance_record(inst, rows), INSTANCE)
        except RowRefused as exc:
            out.refusals.append(exc.refusal)
    return out
