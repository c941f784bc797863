"""Two hosts, each with nova-compute's own resource tracker beside its own agent (issue 39).

The judge of one allocation audit for every trigger: on each of hosts A and B,
nova-compute 34 runs its own ``ResourceTracker`` and ``LibvirtDriver`` on fakelibvirt in a
process of its own (:mod:`tests.helpers.nova_compute`, its own database and
``compute_id``): it creates the host's compute node at start-up and writes the host's tree
again at the end of every claim (``refresh``: ``ResourceTracker._update``). Beside it the
agent runs on the fake driver (:class:`tests.helpers.nova_cloud.Host`), its host file
describing what nova's tracker reported (the compute node's VCPU, MEMORY_MB and DISK_GB
totals and its traits, read back from Placement after nova-compute's start-up) and its
configuration nova's inventory settings, so the two lay out one tree
(docs/service.md, "nova-compute beside the agent": "the two trees must agree").

Why not the agent's libvirt driver, as tests/functional/test_beside_nova_compute.py runs
it: the moves need domains defined and undefined on each host as nova's compute manager
would, which the fake driver's host file gives (:meth:`Host.define`, :meth:`Host.undefine`,
and the driver's events); libvirt's test driver serves a fixed fixture. nova's own writes of
instances' allocations come from :mod:`tests.helpers.nova_client` (scheduler, conductor,
compute manager), as in tests/functional/test_nova_moves.py.

The agent's event path: :meth:`TrackedHost.event` hands the tracker the
:class:`~agent.tracker.targeted.EventBatch` the service's queue builds from the fake
driver's events for the instances named (``apply_events``, as
:func:`agent.service.events` does after ``[DEFAULT] event_delay``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import libvirt

from agent.tracker.targeted import EventBatch, TargetedOutcome
from tests.helpers.hosts import HostDescription
from tests.helpers.names import unique
from tests.helpers.nova_client import Nova
from tests.helpers.nova_cloud import PROJECT, USER, Cloud, Host, Usage
from tests.helpers.nova_compute import NovaCompute, writes
from tests.helpers.placement_http import http_get

SCENARIO = "plain"
"""nova-compute's host (:data:`tests.helpers.nova_libvirt.HOSTS`): two NUMA cells, eight
CPUs, no devices; nova 34 lays it out flat (VCPU, MEMORY_MB and DISK_GB on the root)."""


class TrackedHost(Host):
    """One host: nova-compute's tracker (started first, as on a host where the agent is
    added) and the agent beside it, on one compute node.

    Args:
        workdir: the host's directory (nova's ``state_path`` and ``instances_path`` under it).
        placement: the served Placement.
        label: ``"A"`` or ``"B"``.
        compute: a nova-compute process (:class:`~tests.helpers.nova_compute.NovaCompute`),
            given this host.

    Attributes:
        compute: nova-compute's process.
        inventory: ``{resource class: Placement's inventory record}`` nova-compute wrote.
        nova_traits: the compute node's traits nova-compute wrote.
        compute_writes: ``(method, path, status)`` of every write nova-compute sent
            (:class:`TwoTrackers` empties it once both agents have started).
        tree_writes_at_start: :meth:`tree_writes` once both agents have started.
    """

    def __init__(self, workdir: Path, placement: Any, label: str, compute: NovaCompute) -> None:
        (workdir / "instances").mkdir(parents=True, exist_ok=True)
        nodename = unique(f"nova-{label.lower()}")
        self.label = label
        self.compute = compute
        self.compute_writes: list[tuple[str, str, int]] = []
        self.tree_writes_at_start = 0
        compute.host(
            workdir / "nova-state",
            SCENARIO,
            placement.url,
            libvirt.getVersion(),
            workdir / "instances",
            nodename=nodename,
        )
        self._nova("start")
        found = http_get(placement.url, "/resource_providers", name=nodename)
        root = found["resource_providers"][0]["uuid"]
        self.inventory = http_get(placement.url, f"/resource_providers/{root}/inventories")[
            "inventories"
        ]
        self.nova_traits = sorted(
            http_get(placement.url, f"/resource_providers/{root}/traits")["traits"]
        )
        cpu, ram, disk = (self.inventory[rc] for rc in ("VCPU", "MEMORY_MB", "DISK_GB"))
        super().__init__(
            workdir,
            placement,
            label,
            nodename=nodename,
            DEFAULT={
                "cpu_allocation_ratio": cpu["allocation_ratio"],
                "ram_allocation_ratio": ram["allocation_ratio"],
                "disk_allocation_ratio": disk["allocation_ratio"],
                "reserved_host_cpus": cpu["reserved"],
                "reserved_host_memory_mb": ram["reserved"],
                "reserved_host_disk_mb": disk["reserved"] * 1024,
            },
        )

    def _nova(self, op: str) -> dict[str, Any]:
        """One nova-compute command; its answer (an AssertionError when nova failed)."""
        answer = self.compute.call(op)
        assert answer["ok"], f"nova-compute {op} on {self.label}: {answer}"
        self.compute_writes += [tuple(r) for r in writes(answer["requests"])]
        return answer

    def description(self) -> HostDescription:
        """The host file's document: nova-compute's host (its totals and traits as nova's
        tracker wrote them) with the domains in :attr:`domains`."""
        if not hasattr(self, "inventory"):
            return super().description()
        return HostDescription.of_node(
            {
                "nodename": self.nodename,
                "cpu": {"vcpus": self.inventory["VCPU"]["total"]},
                "memory_mb": self.inventory["MEMORY_MB"]["total"],
                "disk_gb": self.inventory["DISK_GB"]["total"],
                "traits": self.nova_traits,
                "instances": self.instances(),
            }
        )

    def tree_writes(self) -> int:
        """The agent's writes of providers so far (inventories, traits, aggregates, the
        providers themselves: every request but a GET whose path is under
        ``/resource_providers``)."""
        counts = self.client.counts.items()
        return sum(n for (m, t), n in counts if m != "GET" and t.startswith("/resource_providers"))

    def claimed(self) -> None:
        """nova-compute's tracker ends a claim on this host (``refresh``): its tree written
        wherever it differs from Placement's."""
        self._nova("refresh")

    def event(self, *instances: str) -> TargetedOutcome:
        """The targeted update the agent's service makes after the fake driver's events
        for ``instances`` of this host (a domain defined or undefined): the batch its queue
        builds, applied by the tracker (``apply_events``)."""
        batch = EventBatch(instances={self.nodename: set(instances)}, events=len(instances))
        return self.tracker.apply_events(batch)


