"""An agent for a benchmark: the fake driver on a host file, its own state directory."""

from __future__ import annotations

from pathlib import Path

from agent.conf import config
from agent.placement.embedded import EmbeddedPlacement
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver


def fake_tracker(
    placement: EmbeddedPlacement, tmp: Path, nodename: str, host: Path, numa: bool = False
) -> ResourceTracker:
    """A :class:`ResourceTracker` of the fake driver reading ``host``, its state in
    ``tmp/state-NODENAME``, metrics off, NUMA cells in Placement only with ``numa``."""
    conf = config.load(
        [],
        {
            "DEFAULT": {"state_path": str(tmp / f"state-{nodename}")},
            "numa": {"model_in_placement": numa},
            "metrics": {"listen": ""},
        },
    )
    driver = FakeDriver(conf, host)
    state = StateStore(conf.state_path)
    return ResourceTracker(conf, driver, ReportClient(placement.client(), state), state)


def restart(placement: EmbeddedPlacement, tracker: ResourceTracker) -> ResourceTracker:
    """``tracker`` as a restarted agent would be: the same configuration, driver and
    state directory, a new report client (nothing kept in memory)."""
    state = tracker.state
    report = ReportClient(placement.client(), state)
    return ResourceTracker(tracker.conf, tracker.driver, report, state)
