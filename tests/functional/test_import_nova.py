"""``compute-agent import-nova`` against a real Placement (issue #17).

A real nova cell database (nova 34's schema from its own migrations, rows
with nova's own JSON: tests/helpers/nova_cell.py) is imported into the embedded
Placement; Placement is read back over plain HTTP.
Specs: compute-node-inventory.rst, resource-providers-allocations.txt.
"""

from __future__ import annotations

import sqlite3
import uuid as uuidlib

import pytest

from agent.cli.commands.import_nova import gone_lookup, map_nodes, read_nova
from agent.cli.main import build_parser, main
from agent.nova_import.flow import import_cell
from agent.nova_import.instances import consumers
from agent.placement.report import ReportClient
from agent.shape.policy import policy_from_conf
from agent.state.store import StateStore
from tests.helpers.conf import make_conf
from tests.helpers.names import unique
from tests.helpers.nova_cell import add_instance, build_api, build_cell, execute, insert
from tests.helpers.placement_http import http, http_get, put_allocations


def do_import(embedded, tmp_path, cell, *extra, dry=False, numa=False, **groups):
    """One import as the command runs it; (result, client) for request counts."""
    argv = ["import-nova", "--cell-db", f"sqlite:///{cell}", *extra] + (["--dry-run"] * dry)
    args = build_parser().parse_args(argv)
    rows, bad = read_nova(args)
    assert bad is None
    refusals = []
    nodes = map_nodes(rows, set(args.shared_storage), refusals)
    found = consumers(rows)
    conf = make_conf(tmp_path, numa={"model_in_placement": numa}, **groups)
    client = embedded.client()
    state = StateStore(tmp_path / f"import-state-{uuidlib.uuid4().hex[:6]}")
    res = import_cell(
        ReportClient(client, state, sleep=lambda s: None),
        nodes,
        found,
        policy_from_conf(conf),
        rows.aggregates,
        dry,
        gone=gone_lookup(f"sqlite:///{cell}"),
    )
    res.refusals[:0] = refusals + found.refusals
    return res, client


def writes(client) -> int:
    return sum(n for (method, _), n in client.counts.items() if method != "GET")


def provider(base, name):
    (found,) = http_get(base, "/resource_providers", name=name)["resource_providers"]
    return found


def inventories(base, uuid):
    return http_get(base, f"/resource_providers/{uuid}/inventories")["inventories"]


def allocations(base, consumer):
    body = http_get(base, f"/allocations/{consumer}")
    return {rp: a["resources"] for rp, a in body["allocations"].items()}, body


@pytest.fixture
def cell(tmp_path):
    path = tmp_path / "nova_cell1.sqlite"
    ids = build_cell(path, unique("nova"))
    return path, ids


def gpu_provider(base: str, name: str, root: str, traits: list[str], uuid: str = "") -> str:
    """A GPU's provider under ``root`` as nova (or an earlier agent) left it: 4 VGPU, ``traits``."""
    uuid = uuid or str(uuidlib.uuid4())
    body = {"name": name, "uuid": uuid, "parent_provider_uuid": root}
    http(base, "POST", "/resource_providers", body)
    inventories = {"resource_provider_generation": 0, "inventories": {"VGPU": {"total": 4}}}
    http(base, "PUT", f"/resource_providers/{uuid}/inventories", inventories)
    body = {"resource_provider_generation": 1, "traits": traits}
    http(base, "PUT", f"/resource_providers/{uuid}/traits", body)
    return uuid