class TwoTrackers(Cloud):
    """Hosts ``A`` and ``B`` (:class:`TrackedHost`), and nova (:class:`Nova`), on ``placement``.

    nova-compute starts first on each host, then each agent runs its start-up cycle; from
    then on the two trackers of a host agree: neither writes the tree again.

    Attributes:
        hosts: ``{"A": TrackedHost, "B": TrackedHost}``.
        unsettled: one line for every agent cycle that was not ``ok`` and every targeted
            update that failed (a refused write, a 409 the agent gave up on).
    """

    def __init__(self, workdir: Path, placement: Any, computes: dict[str, NovaCompute]) -> None:
        self.base = placement.url
        self.hosts: dict[str, TrackedHost] = {  # type: ignore[assignment]
            label: TrackedHost(workdir / label, placement, label, computes[label])
            for label in ("A", "B")
        }
        for host in self.hosts.values():
            host.cycle()
        self.nova = Nova(self.base, PROJECT, USER)
        self.touched: list[tuple[str, str, int | None, int | None]] = []
        self.unsettled: list[str] = []
        self.aggregate = ""
        self.pools: list[str] = []
        for host in self.hosts.values():
            host.compute_writes.clear()
            host.tree_writes_at_start = host.tree_writes()

    def cycle(self, *labels: str, watch: tuple[str, ...] = ()) -> list[Any]:
        """As :meth:`Cloud.cycle`; a cycle that is not ``ok`` is noted in :attr:`unsettled`."""
        outcomes = super().cycle(*labels, watch=watch)
        for label, outcome in zip(labels or ("A", "B"), outcomes, strict=True):
            if not outcome.ok:
                problems = [p for n in outcome.nodes for p in n.problems]
                self.unsettled.append(f"{label}'s cycle {outcome.status}: {problems}")
        return outcomes

    def event(self, label: str, *instances: str) -> TargetedOutcome:
        """Host ``label``'s service makes the targeted update for ``instances``
        (:meth:`TrackedHost.event`); a failure is noted in :attr:`unsettled`."""
        outcome = self.hosts[label].event(*instances)
        if outcome.errors:
            self.unsettled.append(f"{label}'s event for {instances}: {outcome.errors}")
        return outcome

    def claimed(self, label: str) -> None:
        """nova-compute's tracker on host ``label`` ends a claim (:meth:`TrackedHost.claimed`)."""
        self.hosts[label].claimed()

    def expect(self, step: str, A: Usage, B: Usage) -> None:
        """:meth:`Cloud.expect`, and: every agent cycle and targeted update was ``ok``, and
        since the agents' start-up neither nova-compute's tracker nor the agent wrote
        either host's tree (the two agree).

        Raises:
            AssertionError: naming the step and what differs.
        """
        problems = list(self.unsettled)
        for label, host in self.hosts.items():
            if host.compute_writes:
                problems.append(f"nova-compute on {label} wrote {host.compute_writes}")
            agent = host.tree_writes() - host.tree_writes_at_start
            if agent:
                problems.append(f"the agent on {label} wrote its tree {agent} times")
        assert not problems, f"{step}: " + "; ".join(problems)
        super().expect(step, A, B)
