"""Provider config files (``[compute] provider_config_location``), read as nova 34 reads them.

Nova's ``nova/compute/provider_config.py``: every ``*.yaml`` file of the
directory, in name order, is a document of schema 1.x::

    meta:
      schema_version: '1.0'
    providers:
      - identification:
          uuid: $COMPUTE_NODE        # or a provider UUID, or name: <provider name>
        inventories:
          additional:
            - CUSTOM_LICENSE_WINDOWS:
                total: 8
        traits:
          additional:
            - CUSTOM_SITE_PARIS

Only custom resource classes and traits may be added; a provider named
twice (in one file or two) is refused; a provider with nothing to add is
ignored with a warning; an unsupported minor version is read with a warning.
Which provider of the tree each entry reaches, and the refusal of a class or
trait the driver manages, is the layout's part (:mod:`agent.shape.layout`,
nova's ``ResourceTracker._merge_provider_configs``).
"""

from __future__ import annotations

import glob
import logging
import os
import re
from dataclasses import dataclass
from typing import Any

import jsonschema
import os_resource_classes
import os_traits
import yaml

from agent.model.exceptions import ConfigError, InvalidInventory
from agent.model.resources import MAX_INT, Inventory

LOG = logging.getLogger(__name__)

COMPUTE_NODE = "$COMPUTE_NODE"
"""The identification that names every compute node of the agent (nova's)."""

_UUID = "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"
_NAME = "^[A-Z0-9_]{1,255}$"
_INVENTORY_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size")

SCHEMA_V1: dict[str, Any] = {
    # The constraints of nova 34's SCHEMA_V1, written from its documentation
    # (doc/source/admin/managing-resource-providers.rst) and checked by
    # tests/unit/test_provider_config.py against nova's own validator.
    "type": "object",
    "required": ["meta"],
    "properties": {
        "__source_file": {"not": {}},
        "meta": {
            "type": "object",
            "required": ["schema_version"],
            "properties": {
                "schema_version": {"type": "string", "pattern": r"^1\.([0-9]|[1-9][0-9]+)$"}
            },
        },
        "providers": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["identification"],
                "properties": {
                    "identification": {
                        "type": "object",
                        "minProperties": 1,
                        "maxProperties": 1,
                        "additionalProperties": False,
                        "properties": {
                            "uuid": {
                                "type": "string",
                                "anyOf": [{"pattern": _UUID}, {"const": COMPUTE_NODE}],
                            },
                            "name": {"type": "string", "minLength": 1, "maxLength": 200},
                        },
                    },
                    "inventories": {
                        "type": "object",
                        "properties": {
                            "additional": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "patternProperties": {
                                        _NAME: {
                                            "type": "object",
                                            "required": ["total"],
                                            "additionalProperties": False,
                                            "properties": {
                                                **{
                                                    f: {"type": "integer"}
                                                    for f in _INVENTORY_FIELDS
                                                },
                                                "allocation_ratio": {"type": "number"},
                                            },
                                        }
                                    },
                                },
                            }
                        },
                    },
                    "traits": {
                        "type": "object",
                        "properties": {
                            "additional": {
                                "type": "array",
                                "items": {"type": "string", "pattern": _NAME},
                            }
                        },
                    },
                },
            },
        },
    },
}
"""nova 34's provider config schema, version 1.x."""


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """One provider entry of a provider config file.

    Attributes:
        source: the file it was read from (named in every error about it).
        uuid: the provider's UUID, ``$COMPUTE_NODE``, or None when named.
        name: the provider's name (``$COMPUTE_NODE`` too, as nova's example
            file writes it), or None when identified by UUID.
        inventories: ``(resource class, Inventory)`` pairs to add (custom classes).
        traits: custom traits to add.
    """

    source: str
    uuid: str | None
    name: str | None
    inventories: tuple[tuple[str, Inventory], ...]
    traits: frozenset[str]

    @property
    def key(self) -> str:
        """The identification as written: a UUID, ``$COMPUTE_NODE`` or a name.

        nova keys its entries by this value alone, so ``name: $COMPUTE_NODE``
        means every compute node, as ``uuid: $COMPUTE_NODE`` does."""
        return self.uuid if self.uuid is not None else str(self.name)


