"""nova 34 moves an instance between two hosts, each running the agent (issue 26's judge).

Every allocation write here is nova's own code (tests/helpers/nova_client.py: the
scheduler's ``claim_resources``, the conductor's ``replace_allocation_with_migration``,
the compute manager's ``_delete_allocation_after_move`` and ``_revert_allocation``, the
resource tracker's evacuation and shelve-offload clean-ups) against one real Placement
(``served``: each agent and nova are separate clients of it). Hosts A and B each run the
agent with the fake driver; a host's file lists the domains defined on it. After every
step each host's agent runs one periodic cycle, then:

- each compute node's usages equal what nova intends (written out per step, in numbers),
- no agent cycle moved the generation of a consumer nova is moving (the instance, the
  migration record): nova's next write with the generation it read would fail,
- Placement refused none of nova's requests.

Each test reads like a gabbi file: a step, the hosts' domains, what Placement holds.
Beyond the walk: the conductor's own windows (scheduling with the source share on the
migration record, a destination dropped by its checks, its rollback), both agents cycling
between nova's reads and its writes, ``remove_unknown_allocations_after`` set during a
resize awaiting confirmation, and the agents as services with events.
"""

from __future__ import annotations

import uuid

import pytest

from agent.tracker.targeted import EventBatch
from tests.helpers.events import ThreadedService, service_ini, wait_until
from tests.helpers.nova_client import Flavor
from tests.helpers.nova_cloud import IDLE, LARGE, SMALL, Cloud, usage

S = usage(SMALL)
L = usage(LARGE)


@pytest.fixture
def served(served_module):
    """The module's one Placement: every cloud here has nodenames of its own."""
    return served_module


@pytest.fixture
def cloud(tmp_path, served) -> Cloud:
    return Cloud(tmp_path, served)


def boot(c: Cloud, inst: str, label: str = "A") -> None:
    """The scheduler claims SMALL on host ``label``; the domain is defined there after."""
    other = {"A": "B", "B": "A"}[label]
    c.nova.schedule(inst, SMALL, c.node(label))
    c.cycle(watch=(inst,))
    c.expect("boot: claimed, building", **{label: S, other: IDLE})
    c.hosts[label].define(inst, SMALL)
    c.cycle(watch=(inst,))
    c.expect("boot: running", **{label: S, other: IDLE})


def move_to_b(c: Cloud, inst: str, mig: str, new: Flavor = LARGE) -> tuple[str, ...]:
    """Resize (or cold or live migration) from A to B, to the point where the domain is on
    both hosts: the conductor moves A's share to the migration record, the scheduler claims
    B for the instance, B defines the domain (A keeps its own, shut off or running)."""
    c.nova.start_move(inst, mig, c.node("A"))
    c.nova.schedule(inst, new, c.node("B"))
    c.hosts["B"].define(inst, new)
    watch = (inst, mig)
    c.cycle(watch=watch)
    return watch


def test_boot(cloud):
    boot(cloud, str(uuid.uuid4()))
    assert cloud.cycle(watch=()) and cloud.usages("A") == S


def test_resize_awaiting_confirm_then_confirm(cloud):
    c, inst, mig = cloud, str(uuid.uuid4()), str(uuid.uuid4())
    boot(c, inst)
    watch = move_to_b(c, inst, mig)
    c.expect("resize A->B awaiting confirm", A=S, B=L)
    assert c.holds(mig) == {"A": S} and c.holds(inst) == {"B": L}
    c.cycle(watch=watch)
    c.expect("resize A->B awaiting confirm, a second cycle", A=S, B=L)

    c.hosts["A"].undefine(inst)
    c.nova.confirm(inst, mig)
    c.cycle(watch=watch)
    c.expect("resize confirmed", A=IDLE, B=L)
    assert c.holds(mig) == {} and c.holds(inst) == {"B": L}


def test_resize_awaiting_confirm_then_revert(cloud):
    c, inst, mig = cloud, str(uuid.uuid4()), str(uuid.uuid4())
    boot(c, inst)
    watch = move_to_b(c, inst, mig)
    c.expect("resize A->B awaiting confirm", A=S, B=L)

    c.hosts["B"].undefine(inst)
    c.nova.revert(inst, mig)
    c.cycle(watch=watch)
    c.expect("resize reverted", A=S, B=IDLE)
    assert c.holds(mig) == {} and c.holds(inst) == {"A": S}


