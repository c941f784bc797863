"""A real nova cell database for the import tests: nova 34's schema, realistic rows.

The schema is tests/fixtures/nova/cell_schema.sql (made by nova's own
migrations, see the README there); the JSON columns are nova_json.json (made
by nova's own objects). :func:`build_cell` fills one SQLite file:

======================  ===========================================================
row                     what it exercises
======================  ===========================================================
``{p}-cn1``             uuid set; 2 NUMA cells (8 shared + 4 dedicated CPUs each);
                        ratios 4.0/1.5/1.0; disk_available_least 900; PCI: two
                        8086:0a54 (type-PCI), one 10de:1db4 (resource_class
                        CUSTOM_GPU_V100), a PF 0000:3b:00.0 with 4 VFs
``{p}-cn2``             uuid NULL; ratios NULL; shared storage in the tests
``i_gpu``, ``i_pci``    on cn1, each holding one allocated type-PCI device
``i_bfv``               on cn1, boot from volume (root 0: ephemeral 10 + swap 2 GiB)
``i_pinned``            on cn1, hw:cpu_policy=dedicated, NUMA cell 0 (PCPU)
``i_vf``                on cn1, an allocated VF (not counted: spec, SR-IOV later)
``i_shared``            on cn2 (shared storage), image-backed
``i_resize``            resize cn1 -> cn2 in progress (status finished): migration
                        ``mig`` holds the old flavor on cn1, the instance the new on cn2;
                        ``mig_done`` (confirmed) is finished
``i_deleted``           soft-deleted: never read
======================  ===========================================================
"""

from __future__ import annotations

import json
import sqlite3
import uuid as uuidlib
from pathlib import Path
from typing import Any

from tests.helpers.paths import NOVA

NOVA_JSON: dict[str, str] = json.loads((NOVA / "nova_json.json").read_text())


def insert(con: sqlite3.Connection, table: str, **cols: Any) -> int:
    """INSERT one row; its id."""
    names = ", ".join(cols)
    marks = ", ".join("?" for _ in cols)
    cur = con.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", tuple(cols.values()))
    return cur.lastrowid


def create_schema(con: sqlite3.Connection, name: str) -> None:
    """The schema ``tests/fixtures/nova/<name>`` in ``con``, in one transaction.

    In SQLite's autocommit mode each of its ~200 statements would be a transaction of
    its own, each synced to disk (seconds per database on a busy disk); one
    transaction makes the same tables and indexes with one sync.
    """
    con.executescript("BEGIN;\n" + (NOVA / name).read_text() + "\nCOMMIT;\n")


NODE_FIGURES = dict(
    vcpus=16,
    memory_mb=65536,
    local_gb=1000,
    vcpus_used=0,
    memory_mb_used=512,
    local_gb_used=0,
    free_ram_mb=65024,
    free_disk_gb=1000,
)
"""The capacity and usage columns of a test ``compute_nodes`` row (a 16-vCPU, 64 GiB host)."""


def _node(con, name: str, uuid: str | None, **cols) -> int:
    row = dict(
        host=name,
        hypervisor_hostname=name,
        uuid=uuid,
        **NODE_FIGURES,
        hypervisor_type="QEMU",
        hypervisor_version=8002000,
        cpu_info='{"arch": "x86_64", "model": "Cascadelake-Server", "vendor": "Intel"}',
        deleted=0,
        running_vms=0,
        mapped=1,
    )
    row.update(cols)
    return insert(con, "compute_nodes", **row)


def add_instance(con, uuid: str, node: str, flavor: str, *, image: str | None = "img", **extra):
    """An instance on ``node``: its row, instance_extra (flavor by fixture key), root BDM."""
    insert(
        con,
        "instances",
        uuid=uuid,
        host=node,
        node=node,
        project_id="proj-a",
        user_id="user-a",
        image_ref=image,
        vm_state="active",
        display_name=f"vm-{uuid[:8]}",
        deleted=extra.pop("deleted", 0),
    )
    insert(
        con,
        "instance_extra",
        instance_uuid=uuid,
        flavor=NOVA_JSON[flavor] if flavor in NOVA_JSON else flavor,
        numa_topology=extra.pop("numa", None),
        deleted=0,
    )
    destination = "volume" if image is None else "local"
    insert(
        con,
        "block_device_mapping",
        instance_uuid=uuid,
        boot_index=0,
        source_type="volume" if image is None else "image",
        destination_type=destination,
        uuid=str(uuidlib.uuid4()),
        deleted=0,
    )


def _pci(con, node_id: int, address: str, vendor: str, product: str, kind: str, **cols) -> None:
    row = dict(
        compute_node_id=node_id,
        address=address,
        vendor_id=vendor,
        product_id=product,
        dev_type=kind,
        label=f"label_{vendor}_{product}",
        status="available",
        dev_id=f"pci_{address.replace(':', '_').replace('.', '_')}",
        deleted=0,
        numa_node=1,
        uuid=str(uuidlib.uuid4()),
    )
    row.update(cols)
    insert(con, "pci_devices", **row)


