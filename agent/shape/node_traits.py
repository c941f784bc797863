"""Which traits of the compute node the agent decides, and which go on NUMA cells too.

Nova's resource tracker (``nova/compute/resource_tracker.py``
``_get_traits``) adds each driver capability trait the driver supports and
removes it when not supported, always adds ``COMPUTE_NODE`` and
``OWNER_NOVA``, and leaves every other trait on the compute node (set
through the API by an operator) alone. ``COMPUTE_STATUS_DISABLED`` follows
the nova-compute service's disabled flag there; the agent has no service
record, so it never sets nor removes it.

The traits the agent decides are therefore:

* ``COMPUTE_NODE``, the owner trait and the legacy owner trait (replaced);
* CPU traits ``HW_CPU_*`` and architecture traits ``HW_ARCH_*``,
  ``COMPUTE_ARCH_*`` (libvirt driver ``_get_cpu_traits``);
* ``HW_NUMA_*``;
* the capability traits of ``nova/virt/driver.py`` ``CAPABILITY_TRAITS_MAP``
  (:data:`CAPABILITY_TRAITS`) and the families the libvirt driver's
  ``static_traits`` decides by prefix (:data:`CAPABILITY_PREFIXES`).
"""

from __future__ import annotations

from collections.abc import Iterable

import os_traits

from agent.model.ownership import LEGACY_OWNER_TRAIT
from drivers.records import HostResources, NumaCell

CAPABILITY_TRAITS: frozenset[str] = frozenset(
    {
        # nova/virt/driver.py CAPABILITY_TRAITS_MAP (nova 34), values.
        os_traits.COMPUTE_NET_ATTACH_INTERFACE,
        os_traits.COMPUTE_DEVICE_TAGGING,
        os_traits.COMPUTE_NET_ATTACH_INTERFACE_WITH_TAG,
        os_traits.COMPUTE_VOLUME_ATTACH_WITH_TAG,
        os_traits.COMPUTE_VOLUME_EXTEND,
        os_traits.COMPUTE_VOLUME_MULTI_ATTACH,
        os_traits.COMPUTE_TRUSTED_CERTS,
        os_traits.COMPUTE_ACCELERATORS,
        os_traits.COMPUTE_SAME_HOST_COLD_MIGRATE,
        os_traits.COMPUTE_RESCUE_BFV,
        os_traits.COMPUTE_SECURITY_UEFI_SECURE_BOOT,
        os_traits.COMPUTE_SOCKET_PCI_NUMA_AFFINITY,
        os_traits.COMPUTE_REMOTE_MANAGED_PORTS,
        os_traits.COMPUTE_EPHEMERAL_ENCRYPTION,
        os_traits.COMPUTE_EPHEMERAL_ENCRYPTION_LUKS,
        os_traits.COMPUTE_EPHEMERAL_ENCRYPTION_PLAIN,
        os_traits.COMPUTE_ADDRESS_SPACE_PASSTHROUGH,
        os_traits.COMPUTE_ADDRESS_SPACE_EMULATED,
        os_traits.COMPUTE_SECURITY_STATELESS_FIRMWARE,
        os_traits.COMPUTE_STORAGE_VIRTIO_FS,
        os_traits.COMPUTE_MEM_BACKING_FILE,
        # libvirt driver _get_packed_virtqueue_traits.
        os_traits.COMPUTE_NET_VIRTIO_PACKED,
    }
)
"""Capability traits decided by name (present when supported, removed when not)."""

CAPABILITY_PREFIXES: tuple[str, ...] = (
    "COMPUTE_IMAGE_TYPE_",  # CAPABILITY_TRAITS_MAP supports_image_type_*
    "COMPUTE_SECURITY_TPM_",  # libvirt _get_tpm_traits
    "COMPUTE_NET_VIF_MODEL_",  # libvirt _get_vif_model_traits
    "COMPUTE_STORAGE_BUS_",  # libvirt _get_storage_bus_traits
    "COMPUTE_GRAPHICS_MODEL_",  # libvirt _get_video_model_traits
    "COMPUTE_VIOMMU_MODEL_",  # libvirt _get_iommu_model_traits
    "COMPUTE_SOUND_MODEL_",  # libvirt _get_sound_model_traits
)
"""Capability trait families decided by the driver as a whole."""

