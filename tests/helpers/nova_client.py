"""nova 34's own allocation writes, run in this process against a test's Placement.

The judge of issue 26: every allocation nova writes during a boot or a move is written
here by nova's code itself (nova 34.0.0, the ``test`` extra of pyproject.toml), never by
a re-implementation. Only the bookkeeping is this module's: which host an instance is
on, which migration UUID a move uses, which flavor it asks for.

How nova is installed and run: ``pip install nova==34.0.0`` into the test environment
(``make install`` installs ``.[test]``). nova is imported into the pytest process: importing
``nova.scheduler.client.report``, ``nova.conductor.tasks.migrate``, ``nova.compute.manager``
and ``nova.compute.resource_tracker`` does not monkey-patch anything (nova's eventlet
patching runs only from its service entry points, ``nova.monkey_patch``), adds no logging
handler and leaves the root logger's level alone; it registers nova's options on oslo.config's
global ``cfg.CONF``, which the agent never uses (it builds its own ``ConfigOpts``).
Importing eventlet (through oslo.service and futurist) registers an at-fork hook that
only emits a ``DeprecationWarning`` when the process forks. The only
global this module changes is nova's report-client singleton, and only for the duration of
one conductor call (:meth:`Nova.start_move`).

The HTTP side: a keystoneauth1 ``Adapter`` with ``endpoint_override`` on the test's
Placement and noauth2 admin headers on the session (nova's ``_create_client`` replaces the
adapter's ``additional_headers`` with its ``accept`` header, so the identity rides on the
session), ``raise_exc=False`` as the openstacksdk proxy nova normally builds
(``nova.utils.get_sdk_adapter``) answers errors as responses; every answer of 400 or above
is recorded in :attr:`Nova.refused`, since some of nova's callers ignore a failed write
(``ComputeManager._revert_allocation`` drops ``move_allocations``' result).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from unittest import mock

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import session as ks_session
from nova import context as nova_context
from nova import objects
from nova.compute import manager as compute_manager
from nova.compute import resource_tracker as nova_rt
from nova.conductor.tasks import live_migrate
from nova.conductor.tasks import migrate as conductor_migrate
from nova.scheduler import request_filter
from nova.scheduler import utils as scheduler_utils
from nova.scheduler.client import report

from agent.placement.embedded import NOAUTH_HEADERS
from tests.helpers.placement_http import http_get

objects.register_all()


@dataclass(frozen=True)
class Flavor:
    """A flavor's sizes: VCPUs, memory in MiB, root disk in GiB (no ephemeral, no swap),
    and its extra specs as ``(key, value)`` pairs (``resources:CUSTOM_X=1``, ``trait:T``)."""

    vcpus: int
    memory_mb: int
    root_gb: int
    extra_specs: tuple[tuple[str, str], ...] = ()

    def resources(self) -> dict[str, int]:
        """``{VCPU, MEMORY_MB, DISK_GB}`` and each unsuffixed ``resources:RC`` extra spec:
        what nova's scheduler asks Placement for."""
        extra = {
            k.removeprefix("resources:"): int(v)
            for k, v in self.extra_specs
            if k.startswith("resources:")
        }
        return {"VCPU": self.vcpus, "MEMORY_MB": self.memory_mb, "DISK_GB": self.root_gb, **extra}

    def nova(self) -> objects.Flavor:
        return objects.Flavor(
            vcpus=self.vcpus,
            memory_mb=self.memory_mb,
            root_gb=self.root_gb,
            ephemeral_gb=0,
            swap=0,
            extra_specs=dict(self.extra_specs),
        )