def load_provider_configs(directory: str) -> tuple[ProviderConfig, ...]:
    """Every provider entry of ``directory``'s ``*.yaml`` files, files in name order.

    A missing or empty directory gives none (nova logs it and goes on; here at debug
    level, the directory being read at every configuration load).

    Raises:
        ConfigError: one line naming the file and what is wrong: unreadable,
            not YAML, no or an unsupported schema version, not of the schema,
            a standard (non-``CUSTOM_``) class or trait, a provider named twice.
    """
    out: list[ProviderConfig] = []
    seen: dict[str, str] = {}
    paths = sorted(glob.glob(os.path.join(directory, "*.yaml")))
    if not paths:
        LOG.debug("no provider config files in %s", directory)
    for path in paths:
        for entry in _read_file(path):
            if entry.key in seen:
                raise ConfigError(
                    f"provider config {path}: provider {entry.key} is already defined in "
                    f"{seen[entry.key]}; define each provider once"
                )
            seen[entry.key] = path
            out.append(entry)
    return tuple(out)


def _read_file(path: str) -> list[ProviderConfig]:
    """The entries of one file that add something (schema checked)."""
    document = _load_yaml(path)
    version = document.get("meta", {}).get("schema_version") if isinstance(document, dict) else None
    match = re.match(r"^(\d+)\.(\d+)$", str(version)) if version is not None else None
    if match is None:
        raise ConfigError(
            f"provider config {path}: meta.schema_version is missing or malformed "
            f"({version!r}); write meta: {{schema_version: '1.0'}}"
        )
    if match.group(1) != "1":
        raise ConfigError(
            f"provider config {path}: unsupported schema major version {match.group(1)} "
            "(nova 34 reads 1.x)"
        )
    if match.group(2) != "0":
        LOG.warning(
            "provider config %s is at schema version %s: fields newer than 1.0 are ignored",
            path,
            version,
        )
    try:
        jsonschema.validate(document, SCHEMA_V1)
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise ConfigError(
            f"provider config {path}: {where}: {exc.message}; see nova's provider config schema 1.0"
        ) from None
    entries = [_entry(path, p) for p in document.get("providers", [])]
    for entry in entries:
        if not entry.inventories and not entry.traits:
            LOG.warning(
                "provider config %s: provider %s adds no inventories or traits: ignored",
                path,
                entry.key,
            )
    return [e for e in entries if e.inventories or e.traits]


def _load_yaml(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f"provider config {path}: unreadable: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"provider config {path}: not valid YAML{where}") from None


def _entry(path: str, provider: dict[str, Any]) -> ProviderConfig:
    """One schema-valid provider entry, its classes and traits checked to be custom."""
    ident = provider["identification"]
    key = ident.get("uuid") or ident.get("name")
    traits = frozenset(provider.get("traits", {}).get("additional", []))
    standard = sorted(t for t in traits if not os_traits.is_custom(t))
    if standard:
        raise ConfigError(
            f"provider config {path}: provider {key}: traits.additional {', '.join(standard)}: "
            "only CUSTOM_ traits may be added"
        )
    inventories: list[tuple[str, Inventory]] = []
    for item in provider.get("inventories", {}).get("additional", []):
        for rc, fields in item.items():
            if not os_resource_classes.is_custom(rc):
                raise ConfigError(
                    f"provider config {path}: provider {key}: inventories.additional {rc}: "
                    "only CUSTOM_ resource classes may be added"
                )
            inventories.append((rc, _inventory(path, key, rc, fields)))
    return ProviderConfig(path, ident.get("uuid"), ident.get("name"), tuple(inventories), traits)


def _inventory(path: str, key: str, rc: str, fields: dict[str, Any]) -> Inventory:
    """Placement's defaults for the fields left out (``max_unit``: Placement's MAX_INT)."""
    try:
        return Inventory(
            total=fields["total"],
            reserved=fields.get("reserved", 0),
            min_unit=fields.get("min_unit", 1),
            max_unit=fields.get("max_unit", MAX_INT),
            step_size=fields.get("step_size", 1),
            allocation_ratio=float(fields.get("allocation_ratio", 1.0)),
            resource_class=rc,
        )
    except InvalidInventory as exc:
        raise ConfigError(
            f"provider config {path}: provider {key}: inventories.additional {rc}: {exc}"
        ) from None