def test_cold_migration(cloud):
    c, inst, mig = cloud, str(uuid.uuid4()), str(uuid.uuid4())
    boot(c, inst)
    watch = move_to_b(c, inst, mig, new=SMALL)
    c.expect("cold migration A->B awaiting confirm", A=S, B=S)

    c.hosts["A"].undefine(inst)
    c.nova.confirm(inst, mig)
    c.cycle(watch=watch)
    c.expect("cold migration confirmed", A=IDLE, B=S)


def test_live_migration_done(cloud):
    c, inst, mig = cloud, str(uuid.uuid4()), str(uuid.uuid4())
    boot(c, inst)
    watch = move_to_b(c, inst, mig, new=SMALL)
    c.expect("live migration A->B in progress", A=S, B=S)

    # _post_live_migration: the source domain is gone, the migration's share deleted.
    c.hosts["A"].undefine(inst)
    c.nova.confirm(inst, mig)
    c.cycle(watch=watch)
    c.expect("live migration done", A=IDLE, B=S)


def test_live_migration_rolled_back(cloud):
    c, inst, mig = cloud, str(uuid.uuid4()), str(uuid.uuid4())
    boot(c, inst)
    watch = move_to_b(c, inst, mig, new=SMALL)
    c.expect("live migration A->B in progress", A=S, B=S)

    # _rollback_live_migration: the destination's domain is cleaned up, A's share returns.
    c.hosts["B"].undefine(inst)
    c.nova.revert(inst, mig)
    c.cycle(watch=watch)
    c.expect("live migration rolled back", A=S, B=IDLE)


def test_live_migration_scheduling_refused_destination_and_conductor_rollback(cloud):
    """The conductor's windows before any compute host acts: A's share is on the migration
    record while the scheduler looks for a destination (the instance consumer holds
    nothing: it must not be healed, or nova's claim doubles it up as an evacuation), B is
    claimed and then dropped by the live migration's pre-checks, and the task rolls back."""
    c, inst, mig = cloud, str(uuid.uuid4()), str(uuid.uuid4())
    boot(c, inst)
    watch = (inst, mig)
    c.nova.start_move(inst, mig, c.node("A"))
    c.cycle(watch=watch)
    c.expect("live migration: scheduling", A=S, B=IDLE)
    assert c.holds(inst) == {} and c.holds(mig) == {"A": S}

    c.nova.schedule(inst, SMALL, c.node("B"))
    c.cycle(watch=watch)
    c.expect("live migration: B claimed, pre-checks running", A=S, B=S)
    assert c.holds(inst) == {"B": S}

    c.nova.unclaim(inst, c.node("B"))
    c.cycle(watch=watch)
    c.expect("live migration: B refused by the pre-checks", A=S, B=IDLE)

    c.nova.abort_move(inst, mig, c.node("A"))
    c.cycle(watch=watch)
    c.expect("live migration: no valid host, rolled back", A=S, B=IDLE)
    assert c.holds(inst) == {"A": S} and c.holds(mig) == {}


def test_evacuation_while_source_down_then_source_returns(cloud):
    c, inst = cloud, str(uuid.uuid4())
    boot(c, inst)
    # Host A is down: no cycle there. The scheduler claims B in addition to A.
    c.nova.schedule(inst, SMALL, c.node("B"))
    c.hosts["B"].define(inst, SMALL)
    c.cycle("B", watch=(inst,))
    c.expect("evacuated to B, A down", A=S, B=S)
    assert c.holds(inst) == {"A": S, "B": S}

    c.cycle("A", "B", watch=(inst,))
    c.expect("A back, evacuated domain still defined there", A=S, B=S)

    # init_host on A: _destroy_evacuated_instances destroys it, then removes A's share.
    c.hosts["A"].undefine(inst)
    c.nova.remove_evacuated(inst, c.node("A"))
    c.cycle(watch=(inst,))
    c.expect("evacuated domain destroyed on A", A=IDLE, B=S)
    assert c.holds(inst) == {"B": S}