class _Recording(ks_adapter.Adapter):
    """An Adapter that notes every answer of 400 or above (``(method, url, status, body)``),
    and runs ``before_write`` (when set) just before each write it sends: after nova's reads
    of the consumers' generations, before the write that carries them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused: list[tuple[str, str, int, str]] = []
        self.before_write: Callable[[str, str], None] | None = None

    def request(self, url: str, method: str, **kwargs: Any) -> Any:
        if self.before_write is not None and method in ("PUT", "POST", "DELETE"):
            self.before_write(method, url)
        resp = super().request(url, method, **kwargs)
        if resp.status_code >= 400:
            self.refused.append((method, url, resp.status_code, resp.text))
        return resp


class Nova:
    """nova's scheduler, conductor and compute manager, as far as they write allocations.

    Args:
        base: Placement's URL (``http://127.0.0.1:PORT``).
        project_id, user_id: the instances' owner (nova's request spec carries them).

    Attributes:
        client: nova's ``SchedulerReportClient`` on that Placement.
        context: nova's admin ``RequestContext`` (``nova.context.get_admin_context``: the
            scheduler and conductor run with an admin context; no policy file is read).
        refused: every answer of 400 or above Placement gave nova.
        shared_storage: the hosts share storage pools: :meth:`schedule` asks without
            ``in_tree`` (which would leave the pools out) and keeps the host's candidates.

    nova's calls raise what nova raises (``AllocationUpdateFailed``, ``AllocationMoveFailed``,
    ``NoValidHost``...); a call nova answers with a false result raises
    :class:`NovaCallFailed`.
    """

    def __init__(self, base: str, project_id: str, user_id: str) -> None:
        self.base = base
        self.project_id = project_id
        self.user_id = user_id
        session = ks_session.Session(auth=None, additional_headers=dict(NOAUTH_HEADERS))
        self.adapter = _Recording(
            session, service_type="placement", endpoint_override=base, raise_exc=False
        )
        self.client = report.SchedulerReportClient(adapter=self.adapter)
        self.context = nova_context.get_admin_context()
        self.shared_storage = False
        # nova's compute manager and resource tracker methods that write allocations use
        # only these attributes of ``self``: the methods run unchanged on this stand-in.
        self._compute = types.SimpleNamespace(reportclient=self.client)

    @property
    def refused(self) -> list[tuple[str, str, int, str]]:
        return self.adapter.refused

    def root(self, nodename: str) -> str:
        """The UUID of the compute node provider named ``nodename`` (KeyError when none)."""
        found = http_get(self.base, "/resource_providers", name=nodename)["resource_providers"]
        if not found:
            raise KeyError(f"no resource provider named {nodename!r} in Placement")
        return found[0]["uuid"]

    def schedule(
        self,
        instance: str,
        flavor: Flavor,
        nodename: str,
        project_id: str | None = None,
        via: str | None = None,
    ) -> None:
        """The scheduler places ``instance`` on ``nodename``: boot, unshelve, the destination
        of a resize, a migration or an evacuation.

        nova: ``SchedulerManager.select_destinations`` runs the request filters
        (``request_filter.process_reqspec``: here ``compute_status_filter`` and
        ``owner_nova_filter``), asks ``get_allocation_candidates`` (microversion 1.36)
        for the request spec's ``ResourceRequest.from_request_spec``, restricted to the
        requested destination's tree (``resources_from_request_spec`` sets ``in_tree``,
        nova/scheduler/utils.py), and claims the first candidate with
        ``scheduler.utils.claim_resources`` (consumer generation None: a new consumer;
        ``SchedulerReportClient.claim_resources`` doubles up an evacuated instance's
        existing allocation with the GET's generation).

        Args:
            project_id: the instance's project (default: this nova's ``project_id``).
            via: the first candidate that uses this provider (a shared-storage pool) is
                claimed, as a weigher might prefer it (default: the first candidate).

        Raises:
            NovaCallFailed: no candidate, or the claim answered false.
        """
        spec = objects.RequestSpec(
            flavor=flavor.nova(),
            image=objects.ImageMeta(properties=objects.ImageMetaProps()),
            project_id=project_id or self.project_id,
            user_id=self.user_id,
            is_bfv=False,
        )
        # Two of nova's request filters (process_reqspec) bear on the agent's trees: disabled
        # computes are forbidden, and, once every compute is new enough, the root must carry
        # OWNER_NOVA (the version check reads the cell databases: taken as passed here).
        request_filter.compute_status_filter(self.context, spec)
        with mock.patch.object(request_filter, "_should_filter_by_owner", return_value=True):
            request_filter.owner_nova_filter(self.context, spec)
        request = scheduler_utils.ResourceRequest.from_request_spec(spec)
        root = self.root(nodename)
        if not self.shared_storage:
            request.get_request_group(None).in_tree = root
        candidates, _summaries, version = self.client.get_allocation_candidates(
            self.context, request
        )
        # Placement leaves sharing providers out of an ``in_tree`` request (research_context
        # ``_get_trees_matching_all``): with shared storage nova's scheduler asks without it
        # and its host filters pick the node; here, the candidates rooted at ``nodename``.
        candidates = [c for c in candidates if root in c["allocations"]]
        if via is not None:
            candidates = [c for c in candidates if via in c["allocations"]]
        if not candidates:
            raise NovaCallFailed(f"no allocation candidate on {nodename} for {flavor}")
        claimed = scheduler_utils.claim_resources(
            self.context, self.client, spec, instance, candidates[0], version
        )
        _check(claimed, f"claim_resources({instance} on {nodename})")

    def start_move(self, instance: str, migration: str, source: str) -> None:
        """The conductor moves ``instance``'s allocation on ``source`` to the migration record
        ``migration`` (resize, cold migration, live migration: before the destination claim).

        nova: ``replace_allocation_with_migration`` (nova/conductor/tasks/migrate.py), run as
        it is with two stand-ins: ``objects.ComputeNode.get_by_host_and_nodename`` answers the
        source node's provider UUID (there is no cell database), and the report-client
        singleton is this client for the call.

        Raises:
            NovaCallFailed: nova found no allocation of the instance on the source node.
        """
        node = objects.ComputeNode(uuid=self.root(source), host=source, hypervisor_hostname=source)
        inst = objects.Instance(uuid=instance, host=source, node=source)
        mig = objects.Migration(uuid=migration)
        with (
            mock.patch.object(objects.ComputeNode, "get_by_host_and_nodename", return_value=node),
            mock.patch.object(report, "PLACEMENTCLIENT", self.client),
        ):
            source_cn, held = conductor_migrate.replace_allocation_with_migration(
                self.context, inst, mig
            )
        _check(source_cn and held, f"replace_allocation_with_migration({instance}, {migration})")

    def unclaim(self, instance: str, nodename: str) -> None:
        """The conductor drops the instance's claim on a destination that failed its checks
        (live migration's pre-checks, before trying another host).

        nova: ``LiveMigrationTask._remove_host_allocations`` (nova/conductor/tasks/
        live_migrate.py): ``remove_provider_tree_from_instance_allocation`` of that node.
        """
        task = types.SimpleNamespace(
            report_client=self.client,
            context=self.context,
            instance=objects.Instance(uuid=instance),
        )
        live_migrate.LiveMigrationTask._remove_host_allocations(task, self.root(nodename))

    def abort_move(self, instance: str, migration: str, source: str) -> None:
        """The conductor's move task fails before the compute hosts are involved (no valid
        destination): the migration record's allocation goes back to the instance.

        nova: ``LiveMigrationTask.rollback`` and ``MigrationTask.rollback`` call
        ``revert_allocation_for_migration`` (nova/conductor/tasks/migrate.py):
        ``move_allocations(ctx, migration.uuid, instance.uuid)`` through the report-client
        singleton (this client for the call).
        """
        node = objects.ComputeNode(uuid=self.root(source), host=source, hypervisor_hostname=source)
        inst = objects.Instance(uuid=instance, host=source, node=source)
        with mock.patch.object(report, "PLACEMENTCLIENT", self.client):
            conductor_migrate.revert_allocation_for_migration(
                self.context, node, inst, _migration(migration)
            )

    def confirm(self, instance: str, migration: str) -> None:
        """Confirm a resize or cold migration, or finish a live migration: the migration
        record's allocation on the source is deleted.

        nova: ``ComputeManager._delete_allocation_after_move`` (nova/compute/manager.py,
        from ``_confirm_resize`` and ``_post_live_migration``):
        ``delete_allocation_for_instance(ctx, migration.uuid, consumer_type='migration',
        force=False)`` (GET the consumer, PUT it empty with its generation).
        """
        compute_manager.ComputeManager._delete_allocation_after_move(
            self._compute, self.context, objects.Instance(uuid=instance), _migration(migration)
        )

    def revert(self, instance: str, migration: str) -> None:
        """Revert a resize, or roll back a live migration: the migration record's allocation
        goes back to the instance, replacing its destination allocation.

        nova: ``ComputeManager._revert_allocation`` (``finish_revert_resize``,
        ``_rollback_live_migration``): ``move_allocations(ctx, migration.uuid,
        instance.uuid)``. nova ignores ``move_allocations``' result: a refused move shows
        in :attr:`refused`.
        """
        moved = compute_manager.ComputeManager._revert_allocation(
            self._compute, self.context, objects.Instance(uuid=instance), _migration(migration)
        )
        _check(moved, f"_revert_allocation({instance}, {migration})")

    def remove_evacuated(self, instance: str, source: str) -> None:
        """The evacuated source's compute service is back and has destroyed the domain: the
        instance's allocation on the source tree is removed.

        nova: ``ComputeManager._destroy_evacuated_instances`` (nova/compute/manager.py, from
        ``init_host``) calls ``remove_provider_tree_from_instance_allocation(ctx,
        instance.uuid, <source node's provider UUID>)``; it is run here through
        ``ResourceTracker.delete_allocation_for_evacuated_instance``
        (nova/compute/resource_tracker.py, which ``rebuild_instance`` uses on a failed
        rebuild), the same call on the node named, without the migration records
        ``_destroy_evacuated_instances`` reads from the cell database.
        """
        tracker = types.SimpleNamespace(
            reportclient=self.client,
            compute_nodes={source: types.SimpleNamespace(uuid=self.root(source))},
        )
        nova_rt.ResourceTracker.delete_allocation_for_evacuated_instance(
            tracker, self.context, objects.Instance(uuid=instance), source
        )

    def shelve_offload(self, instance: str) -> None:
        """Shelve offload: the instance's allocations are deleted.

        nova: ``ResourceTracker.delete_allocation_for_shelve_offloaded_instance``
        (``ComputeManager._shelve_offload_instance``): ``delete_allocation_for_instance(ctx,
        uuid, force=True)``, a ``DELETE /allocations/{uuid}`` without generation.
        """
        tracker = types.SimpleNamespace(reportclient=self.client)
        nova_rt.ResourceTracker.delete_allocation_for_shelve_offloaded_instance(
            tracker, self.context, objects.Instance(uuid=instance)
        )

    def delete(self, instance: str) -> None:
        """The instance is deleted (its domain destroyed first): its allocations go.

        nova: ``ComputeManager._complete_deletion`` (nova/compute/manager.py):
        ``delete_allocation_for_instance(ctx, uuid, force=True)`` (``force`` is False only
        with deferred deletes, ``[DEFAULT] reclaim_instance_interval > 0``).
        """
        self.client.delete_allocation_for_instance(self.context, instance, force=True)


class NovaCallFailed(AssertionError):
    """A nova call answered false (nova logs it and goes on; the test fails)."""


def _check(result: Any, what: str) -> None:
    if not result:
        raise NovaCallFailed(f"nova's {what} failed")


def _migration(uuid: str) -> objects.Migration:
    return objects.Migration(uuid=uuid, source_node="", status="confirming")
