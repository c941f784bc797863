"""What the service keeps of each cycle: metrics, systemd's STATUS, ``last_cycle.json``.

``compute-agent status`` reads ``last_cycle.json`` (agent.cli.commands.status):
the outcome (:meth:`CycleOutcome.to_json`), whether it was fatal, the
service's pid, and the monotonic time and boot it finished at, so status
measures the cycle's age on the monotonic clock when on the same boot.
"""

from __future__ import annotations

import logging
import os
import time

from agent.service.metrics import AgentMetrics
from agent.service.notify import Notifier
from agent.shape.layout import OWNER_TRAIT
from agent.state.store import StateStore, boot_id
from agent.tracker.outcome import CycleOutcome

LOG = logging.getLogger(__name__)


def record_cycle(
    outcome: CycleOutcome,
    fatal: bool,
    metrics: AgentMetrics,
    notifier: Notifier,
    state: StateStore,
    owner_trait: str = OWNER_TRAIT,
) -> None:
    """Feed ``outcome`` to the metrics and systemd, and store it as the last cycle.

    The inventory metrics are read from the state the cycle left for each
    node that succeeded; a node whose state cannot be read only loses its
    metrics update (logged), never the record.

    Args:
        outcome: the cycle's outcome.
        fatal: the cycle ended the service (exit 4 or 5).
        metrics: the service's metrics.
        notifier: systemd's notification socket.
        state: the state directory.
        owner_trait: ``[compute] owner_trait``: which providers are the agent's.
    """
    metrics.observe_cycle(outcome, fatal)
    for node in outcome.nodes:
        if node.ok:
            try:
                metrics.observe_state(node.nodename, state, owner_trait)
            except (OSError, ValueError, TypeError, AttributeError) as exc:
                LOG.warning("node %s: inventory metrics not updated: %s", node.nodename, exc)
    notifier.status(outcome.summary())
    state.set_last_cycle(
        {
            **outcome.to_json(),
            "fatal": fatal,
            "pid": os.getpid(),
            "finished_monotonic": time.monotonic(),
            "boot_id": boot_id(),
        }
    )
