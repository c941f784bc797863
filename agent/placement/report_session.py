"""What callers ask of :class:`agent.placement.report.ReportClient`'s session and memory:
requests counted, the cycle's deadline, stopping, and what is kept per node (the root's
UUID, child traits, the hypervisor's name); so that nothing above the Placement layer
reaches into its parts (issue 39).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from agent.model.provider_tree import ProviderTree
from agent.placement import endpoints
from agent.placement.client import PlacementClient
from agent.placement.mirror import Mirror
from agent.placement.pool import Pool
from agent.placement.writer import Writer
from agent.state.store import StateStore


class SessionCalls:
    """The session's and memory's calls of the :class:`~agent.placement.report.ReportClient`
    façade (fields: the façade's)."""

    client: PlacementClient
    state: StateStore
    mirror: Mirror
    pool: Pool
    writer: Writer

    def requests(self) -> int:
        """Requests this client has sent so far (tries included)."""
        return self.client.total_requests()

    def keystone_refusals(self) -> int:
        """Requests Keystone refused so far (:meth:`PlacementClient.keystone_failures`)."""
        return self.client.keystone_failures()

    def providers_created(self) -> int:
        """``POST /resource_providers`` this client has sent so far."""
        return endpoints.providers_created(self.client)

    def set_deadline(self, deadline: float | None) -> None:
        """No new try starts after ``deadline`` (monotonic seconds; None: no deadline)."""
        self.client.deadline = deadline

    @property
    def abort_event(self) -> threading.Event:
        """Set on SIGTERM: no new try starts, and a wait between tries ends at once."""
        return self.client.abort

    @property
    def in_flight(self) -> int:
        """Independent requests sent at once (``[placement] max_concurrent_requests``)."""
        return self.pool.size

    @property
    def conflict_sleep(self) -> Callable[[float], None]:
        """How a retry after a generation conflict waits (tests pass a no-op)."""
        return self.writer.sleep

    def refresh_details_after(self, seconds: int) -> None:
        """A vouch for a provider's details lasts ``seconds`` (``[compute]
        resource_provider_association_refresh``; 0: no limit on time alone)."""
        self.mirror.vouched.refresh_after = seconds

    def nova_compute_beside(self, beside: bool) -> None:
        """nova-compute runs on this host (its compute node is taken over, never renamed)."""
        self.mirror.roots.nova_compute_beside = beside

    def cached_tree(self, nodename: str) -> ProviderTree | None:
        """``nodename``'s tree as last read in this process (no request), or None."""
        return self.mirror.cached(nodename)

    def hypervisor_named(self, nodename: str) -> bool:
        """Whether the hypervisor's name of ``nodename`` is known already."""
        return nodename in self.mirror.roots.hypervisor_names

    def single_node(self, nodename: str, hypervisor: str | None) -> None:
        """``nodename`` is the host's only node, named ``hypervisor`` by the hypervisor (nova
        names a one-node host's compute node after it: a takeover finds it by that name)."""
        self.mirror.roots.one_node.add(nodename)
        if hypervisor and hypervisor != nodename:
            self.mirror.roots.hypervisor_names[nodename] = hypervisor

    def child_traits(self, nodename: str) -> dict[str, list[str]]:
        """``{provider UUID: traits}`` of ``nodename``'s children, as last stored."""
        return self.state.child_traits(nodename)

    def set_child_traits(self, nodename: str, traits: dict[str, list[str]]) -> None:
        """Store ``{provider UUID: traits}`` of ``nodename``'s children."""
        self.state.set_child_traits(nodename, traits)

    def record_root_uuid(self, nodename: str, uuid: str) -> None:
        """Record ``uuid`` as ``nodename``'s compute node in the state directory."""
        self.state.set_root_uuid(nodename, uuid)
