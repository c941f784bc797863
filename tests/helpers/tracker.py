"""The resource tracker in-process on the session's Placement, with a fake node of its own."""

from __future__ import annotations

import uuid as uuidlib
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.placement.embedded import EmbeddedPlacement
from agent.placement.report import ReportClient
from agent.state.store import StateStore
from agent.tracker.cycle import ResourceTracker
from drivers.fake import FakeDriver
from tests.helpers.conf import make_conf
from tests.helpers.hosts import BIG_HOST, HostDescription
from tests.helpers.names import unique
from tests.helpers.placement_http import held_by_name

if TYPE_CHECKING:  # annotation only: the outcome types may move within the tracker layer
    from agent.tracker.cycle import CycleOutcome

PROJECT = "0c4e2f1a3b5d4c6e8f9a0b1c2d3e4f50"
USER = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
"""The project and user of examples/big-host.yaml's VDI instances."""


class Setup:
    """A fake node from examples/big-host.yaml with its own name and instance UUIDs.

    Attributes:
        nodename: ``rt-`` and 8 random hex digits (:func:`tests.helpers.names.unique`); with
            ``nodes=N`` the others are ``{nodename}-1`` to ``{nodename}-{N-1}``.
        prefix: the instances' UUID prefix (:meth:`inst` gives them by number).
        host: the host description as data; ``host_path`` is where it is written
            (``tmp_path/host.yaml``); after an edit, ``host.write(host_path)`` and
            ``driver.reload()``.
        conf, driver, client, state, report, tracker: the agent's parts; ``now`` is
            the tracker's clock (seconds), moved by the test.
        base: Placement's URL for plain HTTP reads.
    """

    def __init__(
        self,
        tmp_path: Path,
        embedded: EmbeddedPlacement,
        driver_cls: type[FakeDriver] = FakeDriver,
        nodes: int = 1,
        **groups: dict[str, object],
    ) -> None:
        self.nodename = unique("rt")
        self.prefix = str(uuidlib.uuid4())[:-2]
        self.host = HostDescription.load(BIG_HOST).rename(self.nodename)
        self.host.prefix_instances(self.prefix)
        self.nodenames = [self.nodename]
        for i in range(1, nodes):
            name = f"{self.nodename}-{i}"
            self.host.clone_node(self.nodename, name, str(uuidlib.uuid4())[:-2])
            self.nodenames.append(name)
        self.host_path = self.host.write(tmp_path / "host.yaml")
        groups.setdefault("numa", {"model_in_placement": True})
        groups.setdefault("devices", {"enabled_mdev_types": ["nvidia-35", "nvidia-36"]})
        self.conf = make_conf(tmp_path, **groups)
        self.driver = driver_cls(self.conf, self.host_path)
        self.client = embedded.client()
        self.state = StateStore(tmp_path / "state")
        self.report = ReportClient(self.client, self.state, sleep=lambda _s: None)
        self.now = 1_000_000.0
        self.tracker = ResourceTracker(
            self.conf, self.driver, self.report, self.state, clock=lambda: self.now
        )
        self.driver.subscribe(self.tracker.handle_event)
        self.base = embedded.url

    @classmethod
    def started(cls, tmp_path: Path, embedded: EmbeddedPlacement) -> Setup:
        """A Setup after its start-up cycle and one more (both asserted ok)."""
        s = cls(tmp_path, embedded)
        assert s.cycle(startup=True).ok
        assert s.cycle().ok
        return s

    def inst(self, n: int) -> str:
        """Instance ``n`` (1-based, as in examples/big-host.yaml) of the first node."""
        return f"{self.prefix}{n:02d}"

    def uuid(self, name: str) -> str:
        """The UUID of provider ``name`` in the first node's tree (read from Placement)."""
        return self.report.get_provider_tree_and_ensure_root(self.nodename).data(name).uuid

    def held(self, consumer: str) -> dict[str, dict[str, Any]]:
        """``{provider name: resources}`` that Placement holds for ``consumer`` (plain HTTP)."""
        return held_by_name(self.base, consumer)

    def cycle(self, startup: bool = False) -> CycleOutcome:
        """One tracker cycle (``startup``: the start-up one, which may reshape)."""
        return self.tracker.update_available_resource(startup)

    def counted_cycle(self) -> tuple[Counter[tuple[str, str]], CycleOutcome]:
        """One ordinary cycle, and the requests it sent (``{(method, URL template): n}``)."""
        before = Counter(self.client.counts)
        outcome = self.cycle()
        after = Counter(self.client.counts)
        after.subtract(before)
        return +after, outcome
