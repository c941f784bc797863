"""Fresh where it must be (issue 26): what the agent reads of Placement agrees with Placement.

- The shared-storage provider is worked out from what Placement says at each
  lookup: a pool that leaves the compute node's aggregate gets no new DISK_GB,
  a deleted pool fails no cycle, a full pool stays the node's pool.
- The mirror's view of one provider comes from three GETs (inventories,
  traits, aggregates); another client's write landing between two of them
  must not leave an old inventory under the new generation (which no later
  cycle would read again).

The other client's write is real: the test wraps the client's ``request``
so that, right after one chosen answer, a plain HTTP request changes the
provider in Placement; nothing is mocked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest

from agent.cli.main import main
from agent.placement import endpoints
from agent.placement.client import PlacementClient
from agent.placement.details import READ_TRIES
from agent.service.exit_codes import EXIT_DRIFT, EXIT_OK
from drivers.records import Flavor, Instance
from tests.helpers.names import unique
from tests.helpers.placement_http import call, http, http_get
from tests.helpers.tracker import PROJECT, USER, Setup


@pytest.fixture
def setup(tmp_path, embedded) -> Setup:
    return Setup(tmp_path, embedded)


def bump_a_total(base: str, uuid: str) -> tuple[str, int]:
    """Another client's write: one inventory of ``uuid`` gets 1 more unit; (class, old total)."""
    body = http_get(base, f"/resource_providers/{uuid}/inventories")
    rc = sorted(body["inventories"])[0]
    inventories = {k: dict(v) for k, v in body["inventories"].items()}
    old = inventories[rc]["total"]
    inventories[rc]["total"] = old + 1
    call(
        base,
        "PUT",
        f"/resource_providers/{uuid}/inventories",
        {
            "resource_provider_generation": body["resource_provider_generation"],
            "inventories": inventories,
        },
    )
    return rc, old


def after_the_inventory_read_of(
    uuid: str, write: Callable[[], Any], times: int = 1
) -> Callable[..., Callable[..., Any]]:
    """A wrapper of ``PlacementClient.request``: ``write()`` after ``GET`` inventories of
    ``uuid`` was answered (so before that provider's traits and aggregates are read), the
    first ``times`` times."""
    done: list[bool] = []

    def wrap(request: Callable[..., Any]) -> Callable[..., Any]:
        def request_then_write(*args: Any, **kwargs: Any) -> Any:
            out = request(*args, **kwargs)
            method, template = (args[-2], args[-1]) if len(args) >= 2 else (None, None)
            if (method, template) == ("GET", endpoints.INVENTORIES) and len(done) < times:
                if kwargs.get("uuid") == uuid:
                    done.append(True)
                    write()
            return out

        return request_then_write

    wrap.done = done  # type: ignore[attr-defined]
    return wrap


def test_a_write_between_the_mirrors_reads_is_undone_by_the_cycle(setup, monkeypatch):
    """Issue 26, defect 5: the mirror kept the last read's generation with the first's
    inventory, so the edit was never seen again and stayed in Placement."""
    s = setup
    assert s.cycle(startup=True).ok
    assert s.cycle().ok
    root = s.uuid(s.nodename)
    before = http_get(s.base, f"/resource_providers/{root}/inventories")["inventories"]
    # The root's generation moves (an operator's aggregate, which the agent keeps),
    # so the next cycle reads the root's inventories, traits and aggregates.
    generation = http_get(s.base, f"/resource_providers/{root}")["generation"]
    operator_aggregate = "6f5b1d2e-58a4-4f0c-9c38-0a1f7e0d8b11"
    call(
        s.base,
        "PUT",
        f"/resource_providers/{root}/aggregates",
        {"resource_provider_generation": generation, "aggregates": [operator_aggregate]},
    )
    edited: list[tuple[str, int]] = []
    wrap = after_the_inventory_read_of(root, lambda: edited.append(bump_a_total(s.base, root)))
    monkeypatch.setattr(s.client, "request", wrap(s.client.request))
    assert s.cycle().ok
    assert edited, "the cycle did not read the root's inventories"
    assert s.cycle().ok
    after = http_get(s.base, f"/resource_providers/{root}/inventories")["inventories"]
    rc, total = edited[0]
    assert after[rc]["total"] == total  # the other client's edit was undone
    assert after == before
    aggregates = http_get(s.base, f"/resource_providers/{root}/aggregates")["aggregates"]
    assert aggregates == [operator_aggregate]


