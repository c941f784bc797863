"""nova's moves between two hosts, each with nova-compute's tracker and the agent (issue 39).

Each host runs nova-compute 34's own ``ResourceTracker`` and ``LibvirtDriver`` (fakelibvirt)
in a process of its own, which created the host's compute node at start-up and writes the
host's tree again at the end of every claim, and beside it the agent on the fake driver
laying out the same tree (:mod:`tests.helpers.two_trackers`). nova's scheduler, conductor
and compute manager write the instances' allocations with nova's own code
(:mod:`tests.helpers.nova_client`). Each domain defined or destroyed reaches its host's
agent as the targeted update its service makes after the driver's event
(``apply_events``), and the agents' periodic cycles land where nova's requests leave room:
between nova's reads of the consumers' generations and the write that carries them
(``before_write``).

After each step: each compute node's usages are nova's intent, no agent cycle moved a
consumer nova holds, Placement refused nova nothing and no nova call raised
(``AllocationMoveFailed`` included), every agent cycle and targeted update was ``ok``, and
neither nova-compute's tracker nor the agent wrote a host's tree after both had started.

The revert (docs/service.md, "Allocation audit": an allocation another writer made is
removed only after the instance has been absent for ``[compute] absent_instance_timeout``,
counted by periodic audits, never by events): the destination's ``revert_resize``
destroys the domain (its agent's service gets the event), then the source's
``_finish_revert_resize`` runs ``_revert_allocation`` (``move_allocations``: GET the
migration record, GET the instance, POST both with their generations). The destination
agent's periodic cycle inside that window must leave the instance's destination part to
nova's POST.
"""

from __future__ import annotations

import uuid

import pytest

from tests.helpers.nova_client import Flavor
from tests.helpers.nova_cloud import IDLE, LARGE, SMALL, usage
from tests.helpers.nova_compute import NovaCompute
from tests.helpers.two_trackers import TwoTrackers

S, L = usage(SMALL), usage(LARGE)


@pytest.fixture(scope="module")
def computes(tmp_path_factory):
    """One nova-compute process per host label for the module; a new host per test."""
    procs = {label: NovaCompute(tmp_path_factory.mktemp(f"nova-compute-{label}")) for label in "AB"}
    yield procs
    for proc in procs.values():
        proc.close()


@pytest.fixture
def cloud(tmp_path, served, computes) -> TwoTrackers:
    return TwoTrackers(tmp_path / "cloud", served, computes)


def boot(c: TwoTrackers, inst: str, label: str, flavor: Flavor = SMALL) -> None:
    """The scheduler claims ``flavor`` on ``label``, nova-compute's ``instance_claim`` ends
    (its tree written where it differs), the domain is defined (an event), a cycle."""
    c.nova.schedule(inst, flavor, c.node(label))
    c.claimed(label)
    c.hosts[label].define(inst, flavor)
    c.event(label, inst)
    c.cycle(watch=(inst,))


def start_resize(c: TwoTrackers, inst: str, mig: str, src: str, dest: str, new: Flavor) -> None:
    """Resize ``src`` -> ``dest`` to the point where the domain is on both hosts: the
    conductor's move to the migration record, the scheduler's claim, the destination's
    ``resize_claim`` (its tree), the domain defined there (an event)."""
    c.nova.start_move(inst, mig, c.node(src))
    c.nova.schedule(inst, new, c.node(dest))
    c.claimed(dest)
    c.hosts[dest].define(inst, new)
    c.event(dest, inst)


def revert(c: TwoTrackers, inst: str, mig: str, src: str, dest: str, race: str) -> None:
    """nova reverts the resize: the destination's ``revert_resize`` destroys the domain
    (its service gets the event) and drops its move claim (``drop_move_claim_at_dest``:
    its tree); the source's ``_finish_revert_resize`` moves the migration record's
    allocation back to the instance, host ``race``'s agent running a periodic cycle between
    nova's reads and its POST; then the source powers its domain on (an event)."""
    c.hosts[dest].undefine(inst)
    c.event(dest, inst)
    c.claimed(dest)
    _inside_next_nova_write(c, race, (inst, mig))
    c.nova.revert(inst, mig)
    c.event(src, inst)


def confirm(c: TwoTrackers, inst: str, mig: str, src: str, race: str) -> None:
    """nova confirms the resize: the source destroys its domain (an event) and drops its
    move claim (its tree), then deletes the migration record's allocation
    (``_delete_allocation_after_move``: GET, PUT with the generation), host ``race``'s agent
    cycling between the two."""
    c.hosts[src].undefine(inst)
    c.event(src, inst)
    c.claimed(src)
    _inside_next_nova_write(c, race, (inst, mig))
    c.nova.confirm(inst, mig)


