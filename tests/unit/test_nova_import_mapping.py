"""nova rows -> records (issue #17): the JSON nova writes, the figures checked, the refusals.

The JSON comes from tests/fixtures/nova/nova_json.json (made by nova 34's
own objects); specs: compute-node-inventory.rst, resource-providers-allocations.txt.
"""

from __future__ import annotations

import json

import pytest

from agent.nova_import.db import CellRows
from agent.nova_import.instances import consumers, instance_record
from agent.nova_import.nodes import compute_node, pci_records
from agent.nova_import.novajson import flavor_column, host_numa_cells, instance_numa, pci_pools
from agent.nova_import.refusal import RowRefused
from agent.shape.instance_amounts import cpu_amounts
from tests.helpers.nova_cell import NODE_FIGURES, NOVA_JSON
from tests.helpers.nova_request import flavor, requested_resources


def node_row(**cols):
    row = dict(
        id=7,
        host="cn",
        hypervisor_hostname="cn",
        uuid=None,
        **NODE_FIGURES,
        disk_available_least=None,
        cpu_allocation_ratio=None,
        ram_allocation_ratio=0.0,
        disk_allocation_ratio=None,
        numa_topology=NOVA_JSON["cn1_numa_topology"],
        pci_stats=None,
    )
    row.update(cols)
    return row


def refusal(excinfo) -> str:
    return excinfo.value.refusal.line()


def test_nova_json_as_nova_writes_it():
    cells = host_numa_cells(NOVA_JSON["cn1_numa_topology"])
    assert [(c.id, len(c.cpus), len(c.pcpus), c.memory_mb) for c in cells] == [
        (0, 8, 4, 32768),
        (1, 8, 4, 32768),
    ]
    assert cells[0].pinned == {8, 9}
    pools = pci_pools(NOVA_JSON["cn1_pci_stats"])
    assert [(p.vendor_id, p.product_id, p.count) for p in pools] == [
        ("8086", "0a54", 1),
        ("10de", "1db4", 0),
        ("8086", "154c", 3),
    ]
    assert pools[1].tags["resource_class"] == "CUSTOM_GPU_V100"
    resizing = flavor_column(NOVA_JSON["flavor_resizing"])
    assert (resizing.cur.vcpus, resizing.old.vcpus, resizing.new.vcpus) == (4, 2, 4)
    assert resizing.cur.swap_mb == 1536
    assert flavor_column(NOVA_JSON["flavor_pinned"]).cpu_policy == "dedicated"
    assert instance_numa(NOVA_JSON["instance_numa_pinned"]).cells == (0,)


def test_compute_node_row_maps_to_host_resources():
    node = compute_node(node_row(disk_available_least=900, cpu_allocation_ratio=8.0), [], True)
    host = node.resources
    assert (host.nodename, host.vcpus, host.pcpus, host.memory_mb, host.disk_gb) == (
        "cn",
        16,
        8,
        65536,
        1000,
    )
    assert host.shared_storage and len(host.numa_cells) == 2
    # NULL and 0.0 ratios are nova's "unset": left to the configuration
    assert node.ratios == {"cpu": 8.0}
    assert node.disk_available_least == 900 and node.uuid is None


@pytest.mark.parametrize(
    ("cols", "says"),
    [
        ({"memory_mb": -1}, "column memory_mb: -1 is below 0"),
        ({"vcpus": None}, "column vcpus: None is not a whole number"),
        ({"free_disk_gb": 5}, "column free_disk_gb: 5 is not local_gb - local_gb_used = 1000"),
        ({"vcpus": 8}, "column numa_topology: its cells hold 16 shared CPUs, more than vcpus = 8"),
        ({"numa_topology": "{"}, "column numa_topology: unparsable JSON"),
        (
            {"numa_topology": '{"nova_object.name": "Flavor", "nova_object.data": {}}'},
            "column numa_topology: expected a nova NUMATopology object, found 'Flavor'",
        ),
        ({"cpu_allocation_ratio": -2.0}, "column cpu_allocation_ratio: -2.0 is not a ratio > 0"),
        ({"uuid": "not-a-uuid"}, "column uuid: 'not-a-uuid' is not a UUID"),
        ({"hypervisor_hostname": ""}, "compute_nodes id 7 column hypervisor_hostname: is empty"),
        (
            {"pci_stats": NOVA_JSON["cn1_pci_stats"]},
            "column pci_stats: pools count 1 available 8086:0a54 devices but pci_devices holds 0",
        ),
    ],
)
def test_inconsistent_compute_node_rows_are_refused(cols, says):
    with pytest.raises(RowRefused) as excinfo:
        compute_node(node_row(**cols), [], False)
    assert says in refusal(excinfo)


def test_a_cell_pinning_cpus_it_does_not_dedicate_is_refused():
    doc = json.loads(NOVA_JSON["cn1_numa_topology"])
    doc["nova_object.data"]["cells"][1]["nova_object.data"]["pinned_cpus"] = [3]
    with pytest.raises(RowRefused) as excinfo:
        compute_node(node_row(numa_topology=json.dumps(doc)), [], False)
    assert "NUMACell 1 pins CPUs [3] that are not among its dedicated CPUs" in refusal(excinfo)


def pci(address, kind, vendor="8086", product="0a54", **cols):
    row = dict(
        id=len(address),
        address=address,
        vendor_id=vendor,
        product_id=product,
        dev_type=kind,
        status="available",
        parent_addr=None,
        numa_node=0,
        instance_uuid=None,
    )
    row.update(cols)
    return row


