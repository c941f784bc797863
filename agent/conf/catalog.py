"""The catalogue of the agent's options: which modules define them, every option by group.

Its own module because both the configuration (:mod:`agent.conf.config`
registers and checks every option) and logging (:mod:`agent.conf.logs` masks
the values of the secret ones) need the list, and neither is the other's
part. The option modules are imported by name when listed, so this module
imports none of the layers that define options.
"""

from __future__ import annotations

import importlib

from oslo_config import cfg

OPTION_MODULES: tuple[str, ...] = (
    "agent.conf.options",
    "agent.placement.options",
    "agent.service.options",
    "drivers.host.options",
    "drivers.libvirt.options",
)
"""Modules whose ``list_opts()`` adds options (each layer and driver owns its own options)."""


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """Every option by group, for ``oslo-config-generator`` and for validation.

    A group named by several sources (e.g. ``compute``) is merged into one entry.

    Returns:
        ``[(group name, [option, ...]), ...]``, ``"DEFAULT"`` for the default group.
    """
    merged: dict[str, list[cfg.Opt]] = {}
    for source in (importlib.import_module(m).list_opts() for m in OPTION_MODULES):
        for group, opts in source:
            merged.setdefault(group, []).extend(opts)
    return list(merged.items())
