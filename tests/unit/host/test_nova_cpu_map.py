"""CPU feature traits by nova 34's own map (issue 32): nova's code is the judge."""

from __future__ import annotations

from nova.virt.libvirt import utils as nova_utils

from drivers.host.cpu import cpu_flag_traits
from drivers.host.nova_cpu_map import NOVA_CPU_TRAITS, NOVA_DECIDED
from drivers.libvirt.capabilities import cpu_traits


def test_the_map_is_novas():
    novas = {
        name: traits if isinstance(traits, tuple) else (traits,)
        for name, traits in nova_utils.CPU_TRAITS_MAPPING.items()
    }
    assert novas == NOVA_CPU_TRAITS


def test_every_trait_of_novas_map_has_novas_value():
    """The agent's value of each trait of the map is what nova's ``cpu_features_to_traits``
    gives for the same libvirt features: ``pni`` (libvirt's name for SSE3) sets nothing, so
    ``HW_CPU_X86_SSE3`` is absent as nova clears it; the rest of the map follows libvirt's
    names (``sse4.1``, ``pclmuldq``, ``sha-ni``), whichever driver reads them."""
    features = {"pni", "sse", "sse2", "ssse3", "sse4.1", "sse4.2", "pclmuldq", "sha-ni", "aes"}
    features |= {"avx512-vpopcntdq", "vmx", "bmi1", "fma", "mmx", "pcid", "rtm"}
    # libvirt's names (its cpu_map/x86_features.xml) for the kernel's avx512_vnni, avx512_vbmi2.
    features |= {"avx512vnni", "avx512vbmi2"}
    novas = nova_utils.cpu_features_to_traits(features)
    assert set(novas) == NOVA_DECIDED
    libvirt_side = cpu_traits(features, "Intel", 1)
    kernel = {"pni", "sse", "sse2", "ssse3", "sse4_1", "sse4_2", "pclmulqdq", "sha_ni", "aes"}
    kernel |= {"avx512_vpopcntdq", "vmx", "bmi1", "fma", "mmx", "pcid", "rtm"}
    host_side = cpu_flag_traits(kernel | {"avx512_vnni", "avx512_vbmi2"}, "GenuineIntel")
    for agents in (libvirt_side, host_side):
        assert {t for t in agents if t in NOVA_DECIDED} == {t for t, on in novas.items() if on}
        assert "HW_CPU_X86_SSE3" not in agents
        # Outside nova's map the agent still reports what os-traits names (nova leaves them).
        assert {"HW_CPU_X86_INTEL_PCID", "HW_CPU_X86_TSX"} <= agents