def test_import_writes_each_node_and_every_allocation(embedded, tmp_path, cell):
    path, ids = cell
    base = embedded.url
    # A shared-storage pool the cloud already has, associated by nova's host aggregate.
    agg, share = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    http(base, "POST", "/resource_providers", {"name": unique("nfs"), "uuid": share})
    http(
        base,
        "PUT",
        f"/resource_providers/{share}/inventories",
        {"resource_provider_generation": 0, "inventories": {"DISK_GB": {"total": 10000}}},
    )
    http(
        base,
        "PUT",
        f"/resource_providers/{share}/traits",
        {"resource_provider_generation": 1, "traits": ["MISC_SHARES_VIA_AGGREGATE"]},
    )
    http(
        base,
        "PUT",
        f"/resource_providers/{share}/aggregates",
        {"resource_provider_generation": 2, "aggregates": [agg]},
    )
    api = tmp_path / "nova_api.sqlite"
    build_api(api, {agg: [ids["cn2"]]})

    res, client = do_import(
        embedded, tmp_path, path, "--api-db", f"sqlite:///{api}", "--shared-storage", ids["cn2"]
    )
    assert res.refusals == []
    assert sorted(res.nodes) == sorted([ids["cn1"], ids["cn2"]])

    cn1 = provider(base, ids["cn1"])
    assert cn1["uuid"] == ids["cn1_uuid"]  # compute_nodes.uuid
    inv = inventories(base, cn1["uuid"])
    assert inv["VCPU"]["total"] == 16 and inv["VCPU"]["allocation_ratio"] == 4.0
    assert inv["PCPU"]["total"] == 8  # the dedicated CPUs of numa_topology
    assert inv["MEMORY_MB"]["total"] == 65536 and inv["MEMORY_MB"]["allocation_ratio"] == 1.5
    assert inv["DISK_GB"]["total"] == 1000 and inv["DISK_GB"]["max_unit"] == 900
    gpu = provider(base, f"{ids['cn1']}_pci_0000_af_00_0")
    assert inventories(base, gpu["uuid"])["CUSTOM_GPU_V100"]["total"] == 1  # pci_stats tag
    pf = provider(base, f"{ids['cn1']}_pci_0000_3b_00_0")
    assert inventories(base, pf["uuid"])["SRIOV_NET_VF"]["total"] == 4
    nic = provider(base, f"{ids['cn1']}_pci_0000_87_00_0")
    assert list(inventories(base, nic["uuid"])) == ["CUSTOM_PCI_8086_0A54"]

    cn2 = provider(base, ids["cn2"])
    assert set(inventories(base, cn2["uuid"])) == {"VCPU", "MEMORY_MB"}  # shared: no DISK_GB
    assert http_get(base, f"/resource_providers/{cn2['uuid']}/aggregates")["aggregates"] == [agg]
    assert res.new_uuids == {2: cn2["uuid"]}  # NULL in the row: generated

    root = cn1["uuid"]
    held, body = allocations(base, ids["i_gpu"])
    assert held == {
        root: {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 40},
        gpu["uuid"]: {"CUSTOM_GPU_V100": 1},
    }
    assert body["consumer_type"] == "INSTANCE" and body["project_id"] == "proj-a"
    held, _ = allocations(base, ids["i_pci"])
    assert held[nic["uuid"]] == {"CUSTOM_PCI_8086_0A54": 1}
    # boot from volume: root 0, ephemeral 10 + swap 1536 MiB (2 GiB)
    assert allocations(base, ids["i_bfv"])[0] == {
        root: {"VCPU": 4, "MEMORY_MB": 4096, "DISK_GB": 12}
    }
    assert allocations(base, ids["i_pinned"])[0] == {
        root: {"PCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 20}
    }
    # an allocated VF is not counted (the spec's Newton rule: type-PCI only)
    assert allocations(base, ids["i_vf"])[0] == {
        root: {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}
    }
    # shared storage: DISK_GB on the sharing provider
    assert allocations(base, ids["i_shared"])[0] == {
        cn2["uuid"]: {"VCPU": 2, "MEMORY_MB": 2048},
        share: {"DISK_GB": 20},
    }
    # resize in progress: the migration holds the old flavor on the source ...
    held, body = allocations(base, ids["mig"])
    assert held == {root: {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}}
    assert body["consumer_type"] == "MIGRATION"
    # ... the instance the new one on the destination
    assert allocations(base, ids["i_resize"])[0] == {
        cn2["uuid"]: {"VCPU": 4, "MEMORY_MB": 4096},
        share: {"DISK_GB": 52},
    }
    assert allocations(base, ids["i_deleted"])[0] == {}

    # Idempotent: the second run reads and writes nothing.
    again, client2 = do_import(
        embedded, tmp_path, path, "--api-db", f"sqlite:///{api}", "--shared-storage", ids["cn2"]
    )
    assert writes(client) > 0 and writes(client2) == 0
    assert again.allocations_written == 0 and again.allocations_unchanged == 8
    assert (again.created, again.inventories, again.traits, again.aggregates) == (0, 0, 0, 0)
    print(
        f"first import: {client.total_requests()} requests ({writes(client)} writes); "
        f"second: {client2.total_requests()} ({writes(client2)} writes)"
    )


def test_dry_run_prints_the_diff_and_writes_nothing(embedded, tmp_path, cell):
    path, ids = cell
    res, client = do_import(embedded, tmp_path, path, dry=True)
    assert writes(client) == 0
    assert (
        http_get(embedded.url, "/resource_providers", name=ids["cn1"])["resource_providers"] == []
    )
    text = "\n".join(res.diff)
    assert f"create compute node {ids['cn1']} ({ids['cn1_uuid']})" in text
    assert f"create provider {ids['cn1']}_pci_0000_af_00_0" in text
    assert "DISK_GB 1000 max_unit=900" in text
    assert f"allocations of consumer {ids['mig']} (MIGRATION" in text
    assert res.allocations_written == 8

    # After the import, the dry run shows only what differs from Placement.
    do_import(embedded, tmp_path, path)
    execute(path, "UPDATE compute_nodes SET vcpus = 24, cpu_allocation_ratio = 2.0 WHERE id = 1")
    res, client = do_import(embedded, tmp_path, path, dry=True)
    assert writes(client) == 0
    assert res.diff == [
        f"inventory of {ids['cn1']}: DISK_GB 1000 max_unit=900, MEMORY_MB 65536 reserved=512 "
        "allocation_ratio=1.5, PCPU 8, VCPU 16 allocation_ratio=4.0 -> DISK_GB 1000 max_unit=900, "
        "MEMORY_MB 65536 reserved=512 allocation_ratio=1.5, PCPU 8, VCPU 24 allocation_ratio=2.0"
    ]


def test_numa_cells_when_modelled(embedded, tmp_path, cell):
    path, ids = cell
    res, _ = do_import(embedded, tmp_path, path, "--host", ids["cn1"], numa=True)
    assert res.refusals == [] and res.nodes == [ids["cn1"]]
    base = embedded.url
    cell0 = provider(base, f"{ids['cn1']}_NUMA0")
    inv = inventories(base, cell0["uuid"])
    assert (inv["VCPU"]["total"], inv["PCPU"]["total"], inv["MEMORY_MB"]["total"]) == (8, 4, 32768)
    # pinned to host cell 0 by instance_extra.numa_topology
    held, _ = allocations(base, ids["i_pinned"])
    assert held[cell0["uuid"]] == {"PCPU": 2, "MEMORY_MB": 4096}
    assert http_get(base, "/resource_providers", name=ids["cn2"])["resource_providers"] == []


def test_inconsistent_and_unparsable_rows_are_refused_the_rest_imported(embedded, tmp_path, cell):
    path, ids = cell
    execute(path, "UPDATE compute_nodes SET free_ram_mb = 1 WHERE id = 2")
    execute(path, "UPDATE compute_nodes SET pci_stats = '{\"nova_object.name\": ' WHERE id = 1")
    execute(
        path,
        "UPDATE instance_extra SET flavor = '{\"cur\": null}' WHERE instance_uuid = ?",
        ids["i_pci"],
    )
    res, _ = do_import(embedded, tmp_path, path)
    lines = [r.line() for r in res.refusals]
    assert any(
        line.startswith(
            f"compute_nodes id 2 ({ids['cn2']}) column free_ram_mb: 1 is not "
            "memory_mb - memory_mb_used = 65024"
        )
        for line in lines
    ), lines
    assert any(
        line.startswith(f"compute_nodes id 1 ({ids['cn1']}) column pci_stats: unparsable JSON")
        for line in lines
    ), lines
    assert any(
        line.startswith(
            f"instance_extra instance_uuid {ids['i_pci']} column flavor: the "
            "instance's flavor cannot be read"
        )
        for line in lines
    ), lines
    assert len(lines) == 3
    assert res.nodes == []  # both nodes refused: nothing else of theirs written
    assert (
        http_get(embedded.url, "/resource_providers", name=ids["cn1"])["resource_providers"] == []
    )


def test_negative_figure_and_bad_flavor_refused_others_imported(embedded, tmp_path, cell):
    path, ids = cell
    execute(path, "UPDATE compute_nodes SET vcpus = -4 WHERE id = 2")
    execute(
        path, "UPDATE instance_extra SET flavor = 'not json' WHERE instance_uuid = ?", ids["i_gpu"]
    )
    res, _ = do_import(embedded, tmp_path, path)
    lines = [r.line() for r in res.refusals]
    assert lines[0] == (
        f"compute_nodes id 2 ({ids['cn2']}) column vcpus: -4 is below 0; correct the row in nova"
    )
    assert lines[1].startswith(f"instance_extra instance_uuid {ids['i_gpu']} column flavor")
    assert len(lines) == 2
    assert res.nodes == [ids["cn1"]]
    assert allocations(embedded.url, ids["i_gpu"])[0] == {}
    assert allocations(embedded.url, ids["i_pci"])[0] != {}


def test_provider_name_held_by_another_uuid_is_refused(embedded, tmp_path, cell):
    path, ids = cell
    squatter = str(uuidlib.uuid4())
    http(embedded.url, "POST", "/resource_providers", {"name": ids["cn1"], "uuid": squatter})
    res, _ = do_import(embedded, tmp_path, path)
    (line,) = [r.line() for r in res.refusals]
    assert line.startswith(
        f"compute_nodes id 1 ({ids['cn1']}) column hypervisor_hostname: Placement holds a "
        f"provider named {ids['cn1']!r} under another UUID than {ids['cn1_uuid']}"
    )
    assert res.nodes == [ids["cn2"]]
    assert inventories(embedded.url, squatter) == {}  # not ours: untouched
    # The migration's source is the refused node: it is not written; the instance is.
    assert allocations(embedded.url, ids["mig"])[0] == {}
    assert allocations(embedded.url, ids["i_resize"])[0] != {}


def test_parts_on_providers_the_import_does_not_own_are_kept(embedded, tmp_path, cell):
    path, ids = cell
    base = embedded.url
    other = str(uuidlib.uuid4())
    http(base, "POST", "/resource_providers", {"name": unique("bw"), "uuid": other})
    http(
        base,
        "PUT",
        f"/resource_providers/{other}/inventories",
        {
            "resource_provider_generation": 0,
            "inventories": {"NET_BW_EGR_KILOBIT_PER_SEC": {"total": 10000}},
        },
    )
    http(
        base,
        "PUT",
        f"/allocations/{ids['i_pci']}",
        {
            "allocations": {other: {"resources": {"NET_BW_EGR_KILOBIT_PER_SEC": 1000}}},
            "project_id": "proj-a",
            "user_id": "user-a",
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )
    res, _ = do_import(embedded, tmp_path, path)
    assert res.refusals == []
    held, _ = allocations(base, ids["i_pci"])
    assert held[other] == {"NET_BW_EGR_KILOBIT_PER_SEC": 1000}
    assert held[ids["cn1_uuid"]] == {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}


def test_reimport_keeps_vgpu_and_vf_allocations_on_the_providers_it_keeps(embedded, tmp_path, cell):
    """Issue 26, defect 6: the import plans no VGPU nor VF, and its merge dropped them.

    The agent on cn1 allocated i_vf's VF on its PF's provider (which the import
    lays out from nova's ``type-VF`` rows) and a vGPU on the GPU provider it
    reports (which the import keeps and takes over): a second import must
    keep both, writing nothing.
    """
    path, ids = cell
    base, root = embedded.url, ids["cn1_uuid"]
    res, _ = do_import(embedded, tmp_path, path, "--host", ids["cn1"])
    assert res.refusals == []
    gpu = gpu_provider(base, f"{ids['cn1']}_pci_0000_5e_00_0", root, ["OWNER_NOVA"])
    listed = http_get(base, "/resource_providers", in_tree=root)["resource_providers"]
    (pf,) = [p["uuid"] for p in listed if "SRIOV_NET_VF" in inventories(base, p["uuid"])]
    held, body = allocations(base, ids["i_vf"])
    held |= {pf: {"SRIOV_NET_VF": 1}, gpu: {"VGPU": 1}}
    http(
        base,
        "PUT",
        f"/allocations/{ids['i_vf']}",
        {
            "allocations": {rp: {"resources": r} for rp, r in held.items()},
            "project_id": body["project_id"],
            "user_id": body["user_id"],
            "consumer_generation": body["consumer_generation"],
            "consumer_type": "INSTANCE",
        },
    )
    before, _ = allocations(base, ids["i_vf"])

    again, client = do_import(embedded, tmp_path, path, "--host", ids["cn1"])
    assert again.refusals == []
    after, _ = allocations(base, ids["i_vf"])
    assert after[pf] == {"SRIOV_NET_VF": 1} and after[gpu] == {"VGPU": 1}
    assert after == before
    assert writes(client) == 0


# -- the command ---------------------------------------------------------------------


def remote_conf(tmp_path, url: str):
    path = tmp_path / "import.conf"
    path.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path / 'agent-state'}\n"
        f"[placement]\nauth_type = admin_token\nendpoint = {url}\ntoken = admin\n"
        "noauth_roles = admin,service\n"
    )
    return str(path)