def test_shelve_offload_then_unshelve(cloud):
    c, inst = cloud, str(uuid.uuid4())
    boot(c, inst)
    c.hosts["A"].undefine(inst)
    c.nova.shelve_offload(inst)
    c.cycle(watch=(inst,))
    c.expect("shelved offloaded", A=IDLE, B=IDLE)

    c.nova.schedule(inst, SMALL, c.node("B"))
    c.cycle(watch=(inst,))
    c.expect("unshelve: claimed on B, building", A=IDLE, B=S)
    c.hosts["B"].define(inst, SMALL)
    c.cycle(watch=(inst,))
    c.expect("unshelved on B", A=IDLE, B=S)


def test_resize_to_same_host(cloud):
    c, inst, mig = cloud, str(uuid.uuid4()), str(uuid.uuid4())
    boot(c, inst)
    c.nova.start_move(inst, mig, c.node("A"))
    c.nova.schedule(inst, LARGE, c.node("A"))
    c.hosts["A"].define(inst, LARGE)
    watch = (inst, mig)
    c.cycle(watch=watch)
    c.expect("resize on A awaiting confirm", A=usage(SMALL, LARGE), B=IDLE)
    assert c.holds(mig) == {"A": S} and c.holds(inst) == {"A": L}

    c.nova.confirm(inst, mig)
    c.cycle(watch=watch)
    c.expect("resize on A confirmed", A=L, B=IDLE)


@pytest.mark.parametrize("lost_first", [True, False], ids=["lost sorts first", "lost sorts last"])
def test_one_record_explains_one_instance(cloud, lost_first):
    """Issue 33, case 4: C's resize to B awaits confirmation (its migration record holds
    its old share on A); D, of the same project, user and flavor, has lost its
    allocation on A. C, already moving, claims its own record; D is healed, whichever
    sorts first by UUID."""
    c = cloud
    first, last = sorted(str(uuid.uuid4()) for _ in range(2))
    lost, resized = (first, last) if lost_first else (last, first)
    mig = str(uuid.uuid4())
    for inst in (resized, lost):
        c.nova.schedule(inst, SMALL, c.node("A"))
        c.hosts["A"].define(inst, SMALL)
    c.cycle(watch=(resized, lost))
    c.expect("C and D booted on A", A=usage(SMALL, SMALL), B=IDLE)
    move_to_b(c, resized, mig)
    c.cycle(watch=(resized, mig))
    c.expect("C's resize A->B awaiting confirm", A=usage(SMALL, SMALL), B=L)
    c.nova.client.delete_allocation_for_instance(c.nova.context, lost, force=True)
    c.cycle(watch=(resized, mig))
    c.expect("D's allocation healed, C's record untouched", A=usage(SMALL, SMALL), B=L)
    assert c.holds(lost) == {"A": S} and c.holds(mig) == {"A": S}


def test_a_momentary_absence_of_the_domain_releases_nothing(cloud):
    """Issue 33, case 6: the agent once healed the instance (its allocation was lost);
    later nova resizes it on the same host, writing its new allocation, and the domain is
    redefined: a cycle lands while it is undefined. The allocation is nova's now (its
    consumer generation moved since the agent's write), so one listing without the domain
    does not release it (a second audit would): neither released nor written again."""
    c, inst, mig = cloud, str(uuid.uuid4()), str(uuid.uuid4())
    c.hosts["A"].define(inst, SMALL)  # no claim: the agent heals it (its own write)
    for _ in range(2):
        c.cycle(watch=())
        c.expect("healed by the agent", A=S, B=IDLE)
    c.nova.start_move(inst, mig, c.node("A"))
    c.nova.schedule(inst, LARGE, c.node("A"))
    c.hosts["A"].undefine(inst)
    c.cycle(watch=(inst, mig))
    c.expect("resize on A: the domain is being redefined", A=usage(SMALL, LARGE), B=IDLE)
    c.hosts["A"].define(inst, LARGE)
    c.cycle(watch=(inst, mig))
    c.expect("resize on A awaiting confirm", A=usage(SMALL, LARGE), B=IDLE)
    c.nova.confirm(inst, mig)
    c.cycle(watch=(inst, mig))
    c.expect("resize on A confirmed", A=L, B=IDLE)