def build_cell(path: Path, prefix: str) -> dict[str, str]:
    """Create the cell database at ``path``; the names and UUIDs of its rows.

    Returns:
        ``{"cn1", "cn2", "cn1_uuid", "i_gpu", ..., "mig"}``.
    """
    ids = {k: str(uuidlib.uuid4()) for k in ("cn1_uuid", "i_gpu", "i_pci", "i_bfv", "i_pinned")}
    ids |= {k: str(uuidlib.uuid4()) for k in ("i_vf", "i_shared", "i_resize", "i_deleted", "mig")}
    ids["mig_done"] = str(uuidlib.uuid4())
    cn1, cn2 = f"{prefix}-cn1", f"{prefix}-cn2"
    ids |= {"cn1": cn1, "cn2": cn2}
    con = sqlite3.connect(path)
    create_schema(con, "cell_schema.sql")
    n1 = _node(
        con,
        cn1,
        ids["cn1_uuid"],
        vcpus_used=12,
        memory_mb_used=22528,
        free_ram_mb=65536 - 22528,
        local_gb_used=132,
        free_disk_gb=1000 - 132,
        disk_available_least=900,
        cpu_allocation_ratio=4.0,
        ram_allocation_ratio=1.5,
        disk_allocation_ratio=1.0,
        numa_topology=NOVA_JSON["cn1_numa_topology"],
        pci_stats=NOVA_JSON["cn1_pci_stats"],
    )
    _node(
        con,
        cn2,
        None,
        local_gb=500,
        free_disk_gb=500,
        numa_topology=NOVA_JSON["cn2_numa_topology"],
        pci_stats=NOVA_JSON["cn2_pci_stats"],
    )
    _pci(con, n1, "0000:86:00.0", "8086", "0a54", "type-PCI", numa_node=0)
    _pci(
        con,
        n1,
        "0000:87:00.0",
        "8086",
        "0a54",
        "type-PCI",
        numa_node=0,
        status="allocated",
        instance_uuid=ids["i_pci"],
    )
    _pci(
        con,
        n1,
        "0000:af:00.0",
        "10de",
        "1db4",
        "type-PCI",
        status="allocated",
        instance_uuid=ids["i_gpu"],
    )
    _pci(con, n1, "0000:3b:00.0", "8086", "1572", "type-PF", status="unavailable")
    for fn in range(4):
        _pci(
            con,
            n1,
            f"0000:3b:02.{fn}",
            "8086",
            "154c",
            "type-VF",
            parent_addr="0000:3b:00.0",
            status="allocated" if fn == 0 else "available",
            instance_uuid=ids["i_vf"] if fn == 0 else None,
        )
    add_instance(con, ids["i_gpu"], cn1, "flavor_gpu")
    add_instance(con, ids["i_pci"], cn1, "flavor_small")
    add_instance(con, ids["i_bfv"], cn1, "flavor_medium", image=None)
    add_instance(con, ids["i_pinned"], cn1, "flavor_pinned", numa=NOVA_JSON["instance_numa_pinned"])
    add_instance(con, ids["i_vf"], cn1, "flavor_small")
    add_instance(con, ids["i_shared"], cn2, "flavor_small")
    add_instance(con, ids["i_resize"], cn2, "flavor_resizing")
    add_instance(con, ids["i_deleted"], cn1, "flavor_small", deleted=1)
    insert(
        con,
        "migrations",
        uuid=ids["mig"],
        instance_uuid=ids["i_resize"],
        source_compute=cn1,
        source_node=cn1,
        dest_compute=cn2,
        dest_node=cn2,
        dest_host="10.0.0.2",
        status="finished",
        migration_type="resize",
        project_id="proj-a",
        user_id="user-a",
        deleted=0,
        hidden=0,
        cross_cell_move=0,
    )
    insert(
        con,
        "migrations",
        uuid=ids["mig_done"],
        instance_uuid=ids["i_pci"],
        source_node=cn2,
        dest_node=cn1,
        status="confirmed",
        migration_type="migration",
        deleted=0,
    )
    con.commit()
    con.close()
    return ids


def build_api(path: Path, aggregates: dict[str, list[str]]) -> None:
    """nova's API database at ``path`` with host aggregates ``{aggregate UUID: [host, ...]}``."""
    con = sqlite3.connect(path)
    create_schema(con, "api_schema.sql")
    for n, (agg, hosts) in enumerate(sorted(aggregates.items())):
        agg_id = insert(con, "aggregates", uuid=agg, name=f"agg-{n}-{agg[:8]}")
        for host in hosts:
            insert(con, "aggregate_hosts", host=host, aggregate_id=agg_id)
    con.commit()
    con.close()


def execute(path: Path, sql: str, *params: Any) -> None:
    """Run one statement on the database at ``path`` (a test corrupting a row)."""
    con = sqlite3.connect(path)
    con.execute(sql, params)
    con.commit()
    con.close()