def test_command_imports_writes_uuids_and_exits_1_on_a_refusal(served, tmp_path, cell, capsys):
    path, ids = cell
    conf = remote_conf(tmp_path, served.url)
    argv = ["import-nova", "--config", conf, "--cell-db", f"sqlite:///{path}"]
    assert main([*argv, "--write-uuids"]) == 0
    out = capsys.readouterr().out
    assert "nodes: 2 imported" in out and "allocations written: 8" in out
    cn2 = provider(served.url, ids["cn2"])["uuid"]
    assert f"compute_nodes id 2: uuid set to {cn2}" in out
    con = sqlite3.connect(path)
    assert con.execute("SELECT uuid FROM compute_nodes WHERE id = 2").fetchone() == (cn2,)
    con.close()
    # The agent's own state directory is not touched by the import.
    assert not (tmp_path / "agent-state" / "compute_nodes.json").exists()

    execute(path, "UPDATE instance_extra SET flavor = NULL WHERE instance_uuid = ?", ids["i_bfv"])
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert f"refused: instance_extra instance_uuid {ids['i_bfv']} column flavor" in captured.err
    assert "placement requests: " in captured.out and "(0 writes)" in captured.out
    assert "refused: 1 (not imported; the rest was)" in captured.out


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql+pymysql://nova:s3cret@127.0.0.1:1/nova", "cannot be opened"),
        ("sqlite:////nonexistent/nova.sqlite", "no such file /nonexistent/nova.sqlite"),
        ("not a url", "is not a database URL"),
    ],
)
def test_command_bad_database_url_exits_2_without_the_password(tmp_path, capsys, url, says):
    assert main(["import-nova", "--cell-db", url]) == 2
    err = capsys.readouterr().err
    assert says in err and "s3cret" not in err
    assert len(err.strip().splitlines()) == 1


