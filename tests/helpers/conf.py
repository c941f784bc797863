"""The agent's configuration built without a file, for in-process tests."""

from __future__ import annotations

from pathlib import Path

from oslo_config import cfg

from agent.conf import config as agent_config


def make_conf(tmp_path: Path, **groups: dict[str, object]) -> cfg.ConfigOpts:
    """A validated configuration with ``state_path`` in ``tmp_path`` and overrides by group.

    ``make_conf(tmp_path, DEFAULT={"reserved_host_cpus": 2}, numa={"model_in_placement": True})``

    Args:
        tmp_path: the test's directory; the state directory is ``tmp_path / "state"``.
        groups: ``{option: value}`` per option group, over the defaults.

    Returns:
        The loaded configuration (``agent.conf.config.load`` validates it and raises as it does).
    """
    overrides: dict[str, dict[str, object]] = {"DEFAULT": {"state_path": str(tmp_path / "state")}}
    for group, values in groups.items():
        overrides.setdefault(group, {}).update(values)
    return agent_config.load([], overrides)