def test_pci_rows_whole_devices_pfs_and_bad_rows():
    rows = [
        pci("0000:86:00.0", "type-PCI"),
        pci("0000:3b:00.0", "type-PF", product="1572"),
        pci("0000:3b:02.0", "type-VF", product="154c", parent_addr="0000:3b:00.0"),
        pci("0000:3b:02.1", "type-VF", product="154c", parent_addr="0000:3b:00.0"),
        pci("0000:5e:00.0", "type-PF", product="1572"),  # no VFs tracked: offered whole
        pci("0000:99:00.0", "type-PCI", status="removed"),
        pci("zz:00.0", "type-PCI"),
        pci("0000:77:00.0", "vdpa"),
    ]
    pools = pci_pools(NOVA_JSON["cn1_pci_stats"])
    whole, pfs, refused = pci_records(rows, pools)
    assert [d.address for d in whole] == ["0000:5e:00.0", "0000:86:00.0"]
    (pf,) = pfs
    assert (pf.address, pf.num_vfs, pf.physnet) == ("0000:3b:00.0", 2, "physnet1")
    assert [r.column for r in refused] == ["address", "dev_type"]


def cell_rows(flavor="flavor_small", numa=None, image="img", bdm_dest="local"):
    inst = dict(
        uuid="i-1",
        node="cn",
        host="cn",
        project_id="p",
        user_id="u",
        image_ref=image,
        display_name="vm",
    )
    return CellRows(
        compute_nodes={7: node_row()},
        instances={"i-1": inst},
        extras={
            "i-1": {
                "instance_uuid": "i-1",
                "flavor": NOVA_JSON.get(flavor, flavor),
                "numa_topology": numa,
            }
        },
        bdms={"i-1": [{"boot_index": 0, "destination_type": bdm_dest}]},
        pci_devices=[
            pci("0000:86:00.0", "type-PCI", status="allocated", instance_uuid="i-1"),
            pci("0000:3b:02.0", "type-VF", status="allocated", instance_uuid="i-1"),
        ],
    )


def test_instance_record_flavor_disk_and_devices():
    rows = cell_rows("flavor_medium", bdm_dest="volume")
    record = instance_record(rows.instances["i-1"], rows)
    assert (record.flavor.vcpus, record.flavor.memory_mb) == (4, 4096)
    assert record.boot_from_volume
    assert record.pci_devices == ("0000:86:00.0",)  # type-PCI only: the spec
    pinned = cell_rows("flavor_pinned", numa=NOVA_JSON["instance_numa_pinned"])
    record = instance_record(pinned.instances["i-1"], pinned)
    assert record.pinned and record.numa_cells == (0,)
    # no root mapping: volume-backed exactly when there is no image (nova's rule)
    rows = cell_rows(image=None)
    rows.bdms = {}
    assert instance_record(rows.instances["i-1"], rows).boot_from_volume


@pytest.mark.parametrize(
    ("flavor", "says"),
    [
        (None, "no current flavor ('cur') in the column"),
        (
            '{"cur": {"nova_object.name": "Flavor", "nova_object.data": {"vcpus": 0}}}',
            "flavor 'cur' vcpus = 0 is not a whole number >= 1",
        ),
        ("{{", "unparsable JSON"),
    ],
)
def test_unreadable_flavor_refuses_the_instance_only(flavor, says):
    rows = cell_rows(flavor)
    found = consumers(rows)
    assert found.by_node == {}
    (line,) = [r.line() for r in found.refusals]
    assert line.startswith("instance_extra instance_uuid i-1 column flavor: the instance's flavor")
    assert says in line


def with_specs(**specs: str):
    rows = cell_rows()
    doc = json.loads(NOVA_JSON["flavor_small"])
    doc["cur"]["nova_object.data"]["extra_specs"] = specs
    rows.extras["i-1"]["flavor"] = json.dumps(doc)
    return rows


def test_mixed_cpu_policy_without_a_mask_is_refused():
    rows = with_specs(**{"hw:cpu_policy": "mixed"})
    (line,) = [r.line() for r in consumers(rows).refusals]
    assert "hw:cpu_policy=mixed without hw:cpu_dedicated_mask" in line
    assert "heal_allocations" in line


def test_mixed_cpus_and_isolated_emulator_threads_are_imported_as_nova_asks():
    """nova's ResourceRequest for the same flavor is the judge."""
    specs = {
        "hw:cpu_policy": "mixed",
        "hw:cpu_dedicated_mask": "^0",
        "hw:emulator_threads_policy": "isolate",
    }
    rows = with_specs(**specs)
    record = instance_record(rows.instances["i-1"], rows)
    f = record.flavor
    asked = requested_resources(
        flavor(
            f.vcpus, f.memory_mb, f.root_gb, **{k.replace(":", "_", 1): v for k, v in specs.items()}
        )
    )
    assert cpu_amounts(record) == {rc: asked[rc] for rc in ("VCPU", "PCPU") if rc in asked}
    assert (record.dedicated_vcpus, record.emulator_isolated) == (f.vcpus - 1, True)
    dedicated = with_specs(
        **{"hw:cpu_policy": "dedicated", "hw:emulator_threads_policy": "isolate"}
    )
    record = instance_record(dedicated.instances["i-1"], dedicated)
    assert cpu_amounts(record) == {"PCPU": record.flavor.vcpus + 1}


def test_bad_mask_refuses_the_instance():
    rows = with_specs(**{"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "x"})
    (line,) = [r.line() for r in consumers(rows).refusals]
    assert "hw:cpu_dedicated_mask 'x'" in line
