"""Resource class and trait names.

Standard names come from ``os-resource-classes`` and ``os-traits``; anything
else is turned into a legal custom name ``CUSTOM_[A-Z0-9_]+`` by those
libraries' own ``normalize_name`` (Placement API reference: resource classes
and traits, "custom" names).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import os_resource_classes as orc
import os_traits

_CUSTOM_RE = re.compile(r"^CUSTOM_[A-Z0-9_]+$")
_STANDARD_RCS = frozenset(orc.STANDARDS)
_STANDARD_TRAITS = frozenset(os_traits.get_traits())


def resource_class_name(name: str) -> str:
    """Return the Placement resource class for ``name``.

    Args:
        name: a standard class (``VCPU``), a legal custom class
            (``CUSTOM_FPGA``) or any other string (``nvidia-35``).

    Returns:
        ``name`` unchanged when it is standard or already a legal custom
        class, else ``CUSTOM_`` plus the upper-cased name with every
        character outside ``[A-Z0-9_]`` replaced by ``_``.

    Raises:
        ValueError: ``name`` is empty.
    """
    if not name:
        raise ValueError("a resource class name cannot be empty")
    if name in _STANDARD_RCS or _CUSTOM_RE.match(name):
        return name
    return orc.normalize_name(name)


def trait_name(name: str) -> str:
    """Return the Placement trait for ``name`` (same rule as resource classes).

    Raises:
        ValueError: ``name`` is empty.
    """
    if not name:
        raise ValueError("a trait name cannot be empty")
    if name in _STANDARD_TRAITS or _CUSTOM_RE.match(name):
        return name
    return os_traits.normalize_name(name)


def trait_names(names: Iterable[str]) -> frozenset[str]:
    """Normalise every name of ``names`` with :func:`trait_name`."""
    return frozenset(trait_name(n) for n in names)


def is_custom(name: str) -> bool:
    """True for a ``CUSTOM_`` resource class or trait (these must be created first)."""
    return name.startswith("CUSTOM_")


def is_standard_resource_class(name: str) -> bool:
    """True when ``name`` is one of os-resource-classes' standard classes."""
    return name in _STANDARD_RCS


def is_standard_trait(name: str) -> bool:
    """True when ``name`` is one of os-traits' standard traits."""
    return name in _STANDARD_TRAITS
