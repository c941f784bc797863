"""A node's compute node in Placement: found by name, taken over from nova, or created.

Rules, in order (docs/deployment.md, "Moving a host from nova-compute"):
the provider named ``nodename`` (its UUID must be the one the state directory
records, if any); nova's compute node by the UUID in nova's ``compute_id``
file; nova's compute node by the hypervisor's own name (nova names a libvirt
compute node after libvirt's hostname), when ``[DEFAULT] host`` differs;
else a new provider with the recorded UUID or :func:`default_root_uuid`. A
provider taken over is renamed ``nodename`` and keeps its UUID, inventories,
traits and allocations.
"""

from __future__ import annotations

import logging

from agent.model.exceptions import AgentError
from agent.model.provider_tree import default_root_uuid
from agent.placement import endpoints
from agent.placement.client import PlacementClient
from agent.placement.endpoints import ProviderRecord
from agent.placement.errors import DuplicateName
from agent.state.node_identity import IdentityNotWritten
from agent.state.store import StateStore

LOG = logging.getLogger(__name__)

CREATED_HERE = "_created_here"
"""Marks a provider record this client has just created (it holds nothing yet)."""


class RootConflict(AgentError):
    """The compute node's name is held in Placement by another UUID than the one recorded."""


class ComputeNodes:
    """Finds or creates the root provider of each node (module docstring).

    Args:
        client: the HTTP client.
        state: the state directory (recorded UUIDs, nova's ``compute_id``).

    Attributes:
        hypervisor_names: ``{nodename: the hypervisor's own name}`` where they
            differ (libvirt's hostname, nova's compute node name).
        one_node: the nodenames of one-node hosts (libvirt, host): nova-compute's
            ``compute_id`` names their compute node, and the agent writes it when
            there is none (:meth:`identity`).
        nova_compute_beside: nova-compute runs on this host now
            (``[compute_agent] nova_compute``): a ``compute_id`` that cannot be written
            is an error (exit 2), not a warning.
    """

    def __init__(self, client: PlacementClient, state: StateStore) -> None:
        self.client = client
        self.state = state
        self.hypervisor_names: dict[str, str] = {}
        self.one_node: set[str] = set()
        self.nova_compute_beside = False
        """nova-compute runs beside the agent: nova's ``compute_id`` must be written."""
        self._identified: set[str] = set()

    def find_or_create(
        self, nodename: str, stored: str | None, create: bool, uuid: str | None
    ) -> list[ProviderRecord]:
        found = endpoints.find_by_name(self.client, nodename)
        if found:
            held = found[0]["uuid"]
            if stored and held != stored:
                raise RootConflict(
                    f"compute node {nodename!r}: Placement has resource provider {held} with "
                    f"this name, but {self.state.path}/compute_nodes.json records {stored}. If "
                    f"{held} is this host's compute node, remove {nodename!r} from that file and "
                    "the agent adopts it; if another host already uses this name, give this "
                    "host a unique [DEFAULT] host"
                )
            LOG.info("found compute node %s in Placement by name: %s", nodename, held)
            return endpoints.list_tree(self.client, held)
        if not create:
            return []
        adopted = self._nova_node(nodename, stored) or self._by_hypervisor_name(nodename, stored)
        if adopted:
            return adopted
        uuid = stored or self._new_uuid(nodename, uuid or default_root_uuid(nodename))
        try:
            created = endpoints.create_provider(self.client, nodename, uuid)
        except DuplicateName as exc:
            raise RootConflict(
                f"compute node {nodename!r} could not be created with UUID {uuid}: {exc.detail} "
                "If a provider with this UUID is another host's, give this host a unique "
                "[DEFAULT] host or remove its entry from compute_nodes.json"
            ) from None
        LOG.info("created compute node %s as resource provider %s", nodename, uuid)
        return [{**created, CREATED_HERE: True}]

    def _new_uuid(self, nodename: str, candidate: str) -> str:
        """The UUID a new compute node gets: nova's ``compute_id`` when there is one (and
        no other node of this state directory has it), else ``candidate``, first written
        as nova's ``compute_id`` on a one-node host, so that a nova-compute started later
        names this compute node alike (docs/deployment.md, "Beside nova-compute").

        Raises:
            ConfigError: nova's file cannot be read or written.
        """
        nova_uuid = self.state.nova_compute_id()
        if nova_uuid is not None:
            if nova_uuid in self.state.root_uuids().values():
                return candidate
            LOG.info("compute node %s: created with nova's node identity %s", nodename, nova_uuid)
            return nova_uuid
        if nodename not in self.one_node:
            return candidate
        self._identified.add(nodename)
        try:
            return self.state.write_nova_compute_id(candidate)
        except IdentityNotWritten as exc:
            if self.nova_compute_beside:
                raise
            # Without nova-compute beside, a state directory that cannot be written does
            # not stop the agent (agent.state.store); a nova-compute started later would.
            LOG.warning("%s", exc)
            return candidate

    def identity(self, nodename: str, root_uuid: str) -> None:
        """On a one-node host, once per process: nova's ``compute_id`` names ``root_uuid``
        (an agent that created the compute node before it wrote that file writes it now,
        so a nova-compute started later does not create another); a file that names
        another UUID is warned about (nova-compute would create a second compute node of
        this name, refused by Placement: every build on the host would fail).

        Raises:
            ConfigError: nova's file cannot be read or written.
        """
        if nodename not in self.one_node or nodename in self._identified:
            return
        self._identified.add(nodename)
        try:
            held = self.state.write_nova_compute_id(root_uuid)
        except IdentityNotWritten as exc:
            if self.nova_compute_beside:
                raise
            LOG.warning("%s", exc)
            return
        if held != root_uuid:
            LOG.warning(
                "compute node %s is resource provider %s, but nova's node identity "
                "(compute_id) names %s: nova-compute would create another compute node of "
                "this name and fail; make compute_id hold %s (docs/deployment.md, "
                '"Beside nova-compute")',
                nodename,
                root_uuid,
                held,
                root_uuid,
            )

    def _nova_node(self, nodename: str, stored: str | None) -> list[ProviderRecord]:
        """nova's compute node by its ``compute_id`` file, renamed ``nodename``; [] when none.

        nova names a libvirt compute node after libvirt's hostname
        (``getHostname()``), which need not be ``[DEFAULT] host``; its provider's
        UUID is the one in nova's ``compute_id`` file
        (:meth:`StateStore.nova_compute_id`). A root provider with that UUID is
        this host's, whatever its name: it is renamed to ``nodename`` and taken
        over (its inventories, traits and allocations kept), rather than a
        second compute node being created beside it. Only when the state
        records no UUID for ``nodename`` and none for another node.
        """
        nova_uuid = None if stored else self.state.nova_compute_id()
        if nova_uuid is None or nova_uuid in self.state.root_uuids().values():
            return []
        listing = endpoints.list_tree(self.client, nova_uuid)
        root = next((r for r in listing if r["uuid"] == nova_uuid), None)
        if root is None or root["parent_provider_uuid"] is not None:
            return []
        LOG.warning(
            "compute node %s: taking over nova's compute node %s (%s, from %s/compute_id): "
            "renamed %s",
            nodename,
            root["name"],
            nova_uuid,
            self.state.path,
            nodename,
        )
        endpoints.update_provider(self.client, nova_uuid, nodename, None)
        return endpoints.list_tree(self.client, nova_uuid)

    def _by_hypervisor_name(self, nodename: str, stored: str | None) -> list[ProviderRecord]:
        """nova's compute node by the hypervisor's name, renamed ``nodename``; [] when none.

        nova names a libvirt compute node after libvirt's hostname; when
        ``[DEFAULT] host`` differs and no ``compute_id`` file says which
        provider is nova's, a root provider of that name that no other node
        of this state directory records is this host's: renamed and taken
        over (inventories, traits and allocations kept), not duplicated.
        """
        alias = self.hypervisor_names.get(nodename)
        if stored or not alias:
            return []
        found = endpoints.find_by_name(self.client, alias)
        if not found or found[0]["parent_provider_uuid"] is not None:
            return []
        uuid = found[0]["uuid"]
        if uuid in self.state.root_uuids().values():
            return []
        LOG.warning(
            "compute node %s: taking over nova's compute node %s (%s, named after the "
            "hypervisor's hostname): renamed %s",
            nodename,
            alias,
            uuid,
            nodename,
        )
        endpoints.update_provider(self.client, uuid, nodename, None)
        return endpoints.list_tree(self.client, uuid)
