"""The host driver: discovers this machine's hardware from sysfs, /proc, psutil and udev.

One module per kind of hardware (cpu, memory, disk, numa, pci, sriov,
passthrough, mdev, nvidia with nvml), each turning files below a root directory
into plain records; :mod:`drivers.host.vendor_vgpu` decides how each VF of a
vendor-VFIO GPU is offered; :mod:`drivers.host.discovery` assembles them into
:class:`~drivers.records.HostResources`. Nothing here knows of Placement.
"""

from drivers.host.driver import HostDriver

__all__ = ["HostDriver"]
