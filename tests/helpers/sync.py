"""The agent's Placement side in-process: a client configured as operators do, one sync,
one start-up cycle."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agent.conf import config as agent_config
from agent.placement.client import PlacementClient
from agent.placement.report import ReportClient
from agent.placement.session import client_from_conf
from agent.shape.adapter import adapt
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.base import ComputeDriver

if TYPE_CHECKING:  # annotation only: the result types may move within their layer
    from agent.placement.writer import SyncResult
    from agent.tracker.outcome import CycleOutcome


def cycle(report: ReportClient, driver: ComputeDriver, nodename: str) -> SyncResult:
    """One provider-tree sync of ``nodename``: read the tree, let the driver lay it out, write it.

    Returns what ``ReportClient.update_from_provider_tree`` returns (what was written).
    """
    tree = report.get_provider_tree_and_ensure_root(nodename)
    adapt(driver, driver.conf).update_provider_tree(tree, nodename)
    return report.update_from_provider_tree(tree)


def remote_client(tmp_path: Path, url: str, *extra: str) -> PlacementClient:
    """A client configured as docs/placement.md tells operators of a noauth2 Placement.

    ``extra``: more ``[placement]`` lines, e.g. ``"request_retries = 1"``.
    """
    path = tmp_path / "remote.conf"
    path.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\n"
        f"[placement]\nauth_type = admin_token\nendpoint = {url}\ntoken = admin\n"
        "noauth_roles = admin,service\n" + "".join(f"{line}\n" for line in extra)
    )
    return client_from_conf(agent_config.load([str(path)]))


def startup_cycle(tmp_path: Path, url: str, driver: ComputeDriver) -> CycleOutcome:
    """The service's start-up cycle of ``driver`` against the Placement at ``url``
    (state in ``tmp_path/state``)."""
    state = StateStore(tmp_path / "state")
    report = ReportClient(remote_client(tmp_path, url), state, sleep=lambda _s: None)
    return ResourceTracker(driver.conf, driver, report, state).update_available_resource(True)
