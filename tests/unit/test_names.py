"""Resource class and trait names (os-resource-classes, os-traits)."""

from __future__ import annotations

import pytest

from agent.model.names import (
    is_custom,
    is_standard_resource_class,
    is_standard_trait,
    resource_class_name,
    trait_name,
)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("VCPU", "VCPU"),
        ("SRIOV_NET_VF", "SRIOV_NET_VF"),
        ("CUSTOM_FPGA", "CUSTOM_FPGA"),
        ("nvidia-35", "CUSTOM_NVIDIA_35"),
        ("pci 8086:0a54", "CUSTOM_PCI_8086_0A54"),
        ("vcpu", "CUSTOM_VCPU"),  # standard names are case-sensitive in Placement
    ],
)
def test_resource_class_name(given, expected):
    assert resource_class_name(given) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("HW_CPU_X86_AVX2", "HW_CPU_X86_AVX2"),
        ("HW_NUMA_ROOT", "HW_NUMA_ROOT"),
        ("CUSTOM_GOLD", "CUSTOM_GOLD"),
        ("gold.tier", "CUSTOM_GOLD_TIER"),
    ],
)
def test_trait_name(given, expected):
    assert trait_name(given) == expected


def test_empty_names_are_refused():
    with pytest.raises(ValueError):
        resource_class_name("")
    with pytest.raises(ValueError):
        trait_name("")


def test_classification():
    assert is_custom("CUSTOM_X") and not is_custom("VCPU")
    assert is_standard_resource_class("VGPU") and not is_standard_resource_class("CUSTOM_X")
    assert is_standard_trait("HW_NUMA_ROOT") and not is_standard_trait("CUSTOM_X")