def test_a_provider_that_keeps_changing_fails_its_node_until_it_settles(setup, monkeypatch):
    """Reads that never agree are not taken: the node's cycle fails naming the provider,
    and the next one (nobody writing any more) reads it again and undoes the edits."""
    s = setup
    assert s.cycle(startup=True).ok
    root = s.uuid(s.nodename)
    before = http_get(s.base, f"/resource_providers/{root}/inventories")["inventories"]
    wrap = after_the_inventory_read_of(root, lambda: bump_a_total(s.base, root), times=READ_TRIES)
    monkeypatch.setattr(s.client, "request", wrap(s.client.request))
    bump_a_total(s.base, root)  # the root's generation moves: it is read next cycle
    outcome = s.cycle()
    assert not outcome.ok
    assert len(wrap.done) == READ_TRIES  # type: ignore[attr-defined]
    assert f"resource provider {root} changed while it was read" in outcome.nodes[0].error
    assert s.cycle().ok
    assert http_get(s.base, f"/resource_providers/{root}/inventories")["inventories"] == before


def show_check(s: Setup, tmp_path, base: str) -> int:
    """``compute-agent show --check`` in-process, with a state directory of its own."""
    tmp_path.mkdir(exist_ok=True)
    conf = tmp_path / "show.conf"
    conf.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path / 'show-state'}\n"
        f"[compute]\ndriver = fake\n[fake]\nhost_file = {s.host_path}\n"
        "[numa]\nmodel_in_placement = true\n"
        "[devices]\nenabled_mdev_types = nvidia-35,nvidia-36\n"
        f"[placement]\nauth_type = admin_token\nendpoint = {base}\ntoken = admin\n"
        "noauth_roles = admin,service\n"
    )
    return main(["show", "--check", "--config", str(conf)])


def test_show_check_reports_drift_made_between_its_reads(setup, tmp_path, monkeypatch, capsys):
    """Issue 26, defect 5: ``show --check`` said "no drift" while Placement was wrong."""
    s = setup
    assert s.cycle(startup=True).ok
    assert s.cycle().ok
    assert show_check(s, tmp_path, s.base) == EXIT_OK
    assert "no drift" in capsys.readouterr().out
    root = s.uuid(s.nodename)
    wrap = after_the_inventory_read_of(root, lambda: bump_a_total(s.base, root))
    monkeypatch.setattr(PlacementClient, "request", wrap(PlacementClient.request))
    code = show_check(s, tmp_path / "again", s.base)
    out = capsys.readouterr().out
    assert wrap.done  # type: ignore[attr-defined]
    assert code == EXIT_DRIFT, out
    assert not (tmp_path / "again" / "show-state").exists()  # show writes no state either
    assert f"{s.nodename} " in out and "Placement has" in out


# -- the sharing provider ----------------------------------------------------------


def shared_setup(tmp_path, embedded) -> tuple[Setup, str, str]:
    """A node on shared storage whose instances' disks are on pool ``nfs`` of aggregate ``agg``.

    Returns:
        ``(setup, nfs UUID, agg)``, after the cycle that put the disks there.
    """
    s = Setup(tmp_path, embedded)
    s.host.set("shared_storage", True).write(s.host_path)
    s.driver.reload()
    assert s.cycle(startup=True).ok
    agg = str(uuid4())
    nfs = call(s.base, "POST", "/resource_providers", {"name": unique("nfs")})["uuid"]
    for path, body in (
        (
            "inventories",
            {"resource_provider_generation": 0, "inventories": {"DISK_GB": {"total": 10_000}}},
        ),
        ("traits", {"resource_provider_generation": 1, "traits": ["MISC_SHARES_VIA_AGGREGATE"]}),
        ("aggregates", {"resource_provider_generation": 2, "aggregates": [agg]}),
    ):
        call(s.base, "PUT", f"/resource_providers/{nfs}/{path}", body)
    set_aggregates(s.base, s.uuid(s.nodename), [agg])
    assert s.cycle().ok
    assert s.held(s.inst(4))[pool_name(s, nfs)] == {"DISK_GB": 180}
    return s, nfs, agg


