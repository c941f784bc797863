"""nova's moves, agent cycles, out-of-band deletes and failed requests, interleaved (issue 26).

A hypothesis state machine over two hosts, each running the agent (fake driver), and
nova's own allocation writes (tests/helpers/nova_client.py) on one served Placement. The
model is nova's intent: which consumer (instance or migration record) holds which flavor
on which host, and which domains each host's hypervisor has. Steps: boot, spawn, move
(resize, cold or live migration, resize to the same host: the conductor's move to a
migration record, the scheduler's claim, a destination dropped by the conductor's checks,
the task rolled back, the domain defined on the destination), confirm or finish, revert or
roll back, evacuation with the source down, the source returning, its clean-up, shelve
offload, unshelve, delete; an agent cycle landing between nova's reads and its write; an
operator deleting an instance's allocation out of band; one agent cycle on either host; a
500 answered to one of the agent's next requests; the agent killed at its k-th write of a
cycle and restarted from the state it left (tests/helpers/faults.py).

Invariants, checked by ``settle`` (a step of its own, and at the end of every run): once
the faults stop, one cycle of each running host's agent makes every consumer's allocation
in Placement nova's intent, leaves no consumer on the hosts' providers that nova does not
intend (nothing leaked), and leaves the foreign consumer (a neutron port's bandwidth on a
provider neutron created under host A's compute node) untouched. No agent cycle ever moves
the generation of a consumer nova holds (an instance whose allocation was deleted out of
band is healed by the agent: it is not watched until healed), and Placement refuses nova
nothing.

A second machine (:func:`shared_machine`, issue 33) runs the same steps on shared storage:
two pools in the hosts' aggregate, a flavor asking a class only a provider config file
gives, and two same-host operations (a reboot, a resize with the domain absent for one
cycle); its judge is what nova's own calls wrote, read back after each of them, for every
provider, pools included. The four defects it found are reproduced in
test_nova_shared_storage.py and test_operator_additions.py.

A third machine (:func:`events_machine`, issue 39) adds the agent's events (targeted
updates at any point, inside nova's windows included), retries (nova's step run just before
the agent's allocation write), a same-host rebuild with the domain absent across audits,
and domains lost without nova whose leaks must go once the hosts' clocks pass ``[compute]
absent_instance_timeout``. What it found is reproduced in test_nova_moves.py
(``test_an_event_in_the_conductors_window_heals_nothing``) and test_two_trackers.py.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from agent.tracker.targeted import EventBatch
from tests.helpers.faults import Killed, any_write, before_send, fail_at, kill_at, matching
from tests.helpers.nova_client import Flavor
from tests.helpers.nova_cloud import LARGE, SMALL, Cloud, Usage
from tests.helpers.placement_http import call, http, http_get

HOSTS = st.sampled_from(["A", "B"])
FLAVORS = st.sampled_from([SMALL, LARGE])
OTHER = {"A": "B", "B": "A"}


@dataclass
class Server:
    """nova's view of one instance.

    ``state``: building, active, scheduling, claimed, moving, evacuated, shelved or
    deleted. ``holds``: the instance consumer's intent ``{host: flavor}``;
    ``mig``/``mig_holds``: the migration record of a move in progress and its intent.
    ``src``/``dest``/``old``: the move's hosts and old flavor. ``unhealed``: its
    allocation was deleted out of band since the last settle.
    """

    uuid: str
    state: str
    host: str
    flavor: Flavor
    holds: dict[str, Flavor] = field(default_factory=dict)
    mig: str = ""
    mig_holds: dict[str, Flavor] = field(default_factory=dict)
    src: str = ""
    dest: str = ""
    old: Flavor | None = None
    unhealed: bool = False

    @property
    def project(self) -> str:
        """Its own project: a migration record carries its instance's project and user, and
        with two instances of one owner and one flavor on a host, an instance whose
        allocation was deleted out of band cannot be told from its sibling being moved."""
        return self.uuid.replace("-", "")


def _ready(state: str, up: bool = True):
    """Precondition: some instance is in ``state`` (allocation not deleted out of band),
    and, with ``up``, no host is down (nova does not move instances off a down host's
    neighbour while an evacuation is under way, in this model)."""

    def check(self) -> bool:
        if up and self.down:
            return False
        return any(s.state == state and not s.unhealed for s in self.servers.values())

    return check


def _intent(holds: dict[str, Flavor]) -> dict[str, Usage]:
    return {label: f.resources() for label, f in holds.items()}


def machine(tmp_path, served):  # noqa: C901 (one state machine: one rule per nova step)
    class NovaAndAgents(RuleBasedStateMachine):
        flavors = FLAVORS

        def __init__(self) -> None:
            super().__init__()
            self.c = self.cloud(tmp_path / uuid.uuid4().hex[:8])
            self.servers: dict[str, Server] = {}
            self.down: set[str] = set()
            self.foreign = self._foreign()

        # -- helpers ---------------------------------------------------------------------

        def cloud(self, workdir: Path) -> Cloud:
            """Hosts A and B with their agents, on local disks."""
            return Cloud(workdir, served)

        def _foreign(self) -> str:
            """neutron's bandwidth provider under A's compute node, and a port's consumer."""
            root = self.c.nova.root(self.c.node("A"))
            rp = call(
                self.c.base,
                "POST",
                "/resource_providers",
                {"name": f"{self.c.node('A')}:NIC Switch agent:ens1", "parent_provider_uuid": root},
            )["uuid"]
            inv = {"inventories": {"NET_BW_EGR_KILOBIT_PER_SEC": {"total": 10000}}}
            http(
                self.c.base,
                "PUT",
                f"/resource_providers/{rp}/inventories",
                inv | {"resource_provider_generation": 0},
            )
            port = str(uuid.uuid4())
            body = {
                "allocations": {rp: {"resources": {"NET_BW_EGR_KILOBIT_PER_SEC": 1000}}},
                "project_id": "neutron-p",
                "user_id": "neutron-u",
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            }
            http(self.c.base, "PUT", f"/allocations/{port}", body)
            self.foreign_seen = http_get(self.c.base, f"/allocations/{port}")
            return port

        def watched(self) -> tuple[str, ...]:
            out = [s.uuid for s in self.servers.values() if not s.unhealed]
            out += [s.mig for s in self.servers.values() if s.mig]
            return (*out, self.foreign)

        def cycle(self, label: str) -> None:
            if label not in self.down:
                self.c.cycle(label, watch=self.watched())

        def pick(self, data: st.DataObject, state: str) -> Server | None:
            # In boot order, not by UUID: a run draws the same instance when hypothesis
            # replays it (the UUIDs are new each time).
            candidates = [
                s.uuid for s in self.servers.values() if s.state == state and not s.unhealed
            ]
            return self.servers[data.draw(st.sampled_from(candidates))] if candidates else None

        # -- nova --------------------------------------------------------------------------

        def applicable(self) -> list[str]:
            """The nova operations that can happen now (nova's own preconditions, as far
            as this model goes: nothing moves while a host is down but the evacuation's)."""
            states = {s.state for s in self.servers.values() if not s.unhealed}
            if self.down:
                return ["source_returns"]
            alive = [s for s in self.servers.values() if s.state != "deleted"]
            ops = ["boot"] if len(alive) < 2 else []
            for state, more in (
                ("building", ["spawn"]),
                ("active", ["move", "evacuate", "shelve_offload", "delete"]),
                ("scheduling", ["claim", "abort"]),
                ("claimed", ["unclaim", "migrate"]),
                ("moving", ["confirm", "revert"]),
                ("evacuated", ["clean_evacuated"]),
                ("shelved", ["unshelve"]),
            ):
                ops += more if state in states else []
            return ops

        @initialize(data=st.data())
        def first_instance(self, data: st.DataObject) -> None:
            """Every run starts with an instance running on A (claimed, then spawned)."""
            inst, flavor = str(uuid.uuid4()), self.boot_flavor(data)
            s = self.servers[inst] = Server(inst, "active", "A", flavor, {"A": flavor})
            self.place(data, s, "A")
            self.c.hosts["A"].define(inst, flavor, s.project)
            self.c.cycle(watch=self.watched())
            self.remember()

        def boot_flavor(self, data: st.DataObject) -> Flavor:
            """The flavor a new instance boots with."""
            return SMALL

        def place(self, data: st.DataObject, s: Server, label: str) -> None:
            """nova's scheduler claims ``s.flavor`` for ``s`` on host ``label``."""
            self.c.nova.schedule(s.uuid, s.flavor, self.c.node(label), s.project)

        def remember(self) -> None:
            """After each of nova's operations (nothing to note for this machine's model)."""

        def nova(self, data: st.DataObject) -> None:
            """One of nova's operations that can happen now."""
            getattr(self, "_" + data.draw(st.sampled_from(self.applicable())))(data)
            self.remember()

        def _boot(self, data: st.DataObject) -> None:
            label, flavor = data.draw(HOSTS), self.boot_flavor(data)
            inst = str(uuid.uuid4())
            s = self.servers[inst] = Server(inst, "building", label, flavor, {label: flavor})
            self.place(data, s, label)

        def _spawn(self, data: st.DataObject) -> None:
            s = self.pick(data, "building")
            if s and s.host not in self.down:
                self.c.hosts[s.host].define(s.uuid, s.flavor, s.project)
                s.state = "active"

        def _move(self, data: st.DataObject) -> None:
            """Resize, cold or live migration (``new`` the same flavor), or a resize on the
            same host, first stage: the conductor moves the source share to a migration
            record; the scheduler has not claimed the destination yet."""
            s = self.pick(data, "active")
            dest, new = data.draw(HOSTS), data.draw(self.flavors)
            if not s or (dest == s.host and new == s.flavor):
                return
            s.mig = str(uuid.uuid4())
            self.c.nova.start_move(s.uuid, s.mig, self.c.node(s.host))
            s.state, s.src, s.dest, s.old, s.flavor = "scheduling", s.host, dest, s.flavor, new
            s.mig_holds, s.holds = {s.src: s.old}, {}

        def _claim(self, data: st.DataObject) -> None:
            """The scheduler claims the destination (the domain is not there yet)."""
            s = self.pick(data, "scheduling")
            if s:
                self.place(data, s, s.dest)
                s.state, s.holds = "claimed", {s.dest: s.flavor}

        def _unclaim(self, data: st.DataObject) -> None:
            """The destination fails the conductor's checks: its claim is dropped."""
            s = self.pick(data, "claimed")
            if s:
                self.c.nova.unclaim(s.uuid, self.c.node(s.dest))
                s.state, s.holds = "scheduling", {}

        def _abort(self, data: st.DataObject) -> None:
            """No valid destination: the conductor's task gives the share back."""
            s = self.pick(data, "scheduling")
            if s:
                assert s.old is not None
                self.c.nova.abort_move(s.uuid, s.mig, self.c.node(s.src))
                s.state, s.flavor, s.holds = "active", s.old, {s.src: s.old}
                s.mig, s.mig_holds = "", {}

        def _migrate(self, data: st.DataObject) -> None:
            """The destination defines the domain (the source keeps its own)."""
            s = self.pick(data, "claimed")
            if s:
                self.c.hosts[s.dest].define(s.uuid, s.flavor, s.project)
                s.state, s.host = "moving", s.dest

        def _confirm(self, data: st.DataObject) -> None:
            s = self.pick(data, "moving")
            if not s:
                return
            if s.src != s.dest:
                self.c.hosts[s.src].undefine(s.uuid)
            self.c.nova.confirm(s.uuid, s.mig)
            s.state, s.mig, s.mig_holds = "active", "", {}

        def _revert(self, data: st.DataObject) -> None:
            s = self.pick(data, "moving")
            if not s:
                return
            assert s.old is not None
            if s.src != s.dest:
                self.c.hosts[s.dest].undefine(s.uuid)
            else:
                self.c.hosts[s.src].define(s.uuid, s.old, s.project)
            self.c.nova.revert(s.uuid, s.mig)
            s.state, s.host, s.flavor, s.holds = "active", s.src, s.old, {s.src: s.old}
            s.mig, s.mig_holds = "", {}

        def _evacuate(self, data: st.DataObject) -> None:
            s = self.pick(data, "active")
            if not s:
                return
            src, dest = s.host, OTHER[s.host]
            if any(x.unhealed and x.host == src for x in self.servers.values()):
                return  # its agent must heal that one first (settle cannot while it is down)
            self.down.add(src)
            self.place(data, s, dest)
            self.c.hosts[dest].define(s.uuid, s.flavor, s.project)
            s.state, s.src, s.dest, s.host = "evacuated", src, dest, dest
            s.holds = {src: s.flavor, dest: s.flavor}

        def _source_returns(self, data: st.DataObject) -> None:
            self.down.clear()

        def _clean_evacuated(self, data: st.DataObject) -> None:
            s = self.pick(data, "evacuated")
            if not s:
                return
            self.c.hosts[s.src].undefine(s.uuid)
            self.c.nova.remove_evacuated(s.uuid, self.c.node(s.src))
            s.state, s.holds = "active", {s.dest: s.flavor}

        def _shelve_offload(self, data: st.DataObject) -> None:
            s = self.pick(data, "active")
            if not s:
                return
            self.c.hosts[s.host].undefine(s.uuid)
            self.c.nova.shelve_offload(s.uuid)
            s.state, s.holds = "shelved", {}

        def _delete(self, data: st.DataObject) -> None:
            s = self.pick(data, "active")
            if not s:
                return
            self.c.hosts[s.host].undefine(s.uuid)
            self.c.nova.delete(s.uuid)
            s.state, s.holds = "deleted", {}

        def _unshelve(self, data: st.DataObject) -> None:
            label = data.draw(HOSTS)
            s = self.pick(data, "shelved")
            if not s:
                return
            self.place(data, s, label)
            s.state, s.host, s.holds = "building", label, {label: s.flavor}

        # -- others: an operator, the agents, faults -----------------------------------------

        def delete_out_of_band(self, data: st.DataObject) -> None:
            """An operator deletes a running instance's allocation; nova still intends it."""
            s = self.pick(data, "active")
            if s and s.host not in self.down:
                http(self.c.base, "DELETE", f"/allocations/{s.uuid}")
                s.unhealed = True

        def agent_cycle(self, data: st.DataObject) -> None:
            self.cycle(data.draw(HOSTS))

        def fail_next_request(self, data: st.DataObject) -> None:
            """The next such request of a host's agent is answered 500 (a real Placement
            cannot be made to fail one request on demand: tests/helpers/faults.py)."""
            label = data.draw(HOSTS)
            which = data.draw(st.sampled_from(["write", "read-allocations", "any"]))
            match = {
                "write": any_write,
                "read-allocations": matching("GET", "/allocations"),
                "any": lambda _m, _t: True,
            }[which]
            fail_at(self.c.hosts[label].client, match)

        def cycle_inside_next_nova_write(self, data: st.DataObject) -> None:
            """A host's agent runs a cycle just before nova's next write, after the reads
            nova took the generations from (once)."""
            label = data.draw(HOSTS)
            adapter = self.c.nova.adapter

            def race(_method: str, _url: str) -> None:
                adapter.before_write = None
                self.cycle(label)

            adapter.before_write = race

        def kill_during_cycle(self, data: st.DataObject) -> None:
            """A host's agent dies at its k-th write of a cycle (the write sent or not), and
            starts again from the state directory as the kill left it."""
            label = data.draw(HOSTS)
            k, when = data.draw(st.integers(1, 3)), data.draw(st.sampled_from(["before", "after"]))
            host = self.c.hosts[label]
            if label in self.down:
                return
            snapshot = host.state_path.parent / "killed"
            kill_at(host.client, k, any_write, host.state_path, snapshot, when)
            try:
                self.c.cycle(label, watch=self.watched())
            except Killed:
                host.restart_from(snapshot)
            host.disarm()

        # -- one step ---------------------------------------------------------------------------

        def actions(self) -> list[str]:
            """What can happen now, nova's operations and agent cycles weighted up (one rule
            drawing from a list, not a rule each: hypothesis's swarm testing would leave whole
            runs without nova or without cycles)."""
            out = ["agent_cycle", "agent_cycle", "fail_next_request", "kill_during_cycle"]
            out += ["cycle_inside_next_nova_write"]
            out += ["nova", "nova", "nova"] if self.applicable() else []
            out += ["delete_out_of_band"] if _ready("active", up=False)(self) else []
            return [*out, "settle"]

        @rule(data=st.data())
        def step(self, data: st.DataObject) -> None:
            action = data.draw(st.sampled_from(self.actions()))
            if action == "settle":
                self.settle()
            else:
                getattr(self, action)(data)

        # -- the invariant --------------------------------------------------------------------

        def settle(self) -> None:
            """Faults stop; one cycle on each running host; Placement is nova's intent."""
            self.c.nova.adapter.before_write = None
            for host in self.c.hosts.values():
                host.disarm()
            for label in ("A", "B"):
                self.cycle(label)
            self.check()

        def check(self) -> None:
            c = self.c
            expected: dict[str, dict[str, Usage]] = {}
            for s in self.servers.values():
                if s.holds:
                    expected[s.uuid] = _intent(s.holds)
                if s.mig:
                    expected[s.mig] = _intent(s.mig_holds)
            for consumer, intent in expected.items():
                assert c.holds(consumer) == intent, f"{consumer}: {c.holds(consumer)} != {intent}"
            for label, host in c.hosts.items():
                root = c.nova.root(host.nodename)
                on = http_get(c.base, f"/resource_providers/{root}/allocations")["allocations"]
                leaked = sorted(set(on) - {k for k, v in expected.items() if label in v})
                assert not leaked, f"consumers on {label} nova does not intend: {leaked}"
            assert http_get(c.base, f"/allocations/{self.foreign}") == self.foreign_seen
            assert not c.touched, f"agent cycles rewrote nova's consumers: {c.touched}"
            assert not c.nova.refused, f"Placement refused nova: {c.nova.refused}"
            for s in self.servers.values():
                s.unhealed = False

        def teardown(self) -> None:
            self.settle()

    return NovaAndAgents


