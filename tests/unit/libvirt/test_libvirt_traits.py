"""Capability traits of a libvirt host by nova 34's rules (drivers/libvirt/traits.py).

Real libvirt through its test driver (``test:///``), which cannot answer
virConnectGetDomainCapabilities; the numa-sriov fixture's saved
``virsh domcapabilities`` stands in for it where a test needs one.
"""

from __future__ import annotations

import pytest

from agent.model.exceptions import ConfigError
from drivers.libvirt.traits import (
    TraitSettings,
    capability_traits,
    parse_domain_capabilities,
)
from tests.helpers.libvirt_fixtures import laid_out, libvirt_driver
from tests.helpers.paths import LIBVIRT

DOMCAPS = LIBVIRT / "numa-sriov" / "domcapabilities.xml"

# LibvirtDriver.capabilities True for every host, mapped by CAPABILITY_TRAITS_MAP,
# plus _get_packed_virtqueue_traits (nova/virt/libvirt/driver.py).
ALWAYS = {
    "COMPUTE_NET_ATTACH_INTERFACE",
    "COMPUTE_DEVICE_TAGGING",
    "COMPUTE_NET_ATTACH_INTERFACE_WITH_TAG",
    "COMPUTE_VOLUME_ATTACH_WITH_TAG",
    "COMPUTE_VOLUME_EXTEND",
    "COMPUTE_VOLUME_MULTI_ATTACH",
    "COMPUTE_TRUSTED_CERTS",
    "COMPUTE_ACCELERATORS",
    "COMPUTE_RESCUE_BFV",
    "COMPUTE_SOCKET_PCI_NUMA_AFFINITY",
    "COMPUTE_NET_VIRTIO_PACKED",
    "COMPUTE_IMAGE_TYPE_AKI",
    "COMPUTE_IMAGE_TYPE_ARI",
    "COMPUTE_IMAGE_TYPE_AMI",
    "COMPUTE_IMAGE_TYPE_RAW",
    "COMPUTE_IMAGE_TYPE_ISO",
    "COMPUTE_IMAGE_TYPE_QCOW2",
}
SOUND = {f"COMPUTE_SOUND_MODEL_{m}" for m in ("SB16", "ES1370", "PCSPK", "AC97", "ICH6", "ICH9")}
SOUND |= {"COMPUTE_SOUND_MODEL_USB"}
KVM_VIF = {
    f"COMPUTE_NET_VIF_MODEL_{m}"
    for m in ("VIRTIO", "NE2K_PCI", "PCNET", "RTL8139", "E1000", "E1000E", "SPAPR_VLAN", "VMXNET3")
}
# libvirt 9.0.0: >= 7.9 remote managed ports, 8.0 virtio-fs, 8.3 virtio vIOMMU,
# 8.6 stateless firmware, 8.7 maxphysaddr; not 9.3 igb, not 10.4 virtio sound.
V9_0 = {
    "COMPUTE_REMOTE_MANAGED_PORTS",
    "COMPUTE_STORAGE_VIRTIO_FS",
    "COMPUTE_SECURITY_STATELESS_FIRMWARE",
    "COMPUTE_ADDRESS_SPACE_PASSTHROUGH",
    "COMPUTE_ADDRESS_SPACE_EMULATED",
    "COMPUTE_VIOMMU_MODEL_AUTO",
    "COMPUTE_VIOMMU_MODEL_VIRTIO",
}


def test_every_trait_of_a_kvm_x86_host_with_domain_capabilities():
    dom = parse_domain_capabilities(DOMCAPS.read_text())
    traits = capability_traits(
        "x86_64", frozenset({"x86_64", "i686"}), [dom], 9_000_000, TraitSettings(swtpm_enabled=True)
    )
    assert traits == ALWAYS | SOUND | KVM_VIF | V9_0 | {
        "HW_ARCH_X86_64",
        "COMPUTE_ARCH_X86_64",  # i686 has no COMPUTE_ARCH_ trait in os-traits
        "COMPUTE_VIOMMU_MODEL_INTEL",
        "COMPUTE_STORAGE_BUS_FDC",
        "COMPUTE_STORAGE_BUS_SCSI",
        "COMPUTE_STORAGE_BUS_VIRTIO",
        "COMPUTE_STORAGE_BUS_USB",
        "COMPUTE_STORAGE_BUS_SATA",
        "COMPUTE_GRAPHICS_MODEL_VGA",
        "COMPUTE_GRAPHICS_MODEL_CIRRUS",
        "COMPUTE_GRAPHICS_MODEL_VIRTIO",
        "COMPUTE_GRAPHICS_MODEL_NONE",
        "COMPUTE_GRAPHICS_MODEL_BOCHS",  # ramfb has no trait
        "COMPUTE_SECURITY_UEFI_SECURE_BOOT",
        "COMPUTE_SECURITY_TPM_TIS",
        "COMPUTE_SECURITY_TPM_CRB",
        "COMPUTE_SECURITY_TPM_2_0",  # backendVersion lists 2.0 only
        # [libvirt] supported_tpm_secret_security, nova's default: all three.
        "COMPUTE_SECURITY_TPM_SECRET_SECURITY_USER",
        "COMPUTE_SECURITY_TPM_SECRET_SECURITY_HOST",
        "COMPUTE_SECURITY_TPM_SECRET_SECURITY_DEPLOYMENT",
    }
    assert "COMPUTE_STATUS_DISABLED" not in traits


