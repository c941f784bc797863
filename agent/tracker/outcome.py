"""What one cycle of the resource tracker did: per node, and for the whole cycle.

The service logs :meth:`CycleOutcome.summary`, feeds the metrics from it and
stores :meth:`CycleOutcome.to_json` as ``last_cycle.json`` for ``compute-agent status``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agent.placement.writer import SyncResult


@dataclass
class NodeOutcome:
    """What one cycle did for one node.

    Attributes:
        nodename: the compute node.
        ok: the node's providers and allocations were brought in step.
        error: why not, when ``ok`` is False.
        providers: providers in the node's tree after the cycle.
        sync: what was written of the tree (providers, inventories, traits,
            aggregates; ``reshaped`` when a ``POST /reshaper`` was made).
        retained: providers of gone hardware kept because they are in use.
        allocations_written: consumers whose allocations were written.
        allocations_removed: consumers whose allocations here were removed.
        unknown_consumers: consumers left alone (not instances of this host).
        moving: instances listed here that nova is moving (nothing written).
        drift: instances whose allocation here differs from the plan.
        consumers: every consumer's state and why (``ConsumerStatus.to_json``).
        problems: writes that failed without failing the node (logged).
    """

    nodename: str
    ok: bool = True
    error: str = ""
    providers: int = 0
    sync: SyncResult = field(default_factory=SyncResult)
    retained: list[str] = field(default_factory=list)
    allocations_written: list[str] = field(default_factory=list)
    allocations_removed: list[str] = field(default_factory=list)
    unknown_consumers: list[str] = field(default_factory=list)
    moving: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    consumers: list[dict[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class CycleOutcome:
    """What one cycle did.

    Attributes:
        startup: this was the start-up cycle.
        started: start, seconds since the epoch.
        duration: seconds.
        nodes: one :class:`NodeOutcome` per node.
        error: a failure before any node was worked on (the driver could
            not list its nodes), else empty.
        requests: Placement requests the cycle made.
        keystone_refused: requests Keystone failed before they were sent to Placement
            (unreachable, credentials refused, certificate not trusted, no endpoint in the
            catalog); not in ``requests``.
        state_error: why the state directory could not be written this
            cycle, else empty (the cycle is then ``degraded``).
    """

    startup: bool
    started: float
    duration: float = 0.0
    nodes: list[NodeOutcome] = field(default_factory=list)
    error: str = ""
    requests: int = 0
    keystone_refused: int = 0
    state_error: str = ""

    @property
    def status(self) -> str:
        """``ok``; ``degraded`` when a write was refused or state could not be saved
        (Placement may lack an allocation or a provider); ``failed`` when a node failed."""
        if self.error or not all(n.ok for n in self.nodes):
            return "failed"
        if self.state_error or any(n.problems for n in self.nodes):
            return "degraded"
        return "ok"

    @property
    def ok(self) -> bool:
        """True when every node succeeded and nothing was left unwritten."""
        return self.status == "ok"

    @property
    def progressed(self) -> bool:
        """True when Placement was reached and at least one node was worked on (watchdog)."""
        return not self.error and any(n.ok for n in self.nodes)

    def summary(self) -> str:
        """One line for logs and ``STATUS=`` of systemd."""
        if self.error:
            return f"cycle failed: {self.error}"
        failed = [n.nodename for n in self.nodes if not n.ok]
        degraded = [n.nodename for n in self.nodes if n.ok and n.problems]
        if failed:
            head = f"cycle failed for {', '.join(failed)}"
        elif degraded:
            problems = sum(len(n.problems) for n in self.nodes)
            head = f"cycle degraded ({problems} write(s) refused) for {', '.join(degraded)}"
        elif self.state_error:
            head = f"cycle degraded ({self.state_error})"
        else:
            head = "cycle ok"
        written = sum(len(n.allocations_written) for n in self.nodes)
        removed = sum(len(n.allocations_removed) for n in self.nodes)
        return (
            f"{head}: {len(self.nodes)} node(s), {sum(n.providers for n in self.nodes)} "
            f"providers, allocations written {written}, removed {removed}, "
            f"{self.requests} placement requests{self._keystone()}, {self.duration:.2f} s"
        )

    def _keystone(self) -> str:
        """``, N refused by Keystone`` when Keystone failed some requests, else nothing."""
        if not self.keystone_refused:
            return ""
        return f" ({self.keystone_refused} more failed at Keystone, not sent)"

    def to_json(self) -> dict[str, Any]:
        """The outcome as stored in ``last_cycle.json``."""
        return {
            "ok": self.ok,
            "status": self.status,
            "state_error": self.state_error,
            "startup": self.startup,
            "started": self.started,
            "finished": self.started + self.duration,
            "duration": self.duration,
            "error": self.error,
            "requests": self.requests,
            "keystone_refused": self.keystone_refused,
            "summary": self.summary(),
            "nodes": [asdict(n) for n in self.nodes],
        }
