"""Persistent-memory namespaces offered to instances: ``[libvirt] pmem_namespaces``, as nova.

nova 34 (``nova/virt/libvirt/driver.py`` ``_discover_vpmems``,
``_get_vpmems_on_host``, ``_update_provider_tree_for_vpmems``; option help in
``nova/conf/libvirt.py``): the option lists ``$LABEL:$NSNAME[|$NSNAME]``
entries; each named namespace must exist on the host (nova reads ``ndctl list
-X`` and uses the namespace's device-DAX character device) and be named once;
each label becomes the resource class ``CUSTOM_PMEM_NAMESPACE_$LABEL`` on the
compute node, one unit per namespace. nova refuses to start otherwise.

The host's namespaces are read from sysfs (what ndctl reads):
``sys/bus/nd/devices/namespaceR.N/alt_name`` (the name ndctl shows; a
namespace without one cannot be configured, as in nova) and ``mode``
(``dax``: device-DAX, the only mode with the character device nova uses).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from drivers.errors import ConfigError
from drivers.host.sysfs import Root, as_reader

NAMESPACES = "sys/bus/nd/devices"
_NAMESPACE_RE = re.compile(r"namespace\d+\.\d+")


def parse_pmem_namespaces(values: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``[libvirt] pmem_namespaces`` as ``((label, (namespace, ...)), ...)``, in order.

    Raises:
        ConfigError: an entry without ``LABEL:``, an empty label or name, or
            a namespace named twice (nova's ``PMEMNamespaceConfigInvalid``).
    """
    out: list[tuple[str, tuple[str, ...]]] = []
    seen: set[str] = set()
    for entry in values:
        label, colon, names_text = entry.partition(":")
        names = tuple(n.strip() for n in names_text.split("|"))
        if not colon or not label.strip() or not all(names):
            raise ConfigError(
                f"[libvirt] pmem_namespaces {entry!r}: expected LABEL:NSNAME[|NSNAME...]"
            )
        for name in names:
            if name in seen:
                raise ConfigError(f"[libvirt] pmem_namespaces: namespace {name} is named twice")
            seen.add(name)
        out.append((label.strip(), names))
    return tuple(out)


def host_namespaces(root: Root) -> dict[str, str]:
    """The host's named PMEM namespaces: ``{name: mode}`` (``dax`` for device-DAX).

    Raises:
        SysfsError: the namespace directory exists but cannot be read.
    """
    reader = as_reader(root)
    out = {}
    for entry in reader.listdir(NAMESPACES, _NAMESPACE_RE) or []:
        name = reader.optional_text(f"{NAMESPACES}/{entry}/alt_name")
        if name:
            out[name] = reader.optional_text(f"{NAMESPACES}/{entry}/mode") or ""
    return out


def check_on_host(
    configured: Sequence[tuple[str, tuple[str, ...]]], on_host: dict[str, str]
) -> dict[str, tuple[str, ...]]:
    """``{label: namespaces}`` once every configured namespace is a device-DAX one of the host.

    Raises:
        ConfigError: a namespace is not on the host, or not in device-DAX mode
            (nova: "The PMEM namespace ... isn't on host"; without device-DAX
            nova finds no character device to give a guest).
    """
    for _label, names in configured:
        for name in names:
            if name not in on_host:
                raise ConfigError(
                    f"[libvirt] pmem_namespaces: namespace {name} is not on this host "
                    f"(ndctl list -N names: {', '.join(sorted(on_host)) or 'none'})"
                )
            if on_host[name] != "dax":
                raise ConfigError(
                    f"[libvirt] pmem_namespaces: namespace {name} is in {on_host[name] or 'no'} "
                    "mode; nova needs device-DAX (ndctl create-namespace --mode=devdax)"
                )
    return {label: names for label, names in configured}
