"""The triggers of the allocation audit beside nova's own code (issue 39's judge).

The agent audits an instance's allocation on three triggers: its periodic cycle
(:meth:`tests.helpers.nova_cloud.Host.cycle`), the driver's events (this module: a
host file edited as the hypervisor would change, the events the fake driver's watch
would emit for it, coalesced by the service's own :class:`~agent.service.events.EventQueue`
and applied by :meth:`agent.tracker.cycle.ResourceTracker.apply_events`, as the
service's cycle worker does), and its own writes' retries after a 409 (the agent's
client wrapped with :func:`tests.helpers.faults.before_send`). Beside it, nova's writes
are nova's own code (:mod:`tests.helpers.nova_client`), and ``nova-manage placement
heal_allocations`` is nova's own ``PlacementCommands`` (:func:`heal_allocations`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

from nova import objects
from nova.cmd import manage as nova_manage

from agent.service.events import EventQueue
from agent.tracker.targeted import TargetedOutcome
from drivers.fake_host import load_host_description
from drivers.fake_host.nodes import FakeNode
from drivers.fake_watch import changes
from tests.helpers.nova_client import Flavor, Nova, NovaCallFailed
from tests.helpers.nova_cloud import Host
from tests.helpers.placement_http import call, http_get


def _nodes(path: Path) -> dict[str, FakeNode]:
    return {n.host.nodename: n for n in load_host_description(path)}


def with_events(host: Host, edit: Callable[[], None]) -> TargetedOutcome:
    """Run ``edit`` (an edit of ``host``'s file: :meth:`Host.define`, :meth:`Host.undefine`,
    :func:`rename`), then deliver the events the fake driver's watch emits for it to the
    agent as its service does: each event put on an :class:`EventQueue`, the coalesced
    batch taken and applied by :meth:`ResourceTracker.apply_events`.

    Returns:
        What the targeted updates did.

    Raises:
        AssertionError: the edit made no instance or device event (the test is wrong),
            or the targeted updates failed.
    """
    before = _nodes(host.host_path)
    edit()
    queue = EventQueue(wake=lambda: None, resync=_no_resync)
    for event in changes(before, _nodes(host.host_path)):
        queue.put(event)
    batch, _since = queue.take()
    assert batch, f"editing {host.host_path} made no event"
    outcome = host.tracker.apply_events(batch)
    assert not outcome.errors, f"the targeted updates failed: {outcome.errors}"
    return outcome


def _no_resync() -> None:
    raise AssertionError("the host file's nodes changed: a full cycle was requested")


def rename(host: Host, instance: str, name: str) -> None:
    """The domain of ``instance`` is redefined under the display name ``name``, nothing else
    changed (a lifecycle event about it, no change of its plan)."""
    doc = host.description()
    for entry in doc.node()["instances"]:
        if entry["uuid"] == instance:
            entry["name"] = name
    doc.write(host.host_path)
    host.driver.reload()


def heal_allocations(nova: Nova, instance: str, flavor: Flavor, nodename: str) -> None:
    """``nova-manage placement heal_allocations --instance UUID --force`` for an instance of
    ``flavor`` on ``nodename``.

    nova: ``PlacementCommands._heal_allocations_for_instance`` (nova/cmd/manage.py) with
    ``force=True``: GET the consumer, build the flavor's allocation on the instance's
    compute node (``_heal_missing_alloc``), keep the consumer generation read and ``PUT``
    it (``SchedulerReportClient.put_allocations``). Two stand-ins for the cell database:
    the compute node's UUID is given in its node cache, and the instance has no block
    device mapping (booted from an image: ``is_volume_backed_instance`` is False). No
    port is healed.

    Raises:
        NovaCallFailed: nova found nothing to heal.
    """
    inst = objects.Instance(
        uuid=instance,
        host=nodename,
        node=nodename,
        task_state=None,
        project_id=nova.project_id,
        user_id=nova.user_id,
        image_ref="155d900f-4e14-4e4c-a73d-069cbf4541e6",
        flavor=flavor.nova(),
    )
    inst._context = nova.context
    no_bdms = objects.BlockDeviceMappingList(objects=[])
    with mock.patch.object(
        objects.BlockDeviceMappingList, "get_by_instance_uuid", return_value=no_bdms
    ):
        healed = nova_manage.PlacementCommands()._heal_allocations_for_instance(
            nova.context,
            inst,
            {nodename: nova.root(nodename)},
            lambda _line: None,
            nova.client,
            False,
            False,
            None,
            True,
        )
    if not healed:
        raise NovaCallFailed(f"nova's heal_allocations({instance}) healed nothing")


def put_inventory(base: str, provider: str, rc: str, **fields: Any) -> None:
    """An operator changes ``fields`` of ``provider``'s ``rc`` inventory (plain HTTP,
    ``PUT /resource_providers/{uuid}/inventories/{rc}`` with the generation read)."""
    got = http_get(base, f"/resource_providers/{provider}/inventories/{rc}")
    body = {k: v for k, v in got.items() if k != "resource_provider_generation"}
    body.update(fields, resource_provider_generation=got["resource_provider_generation"])
    call(base, "PUT", f"/resource_providers/{provider}/inventories/{rc}", body, expect=200)


def inventory(base: str, provider: str, rc: str) -> dict[str, Any]:
    """``GET /resource_providers/{uuid}/inventories/{rc}`` (generation left out)."""
    got = http_get(base, f"/resource_providers/{provider}/inventories/{rc}")
    return {k: v for k, v in got.items() if k != "resource_provider_generation"}
