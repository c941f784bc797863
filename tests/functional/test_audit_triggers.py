"""One allocation audit for every trigger, beside nova 34's own writes (issue 39's judge).

The agent audits an instance's allocation on three triggers: its periodic cycle, a
driver event about the instance (a targeted update), and the retry of its own write
after Placement answered 409. Whatever the trigger, the rules are one
(docs/service.md, "Allocation audit"): an allocation another writer made is removed only
once periodic audits have found the instance absent from the host for ``[compute]
absent_instance_timeout`` seconds (3600; an event never counts), and nothing is written
for an instance while nova's migration record holds its share here.

Every allocation nova writes here is nova's own code (tests/helpers/nova_client.py: the
scheduler's ``claim_resources``, the conductor's ``replace_allocation_with_migration``,
the compute manager's ``_revert_allocation``, the resource tracker's shelve-offload
clean-up; ``nova-manage placement heal_allocations``' ``PlacementCommands``,
tests/helpers/audit_triggers.py), in nova's order, against one real Placement
(``served``). Hosts A and B each run the agent with the fake driver; a host's file lists
the domains defined on it. The agent's triggers: ``c.cycle`` (a periodic cycle, its clock
a minute on), ``with_events`` (the host file edited and the fake driver's events applied
as the service applies them: :class:`~agent.service.events.EventQueue`, then
:meth:`~agent.tracker.cycle.ResourceTracker.apply_events`), and nova's steps run inside
the agent's requests (:func:`tests.helpers.faults.before_send`) or the agent's cycle
inside nova's (nova's adapter's ``before_write``). Each test reads like a gabbi file: a
step, the hosts' domains, what Placement holds; its docstring names issue 39's scenario
and nova's code path.
"""

from __future__ import annotations

import shutil
import uuid

import pytest

from tests.helpers.audit_triggers import (
    heal_allocations,
    inventory,
    put_inventory,
    rename,
    revert_with_a_cycle_inside,
    with_events,
)
from tests.helpers.events import ThreadedService, service_ini, wait_until
from tests.helpers.faults import before_send
from tests.helpers.nova_cloud import IDLE, LARGE, SMALL, Cloud, usage

S = usage(SMALL)
L = usage(LARGE)
GRACE = 3600.0
"""``[compute] absent_instance_timeout``'s default (seconds)."""


@pytest.fixture
def served(served_module):
    """The module's one Placement: every cloud here has nodenames of its own."""
    return served_module


@pytest.fixture
def cloud(tmp_path, served) -> Cloud:
    return Cloud(tmp_path, served)


def new() -> str:
    return str(uuid.uuid4())


def boot(c: Cloud, inst: str, label: str = "A") -> None:
    """nova's scheduler claims SMALL on host ``label``, the domain is defined, each host's
    agent runs a cycle: the allocation is nova's."""
    c.nova.schedule(inst, SMALL, c.node(label))
    c.hosts[label].define(inst, SMALL)
    c.cycle(watch=(inst,))


def healed_by_agent(c: Cloud, inst: str) -> None:
    """The domain is defined on A with no claim (its allocation lost): A's agent heals it,
    its own write."""
    c.hosts["A"].define(inst, SMALL)
    c.cycle(watch=())
    c.expect("healed by A's agent", A=S, B=IDLE)


def move_to_b(c: Cloud, inst: str, mig: str, flavor=LARGE) -> None:
    """A resize A -> B to VERIFY_RESIZE: the conductor moves A's share to the migration
    record, the scheduler claims B, B defines the domain; a cycle of each agent."""
    c.nova.start_move(inst, mig, c.node("A"))
    c.nova.schedule(inst, flavor, c.node("B"))
    c.hosts["B"].define(inst, flavor)
    c.cycle(watch=(inst, mig))