def test_command_unknown_host_and_wrong_database_exit_2(tmp_path, cell, capsys):
    path, _ids = cell
    assert main(["import-nova", "--cell-db", f"sqlite:///{path}", "--host", "nosuch"]) == 2
    assert "is named nosuch" in capsys.readouterr().err
    api = tmp_path / "nova_api.sqlite"
    build_api(api, {})
    assert main(["import-nova", "--cell-db", f"sqlite:///{api}"]) == 2
    assert "has no table compute_nodes" in capsys.readouterr().err


def test_row_uuid_held_by_a_provider_of_another_name_is_refused(embedded, tmp_path, cell):
    path, ids = cell
    other = unique("other")
    http(embedded.url, "POST", "/resource_providers", {"name": other, "uuid": ids["cn1_uuid"]})
    res, _ = do_import(embedded, tmp_path, path, "--host", ids["cn1"])
    (line,) = [r.line() for r in res.refusals]
    assert line.startswith(
        f"compute_nodes id 1 ({ids['cn1']}) column uuid: Placement holds {ids['cn1_uuid']} as "
        f"provider {other!r}, not as {ids['cn1']!r}"
    )
    assert res.nodes == [] and res.allocations_written == 0
    assert provider(embedded.url, other)["uuid"] == ids["cn1_uuid"]