HARDWARE_PREFIXES: tuple[str, ...] = ("HW_CPU_", "HW_NUMA_", "HW_ARCH_", "COMPUTE_ARCH_")
"""Hardware trait families that follow what the driver finds."""

CPU_TRAIT_PREFIX = "HW_CPU_"


def is_capability_trait(trait: str) -> bool:
    """True for a capability trait (:data:`CAPABILITY_TRAITS`, :data:`CAPABILITY_PREFIXES`)."""
    return trait in CAPABILITY_TRAITS or trait.startswith(CAPABILITY_PREFIXES)


def is_managed_root_trait(trait: str, owner_trait: str, capabilities: bool = True) -> bool:
    """True when the agent decides ``trait`` on the compute node (module docstring).

    Args:
        trait: a trait on the compute node.
        owner_trait: ``[compute] owner_trait``.
        capabilities: the driver reports capability traits (the libvirt
            driver); a driver that cannot know them (host, fake without any)
            leaves those nova or an operator set alone.

    ``COMPUTE_STATUS_DISABLED`` and operators' traits (``CUSTOM_GOLD``) are not.
    """
    if trait in (os_traits.COMPUTE_NODE, owner_trait, LEGACY_OWNER_TRAIT):
        return True
    if is_capability_trait(trait):
        return capabilities
    return trait.startswith(HARDWARE_PREFIXES)


def root_traits(host: HostResources) -> set[str]:
    """The driver's compute-node traits, less ``COMPUTE_REMOTE_MANAGED_PORTS`` without a device.

    nova's resource tracker (``_get_traits``,
    ``_should_expose_remote_managed_ports_trait``) reports that trait only
    when the driver supports it and a device is tagged ``remote_managed`` in
    ``[pci] device_spec`` and present (``PciDeviceStats.has_remote_managed_device_pools``):
    an SR-IOV PF offering VFs so tagged, or such a whole device.
    """
    traits = set(host.traits)
    present = any(pf.remote_managed and pf.num_vfs for pf in host.sriov_pfs) or any(
        dev.remote_managed for dev in host.pci_devices
    )
    if not present:
        traits.discard(os_traits.COMPUTE_REMOTE_MANAGED_PORTS)
    return traits


CHILD_PREFIXES: tuple[str, ...] = ("HW_", "COMPUTE_", "CUSTOM_PHYSNET_")
"""Trait families the layout puts on child providers (``HW_NUMA_ROOT``, ``HW_CPU_*``,
``HW_NIC_*``, ``COMPUTE_MANAGED_PCI_DEVICE``, physnet traits): the agent's wherever found."""


def is_managed_child_trait(trait: str, owner_trait: str, decides: frozenset[str]) -> bool:
    """True when the agent decides ``trait`` on a child provider it lays out.

    The owner traits, the families of :data:`CHILD_PREFIXES` and ``decides``
    (:attr:`agent.shape.spec.ProviderSpec.decides`, e.g. a GPU's mdev type
    traits) are the agent's: removed when the layout no longer wants them,
    whoever put them there. Any other trait (``CUSTOM_GOLD_GPU``, set per GPU
    as nova's vGPU guide tells operators) is the agent's only when the agent
    itself laid it out (:func:`agent.shape.layout.apply_layout` records that,
    the tracker keeps the record in the state directory); otherwise it is an
    operator's and kept (docs/tree-shape.md, "Traits on child providers").
    """
    if trait in (owner_trait, LEGACY_OWNER_TRAIT) or trait in decides:
        return True
    return trait.startswith(CHILD_PREFIXES)


def cell_cpu_traits(host_traits: Iterable[str], cell: NumaCell) -> frozenset[str]:
    """The host's CPU traits (``HW_CPU_*``) that ``cell`` carries too when it supplies CPUs.

    Placement matches an unsuffixed request group's required and forbidden
    traits on the providers that supply its resources; with CPUs and memory
    on the cells, a CPU trait only on the compute node is not seen (DESIGN.md,
    "Nova 34 facts").
    """
    if not (cell.vcpus or cell.pcpus):
        return frozenset()
    return frozenset(t for t in host_traits if t.startswith(CPU_TRAIT_PREFIX))
