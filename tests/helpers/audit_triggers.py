"""The triggers of the allocation audit beside nova's own code (issue 39's judge).

The agent audits an instance's allocation on three triggers: its periodic cycle
(:meth:`tests.helpers.nova_cloud.Host.cycle`), the driver's events (this module: a
host file edited as the hypervisor would change, the events the fake driver's watch
would emit for it, coalesced by the service's own :class:`~agent.service.events.EventQueue`
and applied by :meth:`agent.tracker.cycle.ResourceTracker.apply_events`, as the
service's cycle worker does), and its own writes' retries after a 409 (the agent's
client wrapped with :func:`tests.helpers.faults.before_send`). Beside it, nova's writes
are nova's own code (:mod:`tests.helpers.nova_client`), and ``nova-manage placement
heal_allocations`` is its steps run with nova's own functions (:func:`heal_allocations`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nova.scheduler import utils as scheduler_utils

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
    ``flavor`` (booted from an image) on ``nodename``.

    nova: ``PlacementCommands._heal_allocations_for_instance`` (nova/cmd/manage.py) with
    ``force=True`` reads the consumer (``get_allocs_for_consumer``), builds the flavor's
    allocation on the instance's compute node (``_heal_missing_alloc``:
    ``scheduler.utils.resources_from_flavor``, which is ``resources_from_flavor_and_bfv``
    with the instance's boot-from-volume flag), keeps the consumer generation it read and
    ``PUT``s it (``SchedulerReportClient.put_allocations``). Those steps are run here with
    nova's own functions; ``nova.cmd.manage`` itself is not imported: importing it
    monkey-patches the whole test process with eventlet (its first line,
    ``monkey_patch.patch()``), which stops the service's threads.

    Raises:
        NovaCallFailed: Placement refused nova's write.
    """
    held = nova.client.get_allocs_for_consumer(nova.context, instance)
    resources = scheduler_utils.resources_from_flavor_and_bfv(flavor.nova(), False)
    payload = {
        "allocations": {nova.root(nodename): {"resources": resources}},
        "project_id": nova.project_id,
        "user_id": nova.user_id,
        "consumer_generation": held["consumer_generation"],
    }
    if not nova.client.put_allocations(nova.context, instance, payload):
        raise NovaCallFailed(f"nova's heal_allocations({instance}) was refused")


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


def revert_with_a_cycle_inside(cloud: Any, label: str, instance: str, migration: str) -> None:
    """nova's revert (``_revert_allocation``: ``move_allocations`` from the migration record
    back to the instance) with a periodic cycle of host ``label``'s agent landed between
    nova's reads and its ``POST /allocations`` (the window issue 39, case 1 names)."""

    def cycles(method: str, _url: str) -> None:
        if method == "POST":
            cloud.cycle(label, watch=(instance, migration))

    cloud.nova.adapter.before_write = cycles
    try:
        cloud.nova.revert(instance, migration)
    finally:
        cloud.nova.adapter.before_write = None