def test_a_node_placement_holds_in_another_shape_is_refused(embedded, tmp_path, cell):
    path, ids = cell
    first, _ = do_import(embedded, tmp_path, path, "--host", ids["cn1"], numa=True)
    assert first.refusals == []
    res, client = do_import(embedded, tmp_path, path, "--host", ids["cn1"], numa=False)
    (line,) = [r.line() for r in res.refusals]
    assert line.startswith(
        f"compute_nodes id 1 ({ids['cn1']}): Placement holds this node in another shape ("
    )
    assert "run compute-agent reshape" in line
    assert writes(client) == 0


def test_what_only_the_host_knows_is_kept(embedded, tmp_path, cell):
    """The agent ran on cn1 before: its CPU traits and its vGPU provider stay."""
    path, ids = cell
    base, root = embedded.url, ids["cn1_uuid"]
    gpu = str(uuidlib.uuid4())
    for trait in ("CUSTOM_OWNER_COMPUTE_AGENT", "CUSTOM_NVIDIA_35"):
        http(base, "PUT", f"/traits/{trait}")
    http(base, "POST", "/resource_providers", {"name": ids["cn1"], "uuid": root})
    http(
        base,
        "PUT",
        f"/resource_providers/{root}/traits",
        {
            "resource_provider_generation": 0,
            "traits": ["HW_CPU_X86_AVX2", "CUSTOM_OWNER_COMPUTE_AGENT", "COMPUTE_NODE"],
        },
    )
    gpu_provider(
        base,
        f"{ids['cn1']}_pci_0000_5e_00_0",
        root,
        ["CUSTOM_NVIDIA_35", "CUSTOM_OWNER_COMPUTE_AGENT"],
        gpu,
    )

    gpu_before = inventories(base, gpu)
    res, _ = do_import(embedded, tmp_path, path, "--host", ids["cn1"])
    assert res.refusals == []
    traits = http_get(base, f"/resource_providers/{root}/traits")["traits"]
    assert {"HW_CPU_X86_AVX2", "COMPUTE_NODE", "OWNER_NOVA"} <= set(traits)  # [compute] owner_trait
    assert inventories(base, gpu) == gpu_before  # untouched
    assert "VCPU" in inventories(base, root)
    again, client = do_import(embedded, tmp_path, path, "--host", ids["cn1"])
    assert writes(client) == 0 and again.refusals == []