def test_revert_after_the_destinations_destroy_event(cloud):
    """Scenario 1. nova's ``revert_resize`` destroys the destination's domain (B's agent
    gets the event), then the source's ``_finish_revert_resize`` -> ``_revert_allocation``
    -> ``move_allocations`` reads the migration record and the instance and POSTs both
    with their consumer generations. B's periodic cycle lands between those reads and the
    POST: the event is no periodic audit, so the instance has not been found absent by
    two, nor for the grace: B removes nothing and nova's revert succeeds."""
    c, inst, mig = cloud, new(), new()
    boot(c, inst)
    move_to_b(c, inst, mig)
    c.expect("resize A->B awaiting confirm", A=S, B=L)

    with_events(c.hosts["B"], lambda: c.hosts["B"].undefine(inst))
    c.expect("revert_resize: B's domain destroyed, B's event", A=S, B=L)

    revert_with_a_cycle_inside(c, "B", inst, mig)
    c.expect("resize reverted, B's cycle inside nova's move_allocations", A=S, B=IDLE)
    assert c.holds(inst) == {"A": S} and c.holds(mig) == {}


def test_revert_without_events_defers(tmp_path, served):
    """Scenario 1, the contrast: with ``watch_host_events = false`` the destination's
    agent hears no event; its periodic cycle inside nova's ``move_allocations`` finds the
    instance absent for the first time and removes nothing: the revert succeeds."""
    c = Cloud(tmp_path, served, DEFAULT={"watch_host_events": False})
    inst, mig = new(), new()
    boot(c, inst)
    move_to_b(c, inst, mig)
    c.hosts["B"].undefine(inst)

    revert_with_a_cycle_inside(c, "B", inst, mig)
    c.expect("resize reverted, B's cycle inside nova's move_allocations", A=S, B=IDLE)


@pytest.mark.parametrize("cycle_first", [False, True], ids=["event only", "cycle, then event"])
def test_an_event_in_the_conductors_window_heals_nothing(cloud, cycle_first):
    """Scenario 2. Between the conductor's ``replace_allocation_with_migration`` (A's share
    moved to the migration record, the instance holding nothing) and the scheduler's
    ``claim_resources`` on B, a lifecycle event about A's domain (redefined: its display
    name rewritten) reaches A's agent. The instance is *moving*, as the periodic cycle
    finds it: healing it on A would make nova's claim merge A's share in again
    (``claim_resources`` keeps an existing allocation, as for an evacuation), and A would
    count the instance twice."""
    c, inst, mig = cloud, new(), new()
    boot(c, inst)
    c.nova.start_move(inst, mig, c.node("A"))
    if cycle_first:
        c.cycle("A", watch=(inst, mig))
        c.expect("conductor's window, A's periodic cycle", A=S, B=IDLE)
    with_events(c.hosts["A"], lambda: rename(c.hosts["A"], inst, "renamed"))
    assert c.holds(inst) == {}, "A's event healed the instance in the conductor's window"
    c.nova.schedule(inst, LARGE, c.node("B"))
    c.hosts["B"].define(inst, LARGE)
    c.cycle(watch=(inst, mig))
    c.expect("resize A->B awaiting confirm", A=S, B=L)
    assert c.holds(inst) == {"B": L} and c.holds(mig) == {"A": S}


@pytest.mark.parametrize("event", [False, True], ids=["periodic only", "destroy event"])
def test_unshelve_claim_on_the_same_host_survives_until_the_spawn(cloud, event):
    """Scenario 3 (local disk; test_nova_shared_storage.py has the shared-storage case).
    Shelve offload destroys A's domain and deletes the allocation
    (``delete_allocation_for_shelve_offloaded_instance``: ``DELETE`` without generation);
    the unshelve's scheduler claims A again (``claim_resources``: the consumer re-created,
    the same amounts); the image download takes more than two cycles before the spawn.
    The claim is nova's intent: no audit before the spawn removes it."""
    c, inst = cloud, new()
    boot(c, inst)
    a = c.hosts["A"]
    if event:
        with_events(a, lambda: a.undefine(inst))
    else:
        a.undefine(inst)
    c.nova.shelve_offload(inst)
    c.nova.schedule(inst, SMALL, c.node("A"))
    for n in range(3):
        c.cycle(watch=(inst,))
        c.expect(f"unshelve claimed on A, image downloading, cycle {n + 1}", A=S, B=IDLE)
    a.define(inst, SMALL)
    c.cycle(watch=(inst,))
    c.expect("unshelved on A", A=S, B=IDLE)


