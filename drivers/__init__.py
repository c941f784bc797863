"""Compute drivers: where the agent learns what a host has and what runs on it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from drivers.errors import ConfigError

if TYPE_CHECKING:
    from oslo_config import cfg

    from drivers.base import ComputeDriver

DRIVERS: dict[str, str] = {
    "fake": "drivers.fake:FakeDriver",
    "host": "drivers.host:HostDriver",
    "libvirt": "drivers.libvirt:LibvirtDriver",
}
"""Driver name (``[compute] driver``) -> ``module:Class``."""


def load_driver(name: str | None, conf: cfg.ConfigOpts, **kwargs: Any) -> ComputeDriver:
    """Instantiate the driver called ``name`` with ``conf``.

    Raises:
        ConfigError: no driver is named, or the name is unknown.
    """
    if not name:
        raise ConfigError(
            "[compute] driver is not set; choose one of: " + ", ".join(sorted(DRIVERS))
        )
    target = DRIVERS.get(name)
    if target is None:
        raise ConfigError(
            f"[compute] driver = {name!r} is not a known driver; choose one of: "
            + ", ".join(sorted(DRIVERS))
        )
    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(conf, **kwargs)