def _inside_next_nova_write(c: TwoTrackers, label: str, watch: tuple[str, ...]) -> None:
    """Host ``label``'s agent runs one periodic cycle just before nova's next write, after
    the reads nova took the generations from (once)."""

    def race(_method: str, _url: str) -> None:
        c.nova.adapter.before_write = None
        c.cycle(label, watch=watch)

    c.nova.adapter.before_write = race


def test_resize_then_revert_with_a_cycle_inside_novas_revert(cloud):
    """Issue 39, scenario 1: the destination's agent gets the event of the destroyed
    domain, then its periodic cycle lands inside ``move_allocations``. nova's POST must
    succeed, and the instance holds its old flavor on A again."""
    c, inst, mig = cloud, str(uuid.uuid4()), str(uuid.uuid4())
    boot(c, inst, "A")
    c.expect("booted on A", A=S, B=IDLE)
    start_resize(c, inst, mig, "A", "B", LARGE)
    c.cycle(watch=(inst, mig))
    c.expect("resize A->B awaiting confirm", A=S, B=L)

    revert(c, inst, mig, "A", "B", race="B")
    c.cycle(watch=(inst,))
    c.expect("resize reverted, B's cycle inside nova's move", A=S, B=IDLE)
    assert c.holds(inst) == {"A": S} and c.holds(mig) == {}
    c.cycle(watch=(inst,))
    c.expect("resize reverted, one more cycle", A=S, B=IDLE)


def test_crossing_moves_confirm_one_revert_the_other(cloud):
    """X resizes A -> B while Y resizes B -> A; X is confirmed and Y reverted, an agent's
    periodic cycle inside each of nova's writes (the revert's on Y's destination A, whose
    agent had the event of Y's destroyed domain)."""
    c = cloud
    x, y, mig_x, mig_y = (str(uuid.uuid4()) for _ in range(4))
    boot(c, x, "A")
    boot(c, y, "B")
    c.expect("X on A, Y on B", A=S, B=S)

    start_resize(c, x, mig_x, "A", "B", LARGE)
    start_resize(c, y, mig_y, "B", "A", LARGE)
    watch = (x, y, mig_x, mig_y)
    c.cycle(watch=watch)
    c.expect("X A->B and Y B->A awaiting confirm", A=usage(SMALL, LARGE), B=usage(SMALL, LARGE))

    confirm(c, x, mig_x, "A", race="A")
    c.cycle(watch=(x, y, mig_y))
    c.expect("X confirmed on B, A's cycle inside nova's delete", A=L, B=usage(LARGE, SMALL))

    revert(c, y, mig_y, "B", "A", race="A")
    c.cycle(watch=(x, y))
    c.expect("Y reverted to B, A's cycle inside nova's move", A=IDLE, B=usage(LARGE, SMALL))
    assert c.holds(x) == {"B": L} and c.holds(y) == {"B": S}
    assert c.holds(mig_x) == {} and c.holds(mig_y) == {}


def test_crossing_moves_revert_one_confirm_the_other(cloud):
    """As above, the other way round: X's revert (B's agent cycling inside the move, after
    the event of X's destroyed domain on B), then Y's confirm."""
    c = cloud
    x, y, mig_x, mig_y = (str(uuid.uuid4()) for _ in range(4))
    boot(c, x, "A")
    boot(c, y, "B")
    start_resize(c, x, mig_x, "A", "B", LARGE)
    start_resize(c, y, mig_y, "B", "A", SMALL)
    watch = (x, y, mig_x, mig_y)
    c.cycle(watch=watch)
    c.expect("X A->B resize, Y B->A migration", A=usage(SMALL, SMALL), B=usage(SMALL, LARGE))

    revert(c, x, mig_x, "A", "B", race="B")
    c.cycle(watch=(x, y, mig_y))
    c.expect("X reverted to A, B's cycle inside nova's move", A=usage(SMALL, SMALL), B=S)

    confirm(c, y, mig_y, "B", race="B")
    c.cycle(watch=(x, y))
    c.expect("Y confirmed on A, B's cycle inside nova's delete", A=usage(SMALL, SMALL), B=IDLE)
    assert c.holds(x) == {"A": S} and c.holds(y) == {"A": S}