def test_the_conductors_window_beside_a_new_claim_of_the_same_amounts(cloud):
    """One record explains one instance, by evidence, never by UUID order (issue 33, case
    4): while the conductor holds the instance's share on its migration record, the
    scheduler claims the same flavor on A for a new instance of another project whose UUID
    sorts before the record's. That claim is nobody's migration record (another owner):
    the instance is *moving*, not healed (found by the shared-storage machine)."""
    c, inst = cloud, str(uuid.uuid4())
    new, mig = sorted(str(uuid.uuid4()) for _ in range(2))
    c.nova.schedule(inst, SMALL, c.node("A"), "p1")
    c.hosts["A"].define(inst, SMALL, "p1")
    c.cycle(watch=(inst,))
    c.nova.start_move(inst, mig, c.node("A"))
    c.nova.schedule(new, SMALL, c.node("A"), "p2")
    c.cycle(watch=(inst, mig, new))
    c.expect("move being scheduled beside a new claim", A=usage(SMALL, SMALL), B=IDLE)
    assert c.holds(inst) == {}


def test_an_event_in_the_conductors_window_heals_nothing(cloud):
    """Issue 39 (found by the events machine of test_nova_property.py): the conductor has
    moved the instance's share on A to its migration record and the scheduler has not
    claimed B yet; an event of A's domain (started, stopped) reaches A's agent. The
    targeted update applies the audit's states: the instance is *moving* (a consumer
    without type of its project and user holds exactly its share here), so nothing is
    written; healing it would make the scheduler's ``claim_resources`` merge A's share
    into the destination's claim."""
    c, inst, mig = cloud, str(uuid.uuid4()), str(uuid.uuid4())
    boot(c, inst)
    c.nova.start_move(inst, mig, c.node("A"))
    host = c.hosts["A"]
    outcome = host.tracker.apply_events(EventBatch(instances={host.nodename: {inst}}, events=1))
    assert outcome.written == [] and outcome.errors == [], outcome
    assert c.holds(inst) == {} and c.holds(mig) == {"A": S}
    c.nova.schedule(inst, LARGE, c.node("B"))
    c.hosts["B"].define(inst, LARGE)
    c.cycle(watch=(inst, mig))
    c.expect("resize A->B awaiting confirm, after an event in the conductor's window", A=S, B=L)


def test_two_momentary_absences_with_novas_write_between_release_nothing(cloud):
    """Issue 33, case 6, twice: a same-host resize whose domain is undefined during one
    audit (found gone: deferred), reverted by nova (its write), then a reboot undefines the
    domain again before any audit saw it back. nova wrote the allocation since the first
    audit found it gone, so the second audit does not count as finding it *still* gone:
    nothing is released (found by the shared-storage machine)."""
    c, inst, mig = cloud, str(uuid.uuid4()), str(uuid.uuid4())
    boot(c, inst)
    c.nova.start_move(inst, mig, c.node("A"))
    c.nova.schedule(inst, LARGE, c.node("A"))
    c.hosts["A"].undefine(inst)
    c.cycle("A", watch=(inst, mig))
    c.hosts["A"].define(inst, SMALL)
    c.nova.revert(inst, mig)
    c.hosts["A"].undefine(inst)
    c.cycle("A", watch=(inst,))
    c.expect("reverted, then rebooted: the domain absent again", A=S, B=IDLE)
    c.hosts["A"].define(inst, SMALL)
    c.cycle(watch=(inst,))
    c.expect("rebooted", A=S, B=IDLE)