LICENCES = """\
meta:
  schema_version: '1.0'
providers:
  - identification:
      uuid: $COMPUTE_NODE
    inventories:
      additional:
        - CUSTOM_LICENSE_WINDOWS:
            total: 8
"""
"""A class the planner does not produce, on each compute node (nova's provider config
schema 1.0, as tests/functional/test_operator_additions.py writes it)."""

LICENSED = Flavor(2, 2048, 10, (("resources:CUSTOM_LICENSE_WINDOWS", "1"),))
"""A flavor asking a licence: nova's claim holds a class the agent's plan does not have."""

Allocations = dict[str, dict[str, int]]
"""``{provider UUID: {resource class: amount}}`` of one consumer."""


def shared_machine(tmp_path, served):  # noqa: C901 (the machine above, on shared storage)
    """The machine above on two pools and with a licence class (issue 33).

    Hosts A and B have no disk of their own: they share two storage pools (sharing providers
    of DISK_GB in their aggregate, :meth:`Cloud._pool`), and nova's scheduler puts each
    claim's disk on either (``via``), whatever the agent's plan would choose (the first by
    UUID). Flavors: small, large and one asking ``resources:CUSTOM_LICENSE_WINDOWS``, a class
    only a provider config file gives the compute nodes. nova's own operations grow two
    same-host ones: a reboot (the domain undefined for one agent cycle, then defined again),
    and a resize on the same host whose domain is absent for one cycle before the new one
    is defined.

    nova's intent here is what nova's own calls wrote: after each of nova's operations every
    consumer nova ever used (instances, migration records, deleted ones included) is read
    back from Placement. Since no agent cycle may move the generation of a consumer nova
    holds (``touched``), that is the only writer of those consumers; ``settle`` then checks,
    after one cycle of each running agent, that every consumer holds exactly that, that
    each provider's usages (compute nodes and both pools) are the sum of it, and that no
    provider holds a consumer nova does not intend there. An operator's out-of-band delete
    is drawn only for an instance whose allocation is the agent's plan (its disk on the
    first pool, no licence): the agent heals with its plan and cannot know what else nova
    chose.
    """
    base = machine(tmp_path, served)
    configs = tmp_path / "provider_config"
    configs.mkdir(exist_ok=True)
    (configs / "licences.yaml").write_text(LICENCES)

    class SharedNovaAndAgents(base):  # type: ignore[misc,valid-type]
        flavors = st.sampled_from([SMALL, LARGE, LICENSED])

        def __init__(self) -> None:
            self.intent: dict[str, Allocations] = {}
            super().__init__()

        def cloud(self, workdir: Path) -> Cloud:
            return Cloud(
                workdir, served, pools=2, compute={"provider_config_location": str(configs)}
            )

        def boot_flavor(self, data: st.DataObject) -> Flavor:
            return data.draw(self.flavors)

        def place(self, data: st.DataObject, s: Server, label: str) -> None:
            via = data.draw(st.sampled_from(sorted(self.c.pools)))
            self.c.nova.schedule(s.uuid, s.flavor, self.c.node(label), s.project, via=via)

        def allocations(self, consumer: str) -> Allocations:
            body = http_get(self.c.base, f"/allocations/{consumer}")["allocations"]
            return {rp: a["resources"] for rp, a in body.items()}

        def remember(self) -> None:
            """nova's intent: what each consumer nova ever used holds right after its call
            (an instance whose allocation an operator deleted keeps its intent until healed)."""
            unhealed = {s.uuid for s in self.servers.values() if s.unhealed}
            used = {c for s in self.servers.values() for c in (s.uuid, s.mig) if c}
            for consumer in sorted((used | set(self.intent)) - unhealed):
                self.intent[consumer] = self.allocations(consumer)

        def applicable(self) -> list[str]:
            """As above, with the same-host reboot, and moves (the same-host resize among
            them) weighted up: each run is short."""
            ops = super().applicable()
            return [*ops, "reboot", "move", "move"] if "delete" in ops else ops

        def actions(self) -> list[str]:
            """nova's operations weighted further up than above (the faults are the first
            machine's subject), and a settle in every few steps."""
            out = ["agent_cycle", "fail_next_request", "kill_during_cycle"]
            out += ["cycle_inside_next_nova_write"]
            out += ["nova"] * 5 if self.applicable() else []
            out += ["delete_out_of_band"] if _ready("active", up=False)(self) else []
            return [*out, "settle", "settle"]

        def _reboot(self, data: st.DataObject) -> None:
            """A same-host operation (a hard reboot, a host-side redefine): the domain is
            undefined during one agent cycle of its host, then defined again.

            Not for an instance whose allocation is the agent's own heal (an out-of-band
            delete healed, nova has not written it since: in its host's record ``wrote``):
            docs/service.md's *gone* rule removes an allocation the agent wrote itself at
            once and the next cycle heals it again, which this judge (nova's intent read
            back after each of its calls, no watched generation moved) would count against
            nova. Issue 33's case 6 asks this only of an allocation nova wrote."""
            candidates = [
                s.uuid
                for s in self.servers.values()
                if s.state == "active" and not s.unhealed and not self._agents_own(s)
            ]
            if not candidates:
                return
            s = self.servers[data.draw(st.sampled_from(candidates))]
            host = self.c.hosts[s.host]
            host.undefine(s.uuid)
            self.cycle(s.host)
            host.define(s.uuid, s.flavor, s.project)

        def _agents_own(self, s: Server) -> bool:
            """``s``'s allocation is one the agent wrote itself (its host's record)."""
            host = self.c.hosts[s.host]
            return s.uuid in host.tracker.audit.record(host.nodename).wrote

        def _migrate(self, data: st.DataObject) -> None:
            """As above; on the same host, the old domain may be gone for one cycle first
            (nova's resize undefines it before ``finish_migration`` defines the new one)."""
            s, absent = self.pick(data, "claimed"), data.draw(st.booleans())
            if s and s.src == s.dest and absent:
                self.c.hosts[s.src].undefine(s.uuid)
                self.cycle(s.src)
            if s:
                self.c.hosts[s.dest].define(s.uuid, s.flavor, s.project)
                s.state, s.host = "moving", s.dest

        def _plan(self, s: Server) -> Allocations:
            """The agent's plan for ``s`` on shared storage: its CPU and memory on its host,
            its disk on the first pool by UUID (agent/tracker/sharing.py)."""
            compute = {"VCPU": s.flavor.vcpus, "MEMORY_MB": s.flavor.memory_mb}
            disk = {"DISK_GB": s.flavor.root_gb}
            return {self.c.nova.root(self.c.node(s.host)): compute, min(self.c.pools): disk}

        def delete_out_of_band(self, data: st.DataObject) -> None:
            candidates = [
                s.uuid
                for s in self.servers.values()
                if s.state == "active"
                and not s.unhealed
                and s.host not in self.down
                and self.intent.get(s.uuid) == self._plan(s)
            ]
            if candidates:
                s = self.servers[data.draw(st.sampled_from(candidates))]
                http(self.c.base, "DELETE", f"/allocations/{s.uuid}")
                s.unhealed = True

        def check(self) -> None:
            c = self.c
            for consumer, want in self.intent.items():
                got = self.allocations(consumer)
                assert got == want, f"{consumer}: Placement holds {got}, nova wrote {want}"
            providers = {label: c.nova.root(h.nodename) for label, h in c.hosts.items()}
            providers |= {f"pool-{n}": rp for n, rp in enumerate(c.pools)}
            for name, rp in providers.items():
                want_usage: dict[str, int] = {}
                for held in self.intent.values():
                    for rc, n in held.get(rp, {}).items():
                        want_usage[rc] = want_usage.get(rc, 0) + n
                got = http_get(c.base, f"/resource_providers/{rp}/usages")["usages"]
                got = {rc: n for rc, n in got.items() if n}
                assert got == want_usage, f"{name}: usages {got}, nova's intent {want_usage}"
                on = http_get(c.base, f"/resource_providers/{rp}/allocations")["allocations"]
                leaked = sorted(set(on) - {k for k, v in self.intent.items() if rp in v})
                assert not leaked, f"consumers on {name} nova does not intend: {leaked}"
            assert http_get(c.base, f"/allocations/{self.foreign}") == self.foreign_seen
            assert not c.touched, f"agent cycles rewrote nova's consumers: {c.touched}"
            assert not c.nova.refused, f"Placement refused nova: {c.nova.refused}"
            for s in self.servers.values():
                s.unhealed = False

    return SharedNovaAndAgents


