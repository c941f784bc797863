"""The host driver on tests/fixtures/sysfs: configuration and the tree it lays out."""

from __future__ import annotations

from pathlib import Path

from oslo_config import cfg

from agent.conf import config
from agent.model.provider_tree import ProviderTree
from agent.shape.adapter import adapt
from agent.shape.layout import OWNER_TRAIT
from agent.tracker.discovery import discover_node
from drivers.host import HostDriver
from tests.helpers.paths import SYSFS


def make_conf(tmp_path: Path, fixture: str, **groups: dict[str, object]) -> cfg.ConfigOpts:
    """A loaded configuration of the host driver on sysfs fixture ``fixture`` (node ``cn1``,
    state in ``tmp_path``, no reserved memory), with overrides by group."""
    overrides: dict[str, dict[str, object]] = {
        "DEFAULT": {
            "host": "cn1",
            "state_path": str(tmp_path),
            "reserved_host_memory_mb": 0,
            "instances_path": str(tmp_path / "instances"),
        },
        "compute": {"driver": "host"},
        "host_driver": {"sysfs_root": str(SYSFS / fixture)},
    }
    for group, values in groups.items():
        overrides.setdefault(group, {}).update(values)
    return config.load([], overrides)


def tree_of(conf: cfg.ConfigOpts) -> dict[str, dict]:
    """{provider name: {"parent": name, "inv": {rc: total}, "traits": set}}"""
    driver = HostDriver(conf)
    report = discover_node(
        adapt(driver, driver.conf), "cn1", "00000000-0000-0000-0000-000000000001"
    )
    tree: ProviderTree = report.tree
    out = {}
    for p in tree.all_data():
        parent = tree.data(p.parent_uuid).name if p.parent_uuid else None
        out[p.name] = {
            "parent": parent,
            "inv": {rc: inv.total for rc, inv in p.inventory.items()},
            "traits": set(p.traits) - {OWNER_TRAIT, "COMPUTE_NODE"},
        }
    return out