def test_unfinished_evacuation_keeps_the_source_part(embedded, tmp_path, cell):
    path, ids = cell
    base, evac = embedded.url, str(uuidlib.uuid4())
    con = sqlite3.connect(path)
    add_instance(con, evac, ids["cn2"], "flavor_small")
    insert(
        con,
        "migrations",
        uuid=str(uuidlib.uuid4()),
        instance_uuid=evac,
        source_node=ids["cn1"],
        dest_node=ids["cn2"],
        source_compute=ids["cn1"],
        dest_compute=ids["cn2"],
        status="done",
        migration_type="evacuation",
        deleted=0,
    )
    con.commit()
    con.close()
    do_import(embedded, tmp_path, path, "--host", ids["cn1"])
    # nova held the instance on cn1 before the evacuation
    put_allocations(
        base,
        evac,
        {ids["cn1_uuid"]: {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}},
        project="proj-a",
    )
    res, _ = do_import(embedded, tmp_path, path)
    assert res.refusals == []
    cn2 = provider(base, ids["cn2"])["uuid"]
    held, _ = allocations(base, evac)
    assert held == {
        ids["cn1_uuid"]: {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20},
        cn2: {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20},
    }
    # Once nova completed it (the source came back), the source part goes.
    execute(path, "UPDATE migrations SET status = 'completed' WHERE instance_uuid = ?", evac)
    do_import(embedded, tmp_path, path)
    assert allocations(base, evac)[0] == {cn2: {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}}


