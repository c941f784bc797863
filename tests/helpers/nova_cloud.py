"""Two compute hosts, each with its own agent (fake driver), and nova, on one real Placement.

The judge of issue 26 (tests/functional/test_nova_moves.py and test_nova_property.py):
nova's own code (:mod:`tests.helpers.nova_client`) writes instances' allocations, each
host's agent runs its periodic cycle, and the test compares what Placement holds with what
nova intends. A host's fake host file lists the domains that exist on it (during a resize
awaiting confirmation or a live migration, on both hosts), edited with :meth:`Host.define`
and :meth:`Host.undefine` as the hypervisor would change.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from uuid import uuid4

from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver
from tests.helpers.conf import make_conf
from tests.helpers.hosts import HostDescription
from tests.helpers.names import unique
from tests.helpers.nova_client import Flavor, Nova
from tests.helpers.placement_http import call, http_get

PROJECT = "5d1f0c4e2a3b4c6d8e9f0a1b2c3d4e5f"
USER = "9e8d7c6b5a4f43218765fedcba987654"
"""The owner of every instance nova boots here (the fake host files list the same)."""

SIZE = {"VCPU": 16, "MEMORY_MB": 32768, "DISK_GB": 200}
"""Each host's capacity (flat: no NUMA children, local disk)."""

POOL_DISK_GB = 10_000
"""Each shared-storage pool's DISK_GB (:meth:`Cloud._pool`)."""

SMALL = Flavor(vcpus=2, memory_mb=2048, root_gb=10)
LARGE = Flavor(vcpus=4, memory_mb=4096, root_gb=20)

Usage = dict[str, int]
IDLE: Usage = {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}


