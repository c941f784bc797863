"""Shared test helpers: paths and configuration built without files."""

from __future__ import annotations

from pathlib import Path

import pytest
from oslo_config import cfg

from agent.conf import config as agent_config

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def make_conf(tmp_path: Path, **groups: dict[str, object]) -> cfg.ConfigOpts:
    """A validated configuration with ``state_path`` in ``tmp_path`` and overrides by group.

    ``make_conf(tmp_path, DEFAULT={"reserved_host_cpus": 2}, numa={"model_in_placement": True})``
    """
    overrides: dict[str, dict[str, object]] = {"DEFAULT": {"state_path": str(tmp_path / "state")}}
    for group, values in groups.items():
        overrides.setdefault(group, {}).update(values)
    return agent_config.load([], overrides)


@pytest.fixture
def conf_factory(tmp_path: Path):
    """``conf_factory(**groups)`` -> a loaded configuration (see :func:`make_conf`)."""

    def factory(**groups: dict[str, object]) -> cfg.ConfigOpts:
        return make_conf(tmp_path, **groups)

    return factory