def test_unshelve_claim_on_the_same_host_after_the_agents_heal(cloud):
    """Scenario 3, the instance once healed by the agent (its own write, consumer
    generation 1 after the heal). Shelve offload deletes the consumer; the unshelve's
    claim re-creates it with the same amounts and generation, so it looks like the
    agent's own write: it is nova's, and stays until the spawn."""
    c, inst = cloud, new()
    healed_by_agent(c, inst)
    c.hosts["A"].undefine(inst)
    c.nova.shelve_offload(inst)
    c.nova.schedule(inst, SMALL, c.node("A"))
    for n in range(3):
        c.cycle(watch=(inst,))
        c.expect(f"unshelve claimed on A, image downloading, cycle {n + 1}", A=S, B=IDLE)
    c.hosts["A"].define(inst, SMALL)
    c.cycle(watch=(inst,))
    c.expect("unshelved on A", A=S, B=IDLE)


def test_rebuild_after_heal_allocations_keeps_the_allocation(cloud):
    """Scenario 4. The agent healed the instance (its own write); then ``nova-manage
    placement heal_allocations --instance UUID --force`` rewrote it (nova's
    ``_heal_allocations_for_instance``: the consumer's generation read and PUT again).
    A rebuild destroys the domain (an event) before any periodic audit: the allocation
    is another writer's since, so the event does not remove it; the spawn finds it."""
    c, inst = cloud, new()
    healed_by_agent(c, inst)
    generation = c.generation(inst)
    heal_allocations(c.nova, inst, SMALL, c.node("A"))
    assert c.generation(inst) == generation + 1
    a = c.hosts["A"]
    with_events(a, lambda: a.undefine(inst))
    c.expect("rebuild: A's domain destroyed, A's event", A=S, B=IDLE)
    assert c.holds(inst) == {"A": S}
    with_events(a, lambda: a.define(inst, SMALL))
    c.cycle(watch=(inst,))
    c.expect("rebuild: spawned", A=S, B=IDLE)
    assert c.generation(inst) == generation + 1, "the agent wrote the instance again"


def test_rebuild_after_heal_allocations_with_the_service(tmp_path, served):
    """Scenario 4, through the service: A's agent runs as ``compute-agent run`` watching
    its host file (its periodic cycle an hour away). The domain appears with no claim and
    the service's event heals it (its own write); ``nova-manage placement
    heal_allocations --force`` rewrites it (nova's ``_heal_allocations_for_instance``);
    the rebuild's destroy reaches the service as an event: the allocation is another
    writer's since, and stays."""
    c, inst = Cloud(tmp_path / "nova", served), new()
    a = c.hosts["A"]
    ini = service_ini(
        tmp_path / "A.ini",
        tmp_path / "svc-A",
        served.url,
        f"[compute]\ndriver = fake\n[fake]\nhost_file = {a.host_path}\nwatch_delay = 0.05",
    )
    service = ThreadedService(ini).start()
    try:
        before = service.event_updates()
        a.define(inst, SMALL)
        wait_until(lambda: service.event_updates() > before, 30, "A's spawn event")
        assert c.holds(inst) == {"A": S}, "the service did not heal the instance"
        heal_allocations(c.nova, inst, SMALL, c.node("A"))
        before = service.event_updates()
        a.undefine(inst)
        wait_until(lambda: service.event_updates() > before, 30, "A's destroy event")
        c.expect("rebuild: A's domain destroyed, the service's event", A=S, B=IDLE)
    finally:
        code = service.stop()
    assert code == 0


@pytest.mark.parametrize("cycle_between", [False, True], ids=["at once", "after a cycle"])
def test_rebuild_after_a_reverted_resize_keeps_novas_allocation(cloud, cycle_between):
    """Scenario 5. The agent healed the instance on A (its own write); nova resized it to
    B (``replace_allocation_with_migration``, ``claim_resources`` on B) and reverted
    (``_revert_allocation``: ``move_allocations`` wrote the instance's allocation on A).
    A rebuild on A destroys the domain (an event): the allocation is nova's now, not the
    agent's own write, so it is not removed at once."""
    c, inst, mig = cloud, new(), new()
    healed_by_agent(c, inst)
    move_to_b(c, inst, mig)
    c.expect("resize A->B awaiting confirm", A=S, B=L)
    c.hosts["B"].undefine(inst)
    c.nova.revert(inst, mig)
    if cycle_between:
        c.cycle(watch=(inst,))
    c.expect("resize reverted", A=S, B=IDLE)
    a = c.hosts["A"]
    with_events(a, lambda: a.undefine(inst))
    c.expect("rebuild on A: the domain destroyed, A's event", A=S, B=IDLE)
    c.cycle(watch=(inst,))
    c.expect("rebuild on A: downloading the image, a cycle", A=S, B=IDLE)
    a.define(inst, SMALL)
    c.cycle(watch=(inst,))
    c.expect("rebuild on A: spawned", A=S, B=IDLE)