def set_aggregates(base: str, uuid: str, aggregates: list[str]) -> None:
    generation = http_get(base, f"/resource_providers/{uuid}")["generation"]
    call(
        base,
        "PUT",
        f"/resource_providers/{uuid}/aggregates",
        {"resource_provider_generation": generation, "aggregates": aggregates},
    )


def pool_name(s: Setup, nfs: str) -> str:
    return http_get(s.base, f"/resource_providers/{nfs}")["name"]


def new_instance(s: Setup, disk: int) -> Instance:
    inst = Instance(str(uuid4()), PROJECT, USER, Flavor(1, 512, root_gb=disk))
    s.driver.spawn(s.nodename, inst)  # the tracker claims it (it subscribed to the driver)
    return inst


def test_a_pool_that_left_the_aggregate_gets_no_new_disk(tmp_path, embedded):
    """Issue 26, defect 4: the lookup was cached while the compute node's aggregates stayed."""
    s, nfs, _ = shared_setup(tmp_path, embedded)
    name = pool_name(s, nfs)
    set_aggregates(s.base, nfs, [str(uuid4())])  # the pool moves to another aggregate
    assert s.cycle().ok
    inst = new_instance(s, 7)
    assert name not in s.held(inst.uuid)
    assert s.held(inst.uuid)  # its CPU and memory were claimed
    assert s.cycle().ok
    assert name not in s.held(inst.uuid)


def test_a_deleted_pool_fails_no_cycle(tmp_path, embedded):
    """Issue 26, defect 4: a deleted pool made every cycle fail with a 404 until a SIGHUP."""
    s, nfs, _ = shared_setup(tmp_path, embedded)
    for consumer in call(s.base, "GET", f"/resource_providers/{nfs}/allocations")["allocations"]:
        body = http_get(s.base, f"/allocations/{consumer}")
        body["allocations"] = {
            rp: {"resources": a["resources"]} for rp, a in body["allocations"].items() if rp != nfs
        }
        http(s.base, "PUT", f"/allocations/{consumer}", body)
    http(s.base, "DELETE", f"/resource_providers/{nfs}")
    outcome = s.cycle()
    assert outcome.ok, outcome.nodes[0].error
    assert s.cycle().ok
    inst = new_instance(s, 7)
    assert s.held(inst.uuid)


def test_the_lookup_costs_one_request_and_a_full_pool_stays(tmp_path, embedded):
    """Steady cycle on shared storage: the listing, the two NUMA cells' allocations and the
    lookup. A pool with no room left is not listed by ``resources=DISK_GB:1``: two more
    requests show it is still the node's, and nothing moves off it."""
    s, nfs, _ = shared_setup(tmp_path, embedded)
    assert s.cycle().requests == 1 + 2 + 1
    used = http_get(s.base, f"/resource_providers/{nfs}/usages")["usages"]["DISK_GB"]
    inventory = http_get(s.base, f"/resource_providers/{nfs}/inventories")
    call(
        s.base,
        "PUT",
        f"/resource_providers/{nfs}/inventories",
        {
            "resource_provider_generation": inventory["resource_provider_generation"],
            "inventories": {"DISK_GB": {"total": used}},
        },
    )
    held = {s.inst(i): s.held(s.inst(i)) for i in (1, 2, 3, 4)}
    outcome = s.cycle()
    assert outcome.ok and outcome.nodes[0].allocations_written == []
    assert outcome.requests == 1 + 2 + 3
    assert {c: s.held(c) for c in held} == held