def test_nova_conf_rules_for_image_types_tpm_and_versions():
    dom = parse_domain_capabilities(DOMCAPS.read_text())
    rbd = TraitSettings(images_type="rbd", force_raw_images=False)
    assert "COMPUTE_IMAGE_TYPE_QCOW2" not in capability_traits("x86_64", frozenset(), [dom], 0, rbd)
    forced = TraitSettings(images_type="rbd")  # force_raw_images default True: qcow2 converted
    assert "COMPUTE_IMAGE_TYPE_QCOW2" in capability_traits("x86_64", frozenset(), [dom], 0, forced)
    excluded = TraitSettings(image_type_exclude_list=("iso", "qcow2"))
    traits = capability_traits("x86_64", frozenset(), [dom], 0, excluded)
    assert not {"COMPUTE_IMAGE_TYPE_ISO", "COMPUTE_IMAGE_TYPE_QCOW2"} & traits
    # swtpm_enabled off (nova's default): no TPM trait although libvirt offers them.
    assert not any(
        "_TPM_" in t for t in capability_traits("x86_64", frozenset(), [dom], 0, excluded)
    )
    new = capability_traits("x86_64", frozenset(), [], 10_004_000, TraitSettings())
    assert {"COMPUTE_NET_VIF_MODEL_IGB", "COMPUTE_SOUND_MODEL_VIRTIO"} <= new
    old = capability_traits("x86_64", frozenset(), [], 7_000_000, TraitSettings())
    assert not {"COMPUTE_STORAGE_VIRTIO_FS", "COMPUTE_REMOTE_MANAGED_PORTS"} & old


def test_test_driver_gives_a_deterministic_answer_without_domain_capabilities(tmp_path):
    """test:/// has no domain capabilities: no bus/video/TPM/secure-boot trait, the rest."""
    driver = libvirt_driver(tmp_path, "numa-sriov")
    version = driver.connection.get().getLibVersion()
    root = laid_out(driver).data("cn1").traits
    capabilities = {t for t in root if t.startswith(("COMPUTE_", "HW_ARCH_"))}
    expected = capability_traits("x86_64", frozenset({"x86_64"}), [], version, TraitSettings())
    # COMPUTE_REMOTE_MANAGED_PORTS needs a remote_managed device too (nova's resource tracker).
    assert capabilities == expected - {"COMPUTE_REMOTE_MANAGED_PORTS"} | {"COMPUTE_NODE"}
    assert ALWAYS | KVM_VIF | {"HW_ARCH_X86_64", "COMPUTE_ARCH_X86_64"} <= capabilities
    assert not any(t.startswith(("COMPUTE_STORAGE_BUS_", "COMPUTE_GRAPHICS_")) for t in root)
    assert driver.warnings == []  # an unsupported API is not the operator's fault


def test_domain_capabilities_file_replays_a_host(tmp_path):
    driver = libvirt_driver(
        tmp_path,
        "numa-sriov",
        libvirt={"domain_capabilities_file": str(DOMCAPS), "swtpm_enabled": True},
    )
    root = laid_out(driver).data("cn1").traits
    assert {"COMPUTE_SECURITY_UEFI_SECURE_BOOT", "COMPUTE_SECURITY_TPM_2_0"} <= root
    assert "COMPUTE_STORAGE_BUS_VIRTIO" in root


def test_domain_capabilities_file_needs_the_test_driver(tmp_path):
    with pytest.raises(ConfigError, match="domain_capabilities_file"):
        libvirt_driver(
            tmp_path,
            None,
            libvirt={"connection_uri": "qemu:///system", "domain_capabilities_file": "x"},
        )