def test_a_409_on_the_agents_write_while_the_conductor_moves_it(tmp_path, served):
    """Scenario 6. An operator took the instance's DISK_GB part away (nova's report client,
    its consumer generation); ``[compute] rewrite_differing_allocations`` is on, so A's
    agent rewrites the drift, a read-edit-write. Just before its PUT is sent the
    conductor's ``replace_allocation_with_migration`` moves A's share to the migration
    record, so the agent's PUT gets a 409. Its retry reads the instance again, which holds
    nothing now while the record holds what it held here: *moving*, as a cycle would find
    it; nothing written. nova's ``claim_resources`` on B then leaves A with the migration
    record's share alone."""
    c = Cloud(tmp_path, served, compute={"rewrite_differing_allocations": True})
    inst, mig = new(), new()
    boot(c, inst)
    held = c.nova.client.get_allocs_for_consumer(c.nova.context, inst)
    root = c.nova.root(c.node("A"))
    held["allocations"][root]["resources"].pop("DISK_GB")
    c.nova.client.put_allocations(c.nova.context, inst, held)
    without_disk = {"VCPU": S["VCPU"], "MEMORY_MB": S["MEMORY_MB"], "DISK_GB": 0}
    c.expect("an operator took the disk part away", A=without_disk, B=IDLE)

    fired = before_send(
        c.hosts["A"].client,
        lambda method, _t, path: method in ("PUT", "POST") and "/allocations" in path,
        lambda: c.nova.start_move(inst, mig, c.node("A")),
    )
    c.cycle("A")
    assert fired, "A's agent wrote nothing: the scenario did not happen"
    c.hosts["A"].disarm()
    assert c.holds(inst) == {}, "A's agent healed the instance in the conductor's window"
    c.nova.schedule(inst, LARGE, c.node("B"))
    c.hosts["B"].define(inst, LARGE)
    c.cycle(watch=(inst, mig))
    assert c.holds(inst) == {"B": L}
    assert c.holds(mig) == {"A": {"VCPU": S["VCPU"], "MEMORY_MB": S["MEMORY_MB"]}}
    c.expect("resize A->B awaiting confirm", A=without_disk, B=L)


@pytest.mark.parametrize("event", [False, True], ids=["periodic only", "destroy event"])
def test_a_same_host_rebuild_over_two_audits_releases_nothing(cloud, event):
    """Scenario 7. A rebuild on A destroys the domain (nova's ``rebuild_instance``,
    ``_do_rebuild_instance``: destroy, then spawn) and the image download spans more than
    two periodic audits, well within ``absent_instance_timeout``: nova's allocation of
    the live instance is never released (``rebuild`` writes no allocation)."""
    c, inst = cloud, new()
    boot(c, inst)
    a = c.hosts["A"]
    if event:
        with_events(a, lambda: a.undefine(inst))
    else:
        a.undefine(inst)
    for n in range(3):
        c.cycle(watch=(inst,))
        c.expect(f"rebuild on A: downloading the image, cycle {n + 1}", A=S, B=IDLE)
    a.define(inst, SMALL)
    c.cycle(watch=(inst,))
    c.expect("rebuild on A: spawned", A=S, B=IDLE)


