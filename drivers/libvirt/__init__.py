"""The libvirt driver: a KVM hypervisor's host and domains, through libvirt-python.

One module per job: :mod:`~drivers.libvirt.connection` (open, reconnect,
errors), :mod:`~drivers.libvirt.capabilities` (NUMA cells, CPU),
:mod:`~drivers.libvirt.nodedev` (PCI, SR-IOV, mdev), :mod:`~drivers.libvirt.domain`
(what a domain holds), :mod:`~drivers.libvirt.metadata` (owner and flavor),
:mod:`~drivers.libvirt.host_view` (the host's resources from all of these),
:mod:`~drivers.libvirt.instances` (each domain as an instance),
:mod:`~drivers.libvirt.driver` (the driver over those two). Nothing here
knows of Placement.
"""

from drivers.libvirt.driver import LibvirtDriver

__all__ = ["LibvirtDriver"]
