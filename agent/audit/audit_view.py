"""One node's allocations as an audit decides on them: the view, the node's shape, the
stored record (built by :class:`agent.audit.audit_read.AuditReader`, the one place every
trigger's view is read).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from agent.audit import evidence, record_json
from agent.audit.consumer_record import ConsumerRecord
from agent.model.allocations import ByProvider
from agent.placement.allocation_reads import Known
from agent.placement.own_writes import OwnWrites
from agent.state.store import StateStore


@dataclass(frozen=True)
class NodeShape:
    """What the audit needs of one node's layout, as plain data (from the node view,
    :meth:`agent.tracker.node_view.NodeView.shape`).

    Attributes:
        nodename: the compute node.
        owned: the node's providers the agent owns.
        cpu_providers: the owned providers with VCPU, PCPU or MEMORY_MB inventory (read
            on every audit).
        tree: every provider of the node's tree (owned or not).
        sharing: the shared-storage provider DISK_GB goes to, if any.
        produces: the classes the planner gives instances on the owned providers.
        created: providers this cycle's writes created: recorded empty, not read.
    """

    nodename: str
    owned: frozenset[str]
    cpu_providers: frozenset[str]
    tree: frozenset[str]
    sharing: str | None = None
    produces: frozenset[str] | None = None
    created: frozenset[str] = frozenset()


@dataclass
class AuditView:
    """One node's allocations as read at the start of an audit.

    Attributes:
        nodename: the compute node.
        record: the audit record, refreshed from Placement.
        owned: the providers of the node the agent owns.
        tree: every provider of the node's tree (owned or not): CPU or memory
            held outside it is held on another compute node.
        produces: the classes the planner gives instances on the owned
            providers (:func:`agent.shape.planning.planned_classes`); others
            held there are kept by every write.
        stored: the record as it was stored (to write only a changed one).
        reads: providers whose allocations were read.
        own: the audit's own allocation writes of this cycle (kept per node,
            so nodes audited in parallel do not mix them).
        store: the state directory the record is saved in (:meth:`save`).
        shape: the node's layout it was read for
            (:meth:`agent.audit.audit_read.AuditReader.again` reads it anew).
        before: ``{consumer: {provider: {rc: amount}}}`` on the owned
            providers as the last audit saved them (``stored`` as given, before
            this audit's saves): what each instance held here before
            (:func:`agent.audit.evidence.last_held`).
    """

    nodename: str
    record: ConsumerRecord
    owned: set[str]
    stored: dict[str, Any]
    tree: frozenset[str] = frozenset()
    produces: frozenset[str] | None = None
    reads: int = 0
    own: OwnWrites = field(default_factory=OwnWrites)
    store: StateStore | None = field(default=None, repr=False, compare=False)
    shape: NodeShape | None = field(default=None, repr=False, compare=False)
    before: dict[str, ByProvider] = field(init=False)

    @classmethod
    def load(
        cls,
        state: StateStore,
        nodename: str,
        owned: Iterable[str],
        tree: Iterable[str],
        record: ConsumerRecord | None = None,
        stored: dict[str, Any] | None = None,
    ) -> AuditView:
        """The view of ``nodename`` with its record as stored in ``state``, saved there
        (:meth:`save`).

        Args:
            owned: the node's providers the agent owns.
            tree: every provider of the node's tree.
            record: the record, loaded already this cycle from ``stored``.
            stored: the stored record as read this cycle (read from ``state`` when None:
                the state file is read once per cycle).
        """
        stored = stored if stored is not None else state.consumers(nodename) or {}
        loaded = record if record is not None else record_json.load(stored)
        mine = set(owned)
        return cls(nodename, loaded, mine, stored, frozenset(tree) | mine, store=state)

    def save(self, statuses: bool = False) -> None:
        """Save the record in ``store`` when it changed since last stored (write-ahead).

        Args:
            statuses: a change of the consumers' statuses alone is saved too
                (the audit's last save). They say what the last audit found,
                for ``show`` and metrics, and are rebuilt by every audit: the
                write-ahead saves before and between writes skip them, or an
                unchanged node's record was written twice a cycle (issue 28).

        Raises:
            RuntimeError: the view was made without a state store (a programming error).
        """
        if self.store is None:
            raise RuntimeError(f"node {self.nodename}: audit view without a state store")
        doc = record_json.dump(self.record)
        if doc == self.stored:
            return
        if statuses or _but_statuses(doc) != _but_statuses(self.stored):
            self.store.set_consumers(self.nodename, doc)
            self.stored = doc

    def __post_init__(self) -> None:
        self.before = evidence.last_held(self.stored, self.owned)

    def generation_of(self, consumer: str) -> int | None:
        """``consumer``'s generation as the record's reads of the owned providers last saw
        it (None: not known)."""
        for rp in sorted(self.owned):
            found = self.record.held.get(rp)
            if found is not None and consumer in found.consumer_generations:
                return found.consumer_generations[consumer]
        return None

    @cached_property
    def held(self) -> dict[str, ByProvider]:
        """``{consumer: {provider: {rc: amount}}}`` on the node's owned providers.

        Computed once, after :meth:`agent.audit.audit_read.AuditReader.read` has read:
        the planner and :func:`~agent.audit.audit_decision.decide` both use it.
        """
        return self.record.by_consumer(self.owned)


class StoredRecord:
    """A node's audit record as stored in ``state_path``, read once, when first needed
    (by the mirror's vouch or by the audit, whichever asks first).

    Args:
        state: the state directory.
        nodename: the compute node.
        record, doc: a record already in memory and its stored form (a new read of
            the same audit, after a conflict): nothing is read from ``state``.
    """

    def __init__(
        self,
        state: StateStore,
        nodename: str,
        record: ConsumerRecord | None = None,
        doc: dict[str, Any] | None = None,
    ) -> None:
        self.state = state
        self.nodename = nodename
        if doc is not None:
            self.doc = doc
        if record is not None:
            self.record = record

    @cached_property
    def doc(self) -> dict[str, Any]:
        """The stored form (``{}`` when there is none)."""
        return self.state.consumers(self.nodename) or {}

    @cached_property
    def record(self) -> ConsumerRecord:
        """The record (empty when none is stored, or it cannot be parsed)."""
        return record_json.load(self.doc)

    def known(self) -> Known:
        """:func:`known` of the record."""
        return known(self.record)


def known(record: ConsumerRecord) -> Known:
    """What ``record`` says Placement held, as plain data for the Placement layer's reads:
    the providers' allocations, and the consumers the agent itself may have written."""
    return Known(dict(record.held), frozenset(record.instances | set(record.claims)))


def _but_statuses(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "states"}