def test_agent_cycles_between_nova_reads_and_writes(cloud):
    """Both agents run a cycle just before every write nova sends, after the reads it took
    the consumers' generations from (the race nova's generations guard against): resize and
    revert, cold migration and confirm. No nova call fails, and Placement is nova's intent."""
    c, inst = cloud, str(uuid.uuid4())
    boot(c, inst)
    mig = str(uuid.uuid4())
    c.nova.adapter.before_write = lambda _method, _url: c.cycle(watch=(inst, mig))
    watch = move_to_b(c, inst, mig)
    c.expect("resize A->B awaiting confirm, cycles inside nova's requests", A=S, B=L)
    c.hosts["B"].undefine(inst)
    c.nova.revert(inst, mig)
    c.cycle(watch=watch)
    c.expect("resize reverted, cycles inside nova's requests", A=S, B=IDLE)

    mig = str(uuid.uuid4())
    c.nova.adapter.before_write = lambda _method, _url: c.cycle(watch=(inst, mig))
    watch = move_to_b(c, inst, mig, new=SMALL)
    c.expect("cold migration A->B, cycles inside nova's requests", A=S, B=S)
    c.hosts["A"].undefine(inst)
    c.nova.confirm(inst, mig)
    c.cycle(watch=watch)
    c.expect("cold migration confirmed, cycles inside nova's requests", A=IDLE, B=S)


def test_resize_awaiting_confirm_with_unknown_removal_on(tmp_path, served):
    """``[compute] remove_unknown_allocations_after`` set: nova's migration record (a
    consumer without type, since nova writes at 1.28-1.36) holds A's share for as long as
    the resize waits for confirmation (``resize_confirm_window`` 0: forever); the agent
    must never remove it while the move is in progress."""
    c = Cloud(tmp_path, served, compute={"remove_unknown_allocations_after": 100})
    inst, mig = str(uuid.uuid4()), str(uuid.uuid4())
    boot(c, inst)
    watch = move_to_b(c, inst, mig)
    for n in range(4):  # each cycle moves the agents' clocks a minute on
        c.cycle(watch=watch)
        c.expect(f"resize A->B awaiting confirm, {n + 2} minutes later", A=S, B=L)
    assert c.holds(mig) == {"A": S}

    c.hosts["A"].undefine(inst)
    c.nova.confirm(inst, mig)
    c.cycle(watch=watch)
    c.expect("resize confirmed", A=IDLE, B=L)


def test_resize_awaiting_confirm_with_services(tmp_path, served):
    """The agents as services: each host's service watches its host file (events) and
    runs a cycle when asked (``Service.request_cycle``, as SIGHUP's early cycle does;
    the interval is an hour). Through the resize's window, B's domain arriving as an event
    and a periodic cycle of each service leave Placement as nova wrote it; the confirm's
    undefine on A reaches A's service as an event."""
    c, inst, mig = Cloud(tmp_path / "nova", served), str(uuid.uuid4()), str(uuid.uuid4())
    boot(c, inst)
    services = {}
    for label, host in c.hosts.items():
        ini = service_ini(
            tmp_path / f"{label}.ini",
            tmp_path / f"svc-{label}",
            served.url,
            f"[compute]\ndriver = fake\n[fake]\nhost_file = {host.host_path}\nwatch_delay = 0.05",
        )
        services[label] = ThreadedService(ini).start()
    try:
        c.nova.start_move(inst, mig, c.node("A"))
        c.nova.schedule(inst, LARGE, c.node("B"))
        moved = {x: c.generation(x) for x in (inst, mig)}
        events_b = services["B"].event_updates()
        c.hosts["B"].define(inst, LARGE)
        wait_until(lambda: services["B"].event_updates() > events_b, 30, "B's event")
        c.expect("resize A->B awaiting confirm, B's event", A=S, B=L)
        for s in services.values():
            cycles = s.svc.cycles
            s.svc.request_cycle()
            s.wait_cycles(cycles + 1)
        c.expect("resize A->B awaiting confirm, a cycle of each service", A=S, B=L)
        assert {x: c.generation(x) for x in (inst, mig)} == moved, "the services rewrote them"

        events_a = services["A"].event_updates()
        c.hosts["A"].undefine(inst)
        c.nova.confirm(inst, mig)
        wait_until(lambda: services["A"].event_updates() > events_a, 30, "A's event")
        c.expect("resize confirmed, A's event", A=IDLE, B=L)
    finally:
        codes = {label: s.stop() for label, s in services.items()}
    assert codes == {"A": 0, "B": 0}