@pytest.mark.parametrize("lost_first", [True, False], ids=["lost sorts first", "lost sorts last"])
def test_a_lost_allocation_beside_a_resize_begun_in_the_same_interval(cloud, lost_first):
    """Scenario 8. C and D, of one project, user and flavor, run on A. Between two audits
    of A, C's resize to B reaches VERIFY_RESIZE (its migration record holds its old share
    on A, its CPU and memory on B) and an operator deletes D's allocation
    (``delete_allocation_for_instance(force=True)``). The record is C's, not D's: C holds
    its CPU and memory on B (*moving*), so A's next audit heals D and leaves C's record."""
    c = cloud
    first, last = sorted(new() for _ in range(2))
    lost, resized = (first, last) if lost_first else (last, first)
    mig = new()
    for inst in (resized, lost):
        c.nova.schedule(inst, SMALL, c.node("A"))
        c.hosts["A"].define(inst, SMALL)
    c.cycle(watch=(resized, lost))
    c.expect("C and D booted on A", A=usage(SMALL, SMALL), B=IDLE)

    c.nova.start_move(resized, mig, c.node("A"))
    c.nova.schedule(resized, LARGE, c.node("B"))
    c.hosts["B"].define(resized, LARGE)
    c.nova.client.delete_allocation_for_instance(c.nova.context, lost, force=True)
    c.cycle(watch=(resized, mig))
    c.expect("D's allocation healed, C's record untouched", A=usage(SMALL, SMALL), B=L)
    assert c.holds(lost) == {"A": S} and c.holds(mig) == {"A": S}


def test_an_inventory_edit_beside_novas_move_is_seen(cloud):
    """Scenario 9. A resize on A (``replace_allocation_with_migration``, ``claim_resources``
    on A); ``revert_resize`` destroys the new domain, and A's audit finds the instance
    absent. Then, between two audits of A, an operator changes the compute node's
    MEMORY_MB ``reserved`` (plain HTTP) and nova's ``_revert_allocation`` moves the
    migration record's share back to the instance (``move_allocations``: one POST, two
    consumers, one move of A's generation); the old domain is spawned again. A's
    generation moved twice, and one allocation write explains one move: A's next cycle
    reads the compute node's details and undoes the operator's change (once, as any
    out-of-band change of a field the agent wrote on a provider it created), instead of
    trusting them until ``resource_provider_association_refresh`` (300 s)."""
    c, inst, mig = cloud, new(), new()
    a = c.hosts["A"]
    boot(c, inst)
    c.nova.start_move(inst, mig, c.node("A"))
    c.nova.schedule(inst, LARGE, c.node("A"))
    a.define(inst, LARGE)
    c.cycle("A", watch=(inst, mig))
    a.undefine(inst)
    c.cycle("A", watch=(inst, mig))
    c.expect("resize on A reverting: the new domain destroyed", A=usage(SMALL, LARGE), B=IDLE)

    root = c.nova.root(c.node("A"))
    agents = inventory(c.base, root, "MEMORY_MB")
    put_inventory(c.base, root, "MEMORY_MB", reserved=agents["reserved"] + 1024)
    c.nova.revert(inst, mig)
    a.define(inst, SMALL)
    c.cycle("A", watch=(inst, mig))
    c.expect("resize on A reverted", A=S, B=IDLE)
    assert inventory(c.base, root, "MEMORY_MB") == agents, "the operator's edit stayed hidden"


def test_state_lost_three_times_leaks_nothing(cloud):
    """Scenario 10. Three times, ``state_path`` is deleted between two cycles of A while
    three instances are gone from A (their allocations left by nova) and three new ones
    were booted (``claim_resources``, then the domain). The allocations of the gone
    instances are no instance's here: once periodic audits have found them absent for
    ``absent_instance_timeout``, they are removed; the live instances keep theirs."""
    c = cloud
    a = c.hosts["A"]
    live = [new() for _ in range(3)]
    gone_all: list[str] = []
    for inst in live:
        c.nova.schedule(inst, SMALL, c.node("A"))
        a.define(inst, SMALL)
    c.cycle("A")
    for _ in range(3):
        gone, live = live, [new() for _ in range(3)]
        gone_all += gone
        for inst in gone:
            a.undefine(inst)
        for inst in live:
            c.nova.schedule(inst, SMALL, c.node("A"))
            a.define(inst, SMALL)
        shutil.rmtree(a.state_path)
        c.cycle("A")
    a.now += GRACE + 100
    for _ in range(3):
        c.cycle("A")
    leaked = sorted(x for x in gone_all if c.holds(x))
    assert not leaked, f"{len(leaked)} allocations of gone instances leaked on A: {leaked}"
    assert c.usages("A") == usage(SMALL, SMALL, SMALL)
    assert all(c.holds(x) == {"A": S} for x in live)
