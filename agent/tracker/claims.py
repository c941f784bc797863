"""Instance claims: an instance's allocation written before it runs, and given back.

Rule (resource-objects.txt, ``can_provide``; nova's
``ResourceTracker.instance_claim``): every requested amount is checked with
``Inventory.check`` against the provider's current usage in Placement before
anything is written; Placement checks again when it writes, so a concurrent
claim elsewhere cannot oversubscribe. The write merges: what the consumer
already holds on providers that are not this agent's (the source host of a
migration, a network agent's bandwidth provider) is kept
(:func:`~agent.model.allocations.merge_ours`). The claim is in the audit's record, saved
before the write is sent, as *claimed, building*
(:mod:`agent.audit.consumer_record`): the cycles keep it until the driver
lists the instance (or ``[DEFAULT] instance_build_timeout`` passes).

The caller holds the node's lock (:class:`agent.tracker.cycle.ResourceTracker`),
so a claim and a cycle never interleave on one node.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from agent.audit.audit import AllocationAudit
from agent.model import ownership
from agent.model.allocations import ConsumerAllocations, merge_ours
from agent.model.exceptions import CapacityExceeded
from agent.model.provider_tree import ProviderTree
from agent.placement.report import ReportClient
from agent.tracker.node_view import NodeViews
from drivers.records import Instance

LOG = logging.getLogger(__name__)


class InstanceClaims:
    """Claims and gives back instances' allocations on this host's nodes.

    Args:
        views: the tracker's node views (lay out the node, list its instances).
        report: the Placement façade.
        audit: the allocation audit (its record learns of claimed instances).
    """

    def __init__(self, views: NodeViews, report: ReportClient, audit: AllocationAudit) -> None:
        self.views = views
        self.report = report
        self.audit = audit

    def claim(self, nodename: str, instance: Instance) -> ConsumerAllocations:
        """Check that ``instance`` fits node ``nodename`` and write its allocation.

        Returns:
            The allocation written on this host's providers; empty when the
            instance uses nothing.

        Raises:
            CapacityExceeded: a class does not fit, naming it and the numbers
                (requested, used, capacity).
            PlacementError: Placement refused the allocation.
        """
        view = self.views.look(nodename, retain=False)
        tree, owned = view.tree, view.owned
        # Planned with the node's other instances where Placement holds them,
        # so the new one lands where the audit would put it and moves no one.
        plan = view.plan(
            [*self.views.adapter.list_instances(nodename), instance],
            self.audit.record(nodename).by_consumer(owned),
        ).get(instance.uuid)
        if plan is None:
            self.audit.claimed(nodename, instance.uuid)
            return ConsumerAllocations(project_id=instance.project_id, user_id=instance.user_id)
        self._check_capacity(tree, plan)
        shared = plan.without(owned)
        # Recorded before the write is sent: a failure after it leaks nothing.
        self.audit.claimed(nodename, instance.uuid, shared)
        generation = self._write(instance.uuid, plan, owned | set(shared), produces=view.produces)
        self.audit.claim_written(nodename, instance.uuid, generation)
        LOG.info("instance %s: claimed %s on %s", instance.uuid, plan.allocations, nodename)
        return plan

    def _write(
        self,
        consumer: str,
        want: ConsumerAllocations,
        ours: set[str],
        keep: Iterable[str] = (),
        produces: frozenset[str] | None = None,
    ) -> int | None:
        """Write ``want`` on this host's providers, keeping what the consumer holds elsewhere.

        A read-edit-write with the consumer
        generation (:meth:`ReportClient.edit_allocations`) of
        :func:`~agent.model.allocations.merge_ours`.

        Args:
            consumer: the consumer UUID.
            want: its allocations on this host's providers (and the sharing one).
            ours: the providers whose part the agent decides.
            keep: providers in ``ours`` whose part stays as held.
            produces: the classes the planner produces (others are kept as held).

        Returns:
            The consumer generation the write produced (None: nothing written).

        Raises:
            PlacementError: Placement refused the write (e.g. it does not fit).
        """
        kept = set(keep)
        sent: list[ConsumerAllocations] = []

        def edit(held: ConsumerAllocations) -> ConsumerAllocations:
            # The last try is the one written.
            sent[:] = [merge_ours(held, want, ours, kept, produces=produces)]
            return sent[0]

        return self.report.edit_allocations(consumer, edit)

    def _check_capacity(self, tree: ProviderTree, plan: ConsumerAllocations) -> None:
        """Raise ``CapacityExceeded`` unless every amount of ``plan`` fits now."""
        for rp, amounts in plan.allocations.items():
            usages = self.report.provider_usages(rp)
            if tree.exists(rp):
                inventory = tree.data(rp).inventory
            else:  # the sharing provider, outside the node's tree
                inventory = self.report.provider_inventory(rp)
            for rc, amount in amounts.items():
                if rc not in inventory:
                    raise CapacityExceeded(
                        rc, amount, usages.get(rc, 0), 0, f"provider {rp} has no {rc}"
                    )
                inventory[rc].check(amount, usages.get(rc, 0))

    def give_back(self, nodename: str, instance: Instance) -> None:
        """Remove what ``instance`` holds on node ``nodename`` (spec: abort a claim).

        Raises:
            PlacementError: the allocation could not be removed.
        """
        tree = self.report.get_provider_tree_and_ensure_root(nodename)
        shared = self.audit.claim_given_back(nodename, instance.uuid)
        owned = ownership.owned(tree, nodename, self.views.owner_trait)
        self.report.remove_allocations_from(instance.uuid, owned | shared)
        LOG.info("instance %s: claim on %s given back", instance.uuid, nodename)
