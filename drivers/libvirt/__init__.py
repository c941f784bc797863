"""The libvirt driver: a KVM hypervisor's host and domains, through libvirt-python.

One module per job: :mod:`~drivers.libvirt.connection` (open, reconnect,
errors), :mod:`~drivers.libvirt.capabilities` (NUMA cells, CPU),
:mod:`~drivers.libvirt.nodedev` (PCI, SR-IOV, mdev), :mod:`~drivers.libvirt.domain`
(what a domain holds), :mod:`~drivers.libvirt.metadata` (owner and flavor),
:mod:`~drivers.libvirt.host_view` (the host's resources from all of these),
:mod:`~drivers.libvirt.instances` (each domain as an instance),
:mod:`~drivers.libvirt.driver` (the driver over those two). Nothing here
knows of Placement.

libvirt-python is optional (the ``libvirt`` extra): a GPU or bare-metal server
running the host driver has no reason to carry it, and it builds against
libvirt's headers. So this package imports it only when the driver itself is
asked for (``LibvirtDriver``, as nova's ``nova/virt/libvirt/host.py`` imports
it only when a Host is made): the options (:mod:`~drivers.libvirt.options`)
and the XML readers load without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from drivers.errors import ConfigError

if TYPE_CHECKING:
    from drivers.libvirt.driver import LibvirtDriver

__all__ = ["INSTALL_HINT", "LibvirtDriver", "require_libvirt"]

INSTALL_HINT = (
    "the libvirt driver needs libvirt-python, which is not installed: "
    "pip install 'compute-agent[libvirt]' (or the distribution's package, python3-libvirt)"
)
"""What to install, printed when ``[compute] driver = libvirt`` and the module is missing."""


def require_libvirt() -> None:
    """Import the ``libvirt`` module once, or say what to install.

    Raises:
        ConfigError: the module cannot be imported (``[compute] driver`` names a
            driver this host cannot run until the package is installed; the
            CLI exits 2 with this one line).
    """
    try:
        importlib.import_module("libvirt")
    except ImportError as exc:
        raise ConfigError(f"[compute] driver = libvirt: {INSTALL_HINT}") from exc


def __getattr__(name: str) -> object:
    """``LibvirtDriver`` on first use (PEP 562), after :func:`require_libvirt`."""
    if name != "LibvirtDriver":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require_libvirt()
    from drivers.libvirt.driver import LibvirtDriver

    return LibvirtDriver