class Host:
    """One compute host: a flat node of :data:`SIZE` and its agent, in ``workdir``.

    Attributes:
        nodename: the node's (and its compute node provider's) name (``nodename`` when
            given, else a new one).
        host_path: the fake host file; ``conf``, ``driver``, ``report``, ``tracker`` the agent.
        domains: ``{instance UUID: (flavor, project)}`` of the domains defined on the host now.
    """

    def __init__(
        self,
        workdir: Path,
        placement: Any,
        label: str,
        shared: bool = False,
        nodename: str | None = None,
        **groups: Any,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.label = label
        self.shared = shared
        self.nodename = nodename or unique(f"nova-{label.lower()}")
        self.domains: dict[str, tuple[Flavor, str]] = {}
        self.host_path = workdir / "host.yaml"
        self.state_path = workdir / "state"
        self._write()
        self.conf = make_conf(workdir, **groups)
        self.placement = placement
        self.now = 1_000_000.0
        self.start()

    def start(self) -> None:
        """(Re)start the agent: a new driver, client and tracker on the state directory."""
        self.driver = FakeDriver(self.conf, self.host_path)
        self.client = self.placement.client()
        self.state = StateStore(self.state_path)
        self.report = ReportClient(self.client, self.state, sleep=lambda _s: None)
        self.tracker = ResourceTracker(
            self.conf, self.driver, self.report, self.state, clock=lambda: self.now
        )
        self.driver.subscribe(self.tracker.handle_event)
        self.fresh = True

    def restart_from(self, snapshot: Path) -> None:
        """The agent was killed (:func:`tests.helpers.faults.kill_at`): its state directory
        becomes ``snapshot`` (as the kill left it) and it starts again."""
        shutil.rmtree(self.state_path)
        shutil.copytree(snapshot, self.state_path)
        shutil.rmtree(snapshot)
        self.start()

    def disarm(self) -> None:
        """Every fault wrapped around the client's ``_send`` is dropped."""
        self.client.__dict__.pop("_send", None)

    def description(self) -> HostDescription:
        """The host file's document for the domains in :attr:`domains`."""
        return HostDescription.of_node(
            {
                "nodename": self.nodename,
                "cpu": {"vcpus": SIZE["VCPU"]},
                "memory_mb": SIZE["MEMORY_MB"],
                "disk_gb": SIZE["DISK_GB"],
                "shared_storage": self.shared,
                "instances": self.instances(),
            }
        )

    def instances(self) -> list[dict[str, Any]]:
        """The host file's ``instances``: the domains in :attr:`domains`."""
        return [
            {
                "uuid": uuid,
                "project_id": project,
                "user_id": USER,
                "flavor": {"vcpus": f.vcpus, "memory_mb": f.memory_mb, "root_gb": f.root_gb},
            }
            for uuid, (f, project) in self.domains.items()
        ]

    def _write(self) -> None:
        self.description().write(self.host_path)

    def define(self, instance: str, flavor: Flavor, project: str = PROJECT) -> None:
        """The hypervisor defines (or redefines with ``flavor``) the instance's domain
        (owned by ``project`` and :data:`USER`)."""
        self.domains[instance] = (flavor, project)
        self._write()
        self.driver.reload()

    def undefine(self, instance: str) -> None:
        """The domain is destroyed and undefined (a no-op when it is not here)."""
        self.domains.pop(instance, None)
        self._write()
        self.driver.reload()

    def cycle(self) -> Any:
        """One periodic cycle of this host's agent (``update_available_resource``): the
        start-up one when it is the first since the agent (re)started."""
        self.now += 60.0
        startup, self.fresh = self.fresh, False
        return self.tracker.update_available_resource(startup)


class Cloud:
    """Hosts ``A`` and ``B`` with their agents, and nova, on ``placement``.

    Attributes:
        hosts: ``{"A": Host, "B": Host}``.
        nova: nova's writers (:class:`tests.helpers.nova_client.Nova`).
        touched: ``(host label, consumer, generation before, after)`` for every watched
            consumer whose generation moved across one agent cycle.
    """

    def __init__(self, workdir: Path, placement: Any, pools: int = 0, **groups: Any) -> None:
        self.base = placement.url
        shared = pools > 0
        self.hosts = {
            label: Host(workdir / label, placement, label, shared, **groups) for label in ("A", "B")
        }
        for host in self.hosts.values():
            host.cycle()
        self.nova = Nova(self.base, PROJECT, USER)
        self.touched: list[tuple[str, str, int | None, int | None]] = []
        self.nova.shared_storage = shared
        # An aggregate of this cloud's own: the served Placement outlives it, and another
        # cloud's pools in the same aggregate would be this one's too.
        self.aggregate = str(uuid4())
        self.pools = [self._pool(n) for n in range(pools)]
        if self.pools:
            for host in self.hosts.values():
                host.cycle()  # each finds the pools of its aggregate

    def _pool(self, n: int) -> str:
        """A shared-storage pool as an operator adds one: a provider sharing DISK_GB
        (:data:`POOL_DISK_GB`) by aggregate, in one aggregate with both compute nodes
        (resource-providers-allocations.txt, shared storage). Plain HTTP; its UUID."""
        aggregates = {"aggregates": [self.aggregate]}
        pool = call(self.base, "POST", "/resource_providers", {"name": unique(f"pool-{n}")})["uuid"]
        for path, body in (
            ("inventories", {"inventories": {"DISK_GB": {"total": POOL_DISK_GB}}}),
            ("traits", {"traits": ["MISC_SHARES_VIA_AGGREGATE"]}),
            ("aggregates", aggregates),
        ):
            self._put(pool, path, body)
        for host in self.hosts.values():
            self._put(self.nova.root(host.nodename), "aggregates", aggregates)
        return pool

    def _put(self, uuid: str, path: str, body: dict[str, Any]) -> None:
        generation = http_get(self.base, f"/resource_providers/{uuid}")["generation"]
        body = {**body, "resource_provider_generation": generation}
        call(self.base, "PUT", f"/resource_providers/{uuid}/{path}", body, expect=200)

    def pool_usage(self, n: int = 0) -> int:
        """DISK_GB in use on pool ``n`` (``GET /resource_providers/{uuid}/usages``)."""
        got = http_get(self.base, f"/resource_providers/{self.pools[n]}/usages")["usages"]
        return int(got.get("DISK_GB", 0))

    def node(self, label: str) -> str:
        """Host ``label``'s nodename (what nova calls its host and node)."""
        return self.hosts[label].nodename

    def usages(self, label: str) -> Usage:
        """``GET /resource_providers/{uuid}/usages`` of host ``label``'s compute node."""
        root = self.nova.root(self.node(label))
        got = http_get(self.base, f"/resource_providers/{root}/usages")["usages"]
        return {rc: got.get(rc, 0) for rc in IDLE}

    def generation(self, consumer: str) -> int | None:
        """The consumer's generation (``GET /allocations/{consumer}``); None when it has none."""
        return http_get(self.base, f"/allocations/{consumer}").get("consumer_generation")

    def cycle(self, *labels: str, watch: tuple[str, ...] = ()) -> list[Any]:
        """One agent cycle on each host of ``labels`` (both when none), in turn; the outcomes.

        The generations of the ``watch`` consumers are read before and after each cycle; a
        change is recorded in :attr:`touched` (an agent write to a consumer nova owns).
        """
        outcomes = []
        for label in labels or ("A", "B"):
            before = {c: self.generation(c) for c in watch}
            outcomes.append(self.hosts[label].cycle())
            for consumer, gen in before.items():
                after = self.generation(consumer)
                if after != gen:
                    self.touched.append((label, consumer, gen, after))
        return outcomes

    def expect(self, step: str, A: Usage, B: Usage) -> None:
        """After ``step``: each host's usages are nova's intent, no agent cycle moved a
        watched consumer's generation, and Placement refused nova nothing.

        Raises:
            AssertionError: naming the step and what differs.
        """
        got = {"A": self.usages("A"), "B": self.usages("B")}
        problems = []
        if got != {"A": A, "B": B}:
            problems.append(f"Placement holds {got}, nova intends A={A} B={B}")
        if self.touched:
            problems.append(
                f"agent rewrote nova's consumers (host, consumer, before, after): {self.touched}"
            )
        if self.nova.refused:
            problems.append(f"Placement refused nova: {self.nova.refused}")
        assert not problems, f"{step}: " + "; ".join(problems)

    def holds(self, consumer: str) -> dict[str, Usage]:
        """``{host label: resources}`` Placement holds for ``consumer`` on the two hosts."""
        roots = {self.nova.root(h.nodename): label for label, h in self.hosts.items()}
        body = http_get(self.base, f"/allocations/{consumer}")["allocations"]
        return {roots.get(rp, rp): a["resources"] for rp, a in body.items()}


def usage(*flavors: Flavor) -> Usage:
    """What ``flavors`` take together on one host (``VCPU``, ``MEMORY_MB``, ``DISK_GB``)."""
    total = dict(IDLE)
    for f in flavors:
        for rc, n in f.resources().items():
            total[rc] += n
    return total