SETTINGS = settings(
    max_examples=20,
    stateful_step_count=12,
    deadline=None,
    derandomize=True,
    # No shrinking: on a failure hypothesis would spend up to 5 minutes shrinking.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_nova_and_agents_converge(tmp_path, served):
    run_state_machine_as_test(machine(tmp_path, served), settings=SETTINGS)


def test_nova_and_agents_converge_on_shared_storage(tmp_path, served):
    # Fewer, longer runs than the first machine's: a move takes several steps to reach
    # its destination, and the module stays under a minute on two cores.
    shared = settings(SETTINGS, max_examples=12, stateful_step_count=24)
    run_state_machine_as_test(shared_machine(tmp_path, served), settings=shared)


GRACE = 3600.0
"""``[compute] absent_instance_timeout``'s default, seconds: how long an instance must have
been absent (counted by periodic audits) before the agent removes an allocation another
writer made (docs/service.md, "Allocation audit")."""


def allocation_write(method: str, template: str, _path: str) -> bool:
    """The agent's allocation writes (``POST /allocations``, ``PUT``/``DELETE
    /allocations/{consumer}``), for :func:`tests.helpers.faults.before_send`."""
    return method in ("PUT", "POST", "DELETE") and template.startswith("/allocations")


def events_machine(tmp_path, served):  # noqa: C901 (the first machine, with events)
    """The first machine with one allocation audit for every trigger (issue 39).

    Beyond the first machine's steps:

    * **events**: every domain defined or undefined becomes a pending event of its host;
      its service's targeted update (``ResourceTracker.apply_events`` with the
      :class:`~agent.tracker.targeted.EventBatch` the service's queue builds) comes at once,
      at a later step, or inside nova's next write (after nova's reads: the conductor's
      ``start_move``, the scheduler's claim, a revert's ``move_allocations``), for the
      pending instances or any instance of that host (a domain started or stopped);
    * **retries**: one of nova's operations runs just before a host's agent sends its next
      allocation write, so the consumer generations the agent read are stale and its write
      may be refused (409): the agent must read and decide again;
    * **same-host operations with the domain absent across audits**: a rebuild (undefined,
      periodic cycles and events of its host, defined again; nova writes no allocation for
      a rebuild on the same host), and unshelve on the same host (the first machine's:
      nova's claim, cycles, then the spawn);
    * **a domain lost without nova** (destroyed outside nova: its allocation, nova's or
      the agent's own heal, is a leak only the agent can remove): kept or removed while
      the grace lasts, gone once the hosts' clocks pass :data:`GRACE` and each agent has run
      two periodic audits (``settle`` does so whenever nothing is building: a spawn takes
      minutes, not an hour).

    The property, checked by ``settle``: every consumer holds nova's intent, nothing
    leaked past its grace, no agent cycle or targeted update rewrote a consumer nova holds,
    and no nova operation failed (nothing raised, Placement refused nova nothing).
    """
    base = machine(tmp_path, served)

    class EventsRetriesAndNova(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.data: st.DataObject | None = None
            self.pending: dict[str, set[str]] = {"A": set(), "B": set()}
            self.listed: dict[str, set[str]] = {"A": set(), "B": set()}
            self.excused: set[tuple[str, int | None, int | None]] = set()
            self.inside: list[tuple[str, str]] = []
            self.quiet = False
            super().__init__()
            for host in self.c.hosts.values():
                self._watch_domains(host)
            self.c.nova.adapter.before_write = self._inside_nova_write

        # -- events ------------------------------------------------------------------------

        def _watch_domains(self, host) -> None:
            """Each define and undefine of ``host`` is a pending event of its service, made
            at once when drawn so (never while another writer's step runs inside an agent's
            write: the agent's node lock is held)."""
            define, undefine = host.define, host.undefine

            def changed(inst: str) -> None:
                self.pending[host.label].add(inst)
                if not self.quiet and self.data is not None and self.data.draw(st.booleans()):
                    self.deliver(host.label, sorted(self.pending[host.label]))

            def on_define(inst: str, flavor: Flavor, project: str = "") -> None:
                define(inst, flavor, project) if project else define(inst, flavor)
                self.listed[host.label].discard(inst)  # a new domain: not listed yet
                changed(inst)

            def on_undefine(inst: str) -> None:
                undefine(inst)
                changed(inst)

            host.define, host.undefine = on_define, on_undefine

        def deliver(self, label: str, instances: list[str], faults_off: bool = False) -> None:
            """Host ``label``'s service makes its targeted update for ``instances``; with
            ``faults_off`` (no 500 armed), a failed update fails the run (otherwise the
            next cycle heals, as the service brings it forward)."""
            if label in self.down or not instances:
                return
            host = self.c.hosts[label]
            before = {c: self.c.generation(c) for c in self.watched()}
            batch = EventBatch(instances={host.nodename: set(instances)}, events=len(instances))
            outcome = host.tracker.apply_events(batch)
            self.pending[label] -= set(instances)
            self.listed[label] |= set(instances) & set(host.domains)
            assert not (faults_off and outcome.errors), (
                f"{label}'s event for {instances}: {outcome.errors}"
            )
            for consumer, gen in before.items():
                after = self.c.generation(consumer)
                if after != gen:
                    self.c.touched.append((f"{label} (event)", consumer, gen, after))

        def deliver_events(self, data: st.DataObject) -> None:
            """A host's service applies its pending events, or an event for instances whose
            domain nothing defined or undefined (started, stopped: read again all the same)."""
            label = data.draw(HOSTS)
            if self.pending[label] and data.draw(st.booleans()):
                self.deliver(label, sorted(self.pending[label]))
                return
            uuids = list(self.servers)
            if uuids:
                self.deliver(
                    label,
                    data.draw(
                        st.lists(st.sampled_from(uuids), min_size=1, max_size=2, unique=True)
                    ),
                )

        def _inside_nova_write(self, _method: str, _url: str) -> None:
            """What was armed to land between nova's reads and its next write, in order."""
            armed, self.inside = self.inside, []
            if self.quiet:
                return
            for what, label in armed:
                if what == "event":
                    self.deliver(label, sorted(self.pending[label] or self.servers))
                else:
                    self.cycle(label)

        def cycle_inside_next_nova_write(self, data: st.DataObject) -> None:
            self.inside.append(("cycle", data.draw(HOSTS)))

        def event_inside_next_nova_write(self, data: st.DataObject) -> None:
            self.inside.append(("event", data.draw(HOSTS)))

        # -- retries -----------------------------------------------------------------------

        def nova_inside_next_agent_write(self, data: st.DataObject) -> None:
            """One of nova's operations runs just before a host's agent sends its next
            allocation write (the generations it read are stale)."""
            label = data.draw(HOSTS)

            def nova_now() -> None:
                if self.quiet or self.data is None or not self.applicable():
                    return
                self.quiet = True
                consumers = self.watched()
                before = {x: self.c.generation(x) for x in consumers}
                try:
                    self.nova(self.data)
                finally:
                    self.quiet = False
                # nova's own write, inside the agent's cycle or event, is not the agent's.
                self.excused |= {(x, g, self.c.generation(x)) for x, g in before.items()}

            before_send(self.c.hosts[label].client, allocation_write, nova_now)

        # -- same-host operations, a lost domain ---------------------------------------------

        def applicable(self) -> list[str]:
            ops = super().applicable()
            return [*ops, "rebuild"] if "delete" in ops else ops

        def _rebuild(self, data: st.DataObject) -> None:
            """A rebuild on the same host: the domain undefined across periodic cycles and
            events of its host (seconds to minutes), then defined again; nova writes no
            allocation."""
            s = self.pick(data, "active")
            if not s or s.host in self.down:
                return
            host = self.c.hosts[s.host]
            host.undefine(s.uuid)
            for what in data.draw(st.lists(st.sampled_from(["cycle", "event"]), max_size=3)):
                if what == "cycle":
                    self.cycle(s.host)
                else:
                    self.deliver(s.host, [s.uuid])
            host.define(s.uuid, s.flavor, s.project)

        def cycle(self, label: str) -> None:
            """One periodic cycle of a running host; what it listed is noted."""
            super().cycle(label)
            if label not in self.down:
                self.listed[label] |= set(self.c.hosts[label].domains)

        def lose_domain(self, data: st.DataObject) -> None:
            """A running instance's domain is destroyed outside nova (nova is never told):
            its allocation on that host is a leak only the agent can remove, once its agent
            has listed it (a domain it never saw is nobody it knows: its allocation is
            *not an instance*, left alone as a claim for a build not started)."""
            s = self.pick(data, "active")
            if s and s.host not in self.down and s.uuid in self.listed[s.host]:
                self.c.hosts[s.host].undefine(s.uuid)
                s.state = "vanished"

        # -- one step ------------------------------------------------------------------------

        def actions(self) -> list[str]:
            out = super().actions()
            out += ["deliver_events", "deliver_events", "event_inside_next_nova_write"]
            out += ["nova_inside_next_agent_write", "nova"]
            out += ["lose_domain"] if _ready("active")(self) else []
            return out

        @rule(data=st.data())
        def step(self, data: st.DataObject) -> None:
            self.data = data
            super().step(data)

        @initialize(data=st.data())
        def first_instance(self, data: st.DataObject) -> None:
            self.data = data
            super().first_instance(data)

        def watched(self) -> tuple[str, ...]:
            gone = {s.uuid for s in self.servers.values() if s.state in ("vanished", "lost")}
            return tuple(c for c in super().watched() if c not in gone)

        # -- the invariant -------------------------------------------------------------------

        def settle(self) -> None:
            """Faults stop; pending events are applied, one cycle on each running host;
            when a lost domain's leak must go and nothing is building, the hosts' clocks
            pass the grace and each agent audits twice more."""
            self.inside = []
            for host in self.c.hosts.values():
                host.disarm()
            for label in ("A", "B"):
                self.deliver(label, sorted(self.pending[label]), faults_off=True)
                self.cycle(label)
            vanished = [s for s in self.servers.values() if s.state == "vanished"]
            building = any(s.state == "building" for s in self.servers.values())
            if vanished and not building and not self.down:
                for host in self.c.hosts.values():
                    host.now += GRACE
                for _ in range(2):
                    for label in ("A", "B"):
                        self.cycle(label)
                for s in vanished:
                    s.state, s.holds = "lost", {}
            self.check()

        def check(self) -> None:
            c = self.c
            expected: dict[str, dict[str, Usage]] = {}
            grace: dict[str, str] = {}
            for s in self.servers.values():
                if s.state == "vanished":
                    grace[s.uuid] = s.host
                elif s.holds:
                    expected[s.uuid] = _intent(s.holds)
                if s.mig:
                    expected[s.mig] = _intent(s.mig_holds)
            for consumer, intent in expected.items():
                assert c.holds(consumer) == intent, f"{consumer}: {c.holds(consumer)} != {intent}"
            for label, host in c.hosts.items():
                root = c.nova.root(host.nodename)
                on = http_get(c.base, f"/resource_providers/{root}/allocations")["allocations"]
                allowed = {k for k, v in expected.items() if label in v}
                allowed |= {k for k, h in grace.items() if h == label}
                leaked = sorted(set(on) - allowed)
                assert not leaked, f"consumers on {label} nova does not intend: {leaked}"
            assert http_get(c.base, f"/allocations/{self.foreign}") == self.foreign_seen
            touched = [t for t in c.touched if t[1:] not in self.excused]
            assert not touched, f"agent cycles or events rewrote nova's consumers: {touched}"
            assert not c.nova.refused, f"Placement refused nova: {c.nova.refused}"
            c.touched.clear()
            self.excused.clear()
            for s in self.servers.values():
                s.unhealed = False

        def teardown(self) -> None:
            """nova finishes its builds (a spawn takes minutes), then the last settle."""
            self.quiet = True
            for s in self.servers.values():
                if s.state == "building" and s.host not in self.down:
                    self.c.hosts[s.host].define(s.uuid, s.flavor, s.project)
                    s.state = "active"
            self.quiet = False
            self.settle()

    return EventsRetriesAndNova


def test_events_retries_and_nova_converge(tmp_path, served):
    # Fewer runs than the first machine's: each settle may audit four more times (the
    # clocks past the grace), and the suite grows by well under half a minute.
    events = settings(SETTINGS, max_examples=8)
    run_state_machine_as_test(events_machine(tmp_path, served), settings=events)
