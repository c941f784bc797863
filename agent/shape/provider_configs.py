"""Provider config files' inventories and traits added to the laid-out providers.

nova 34's ``ResourceTracker._merge_provider_configs`` and
``_get_providers_to_update``, applied to one compute node's specs:

* ``$COMPUTE_NODE`` (as ``uuid`` or ``name``) reaches the compute node,
  unless another entry names that compute node by its name or UUID (the
  explicit entry wins, the default is not merged with it);
* a name or UUID reaches the provider of this node's tree of that name or
  UUID; one that names none is skipped (it may be another node's), logged once;
* a provider reached by two entries (by name and by UUID) is refused;
* a class the driver reports on that provider is refused, and so is a trait
  the layout puts there itself (nova refuses the first and cannot meet the
  second, its drivers putting no custom traits on the providers it merges into).

The refusals are :class:`ConfigError` naming the file and the key: the agent
stops at start (exit 2) or keeps its previous configuration on reload.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from agent.conf.provider_config import COMPUTE_NODE, ProviderConfig
from agent.model.exceptions import ConfigError
from agent.model.provider_tree import ProviderTree
from agent.shape.spec import ProviderSpec

LOG = logging.getLogger(__name__)

_warned: set[tuple[str, str]] = set()


def apply_provider_configs(
    specs: Sequence[ProviderSpec],
    configs: Sequence[ProviderConfig],
    tree: ProviderTree | None,
    owner_trait: str,
) -> None:
    """Add each entry's inventories and traits to the spec it names, in place.

    Args:
        specs: one compute node's providers, the compute node first.
        configs: the provider config entries, in file order.
        tree: the node's tree as Placement holds it (maps UUIDs to names);
            None when there is none yet (only names then match).
        owner_trait: ``[compute] owner_trait`` (never to be added by a file).

    Raises:
        ConfigError: one line naming the file and the key at fault (module docstring).
    """
    if not configs:
        return
    root = specs[0]
    root_uuid = _uuid_of(tree, root.name)
    by_name = {s.name: s for s in specs}
    explicit = {c.key for c in configs} & {root.name, root_uuid}
    reached: dict[str, ProviderConfig] = {}
    for config in configs:
        if config.key == COMPUTE_NODE:
            if explicit:
                continue
            spec = root
        elif tree is None and config.name is None:
            continue  # a UUID names nothing without Placement's tree (the start-up check)
        else:
            spec = by_name.get(_name_of(tree, config))
            if spec is None:
                _skip(config, root.name)
                continue
        if spec.name in reached:
            raise ConfigError(
                f"provider config {config.source}: {config.key}: provider {spec.name} is "
                f"already defined in {reached[spec.name].source} as "
                f"{reached[spec.name].key}; define each provider once"
            )
        reached[spec.name] = config
        _merge(spec, config, owner_trait)


def _merge(spec: ProviderSpec, config: ProviderConfig, owner_trait: str) -> None:
    for rc, inv in config.inventories:
        if rc in spec.inventory:
            raise ConfigError(
                f"provider config {config.source}: inventories.additional {rc}: the driver "
                f"reports {rc} on provider {spec.name}; remove it from the file"
            )
        spec.inventory[rc] = inv
    for trait in sorted(config.traits):
        if trait in spec.traits or trait == owner_trait:
            raise ConfigError(
                f"provider config {config.source}: traits.additional {trait}: the agent "
                f"sets {trait} on provider {spec.name} itself; remove it from the file"
            )
    spec.traits |= config.traits


def _uuid_of(tree: ProviderTree | None, name: str) -> str | None:
    return tree.data(name).uuid if tree is not None and tree.exists(name) else None


def _name_of(tree: ProviderTree | None, config: ProviderConfig) -> str | None:
    """The name of the provider ``config`` identifies in ``tree`` (by UUID), or its name."""
    if config.name is not None:
        return config.name
    if tree is not None and config.uuid is not None and tree.exists(config.uuid):
        return tree.data(config.uuid).name
    return None


def _skip(config: ProviderConfig, node: str) -> None:
    if (config.key, node) in _warned:
        return
    _warned.add((config.key, node))
    LOG.info(
        "provider config %s: provider %s is not in the tree of compute node %s: skipped there",
        config.source,
        config.key,
        node,
    )