def test_stale_allocations_of_consumers_nova_says_are_gone_are_removed(embedded, tmp_path, cell):
    path, ids = cell
    base, root = embedded.url, ids["cn1_uuid"]
    do_import(embedded, tmp_path, path)
    other, foreign = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    http(base, "POST", "/resource_providers", {"name": unique("elsewhere"), "uuid": other})
    http(
        base,
        "PUT",
        f"/resource_providers/{other}/inventories",
        {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}},
    )
    # A stale Placement: a deleted instance (with a part elsewhere), a confirmed
    # migration, and a consumer nova does not know at all.
    put_allocations(base, ids["i_deleted"], {root: {"VCPU": 1}, other: {"VCPU": 1}})
    put_allocations(base, ids["mig_done"], {root: {"MEMORY_MB": 512}})
    put_allocations(base, foreign, {root: {"VCPU": 1}})

    dry, client = do_import(embedded, tmp_path, path, dry=True)
    assert writes(client) == 0 and dry.allocations_removed == 2
    assert (
        f"remove allocations of consumer {ids['i_deleted']}: instance deleted in nova" in dry.diff
    )
    assert f"remove allocations of consumer {ids['mig_done']}: migration confirmed in nova" in (
        dry.diff
    )
    res, _ = do_import(embedded, tmp_path, path)
    assert res.allocations_removed == 2 and res.refusals == []
    assert allocations(base, ids["i_deleted"])[0] == {other: {"VCPU": 1}}  # not ours: kept
    assert allocations(base, ids["mig_done"])[0] == {}
    assert allocations(base, foreign)[0] == {root: {"VCPU": 1}}  # unknown to nova: kept
    again, client = do_import(embedded, tmp_path, path)
    assert writes(client) == 0 and again.allocations_removed == 0


def test_dry_run_of_a_new_node_without_numa_cells_under_numa_config(embedded, tmp_path, cell):
    path, ids = cell
    execute(path, "UPDATE compute_nodes SET numa_topology = NULL WHERE id = 2")
    res, client = do_import(embedded, tmp_path, path, "--host", ids["cn2"], dry=True, numa=True)
    assert res.refusals == [] and writes(client) == 0
    assert (
        f"inventory of {ids['cn2']}: (none) -> DISK_GB 500, MEMORY_MB 65536 reserved=512, "
        "VCPU 16 allocation_ratio=4.0" in res.diff
    )


def test_a_configuration_that_does_not_fit_a_node_refuses_it(embedded, tmp_path, cell):
    path, ids = cell
    res, _ = do_import(embedded, tmp_path, path, DEFAULT={"reserved_host_disk_mb": 600 * 1024})
    (line,) = [r.line() for r in res.refusals]
    assert line.startswith(f"compute_nodes id 2 ({ids['cn2']}): [DEFAULT] reserved_host_disk_mb")
    assert line.endswith("import this node with a --config that fits it")
    assert res.nodes == [ids["cn1"]]
