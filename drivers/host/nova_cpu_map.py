"""The CPU feature traits nova 34's libvirt driver decides, by nova's own map.

nova's libvirt driver sets or clears **every** trait of its map on the compute
node at each ``update_provider_tree`` (``nova/virt/libvirt/utils.py``
``CPU_TRAITS_MAPPING``, ``cpu_features_to_traits``; ``nova/virt/libvirt/driver.py``
``_get_cpu_feature_traits``, ``_get_cpu_traits``): a trait whose libvirt feature
name it does not find is removed. Beside nova-compute the agent must give those
traits nova's value, or each side writes it back every time (issue 32): nova looks
for ``sse3``, which libvirt names ``pni`` (its ``cpu_map/x86_features.xml``), so
nova never sets ``HW_CPU_X86_SSE3`` and always clears it. The traits outside the
map (``HW_CPU_X86_TSX``, ``HW_CPU_X86_INTEL_PCID`` ...) nova leaves alone; the
drivers keep reporting them from os-traits (:mod:`drivers.host.cpu`).

nova is not a runtime dependency, so the map is copied here;
``tests/unit/host/test_nova_cpu_map.py`` compares it with nova's own.
"""

from __future__ import annotations

from collections.abc import Iterable

NOVA_CPU_TRAITS: dict[str, tuple[str, ...]] = {
    # nova 34.0.0 nova/virt/libvirt/utils.py CPU_TRAITS_MAPPING, keyed by libvirt's names.
    "3dnow": ("HW_CPU_X86_3DNOW",),
    "abm": ("HW_CPU_X86_ABM",),
    "aes": ("HW_CPU_X86_AESNI",),
    "amx-bf16": ("HW_CPU_X86_AMXBF16",),
    "amx-int8": ("HW_CPU_X86_AMXINT8",),
    "amx-tile": ("HW_CPU_X86_AMXTILE",),
    "avx": ("HW_CPU_X86_AVX",),
    "avx2": ("HW_CPU_X86_AVX2",),
    "avx512bw": ("HW_CPU_X86_AVX512BW",),
    "avx512cd": ("HW_CPU_X86_AVX512CD",),
    "avx512dq": ("HW_CPU_X86_AVX512DQ",),
    "avx512er": ("HW_CPU_X86_AVX512ER",),
    "avx512f": ("HW_CPU_X86_AVX512F",),
    "avx512pf": ("HW_CPU_X86_AVX512PF",),
    "avx512vl": ("HW_CPU_X86_AVX512VL",),
    "avx512vnni": ("HW_CPU_X86_AVX512VNNI",),
    "avx512vbmi": ("HW_CPU_X86_AVX512VBMI",),
    "avx512ifma": ("HW_CPU_X86_AVX512IFMA",),
    "avx512vbmi2": ("HW_CPU_X86_AVX512VBMI2",),
    "avx512bitalg": ("HW_CPU_X86_AVX512BITALG",),
    "vaes": ("HW_CPU_X86_AVX512VAES",),
    "gfni": ("HW_CPU_X86_AVX512GFNI",),
    "vpclmulqdq": ("HW_CPU_X86_AVX512VPCLMULQDQ",),
    "avx512-vpopcntdq": ("HW_CPU_X86_AVX512VPOPCNTDQ",),
    "bmi1": ("HW_CPU_X86_BMI",),
    "bmi2": ("HW_CPU_X86_BMI2",),
    "pclmuldq": ("HW_CPU_X86_CLMUL",),
    "f16c": ("HW_CPU_X86_F16C",),
    "fma": ("HW_CPU_X86_FMA3",),
    "fma4": ("HW_CPU_X86_FMA4",),
    "mmx": ("HW_CPU_X86_MMX",),
    "mpx": ("HW_CPU_X86_MPX",),
    "sha-ni": ("HW_CPU_X86_SHA",),
    "sse": ("HW_CPU_X86_SSE",),
    "sse2": ("HW_CPU_X86_SSE2",),
    "sse3": ("HW_CPU_X86_SSE3",),
    "sse4.1": ("HW_CPU_X86_SSE41",),
    "sse4.2": ("HW_CPU_X86_SSE42",),
    "sse4a": ("HW_CPU_X86_SSE4A",),
    "ssse3": ("HW_CPU_X86_SSSE3",),
    "svm": ("HW_CPU_X86_SVM", "HW_CPU_X86_AMD_SVM"),
    "tbm": ("HW_CPU_X86_TBM",),
    "vmx": ("HW_CPU_X86_VMX", "HW_CPU_X86_INTEL_VMX"),
    "xop": ("HW_CPU_X86_XOP",),
}
"""``{libvirt CPU feature name: the traits nova sets when it is present}``."""

NOVA_DECIDED: frozenset[str] = frozenset(t for ts in NOVA_CPU_TRAITS.values() for t in ts)
"""Every trait of nova's map: nova sets each one true or false, never leaves one alone."""

# libvirt feature names whose /proc/cpuinfo flag is not the name with '.' and '-' as '_'.
LIBVIRT_TO_KERNEL = {
    "pclmuldq": "pclmulqdq",
    "tsc-deadline": "tsc_deadline_timer",
}


def kernel_flag(name: str) -> str:
    """A libvirt CPU feature name as the kernel's /proc/cpuinfo flag (``sse4.2`` -> ``sse4_2``)."""
    return LIBVIRT_TO_KERNEL.get(name, name.replace(".", "_").replace("-", "_"))


_KERNEL_TO_LIBVIRT = {kernel: name for name, kernel in LIBVIRT_TO_KERNEL.items()}


def _plain(name: str) -> str:
    # The kernel writes avx512_vnni, sse4_1, sha_ni where libvirt writes avx512vnni,
    # sse4.1, sha-ni: compared without separators, the two name one feature.
    return name.replace(".", "").replace("-", "").replace("_", "")


_BY_PLAIN_NAME = {_plain(name): traits for name, traits in NOVA_CPU_TRAITS.items()}


def nova_map_traits(flags: Iterable[str]) -> frozenset[str]:
    """The traits of :data:`NOVA_DECIDED` that nova sets for a CPU with ``flags``.

    Args:
        flags: kernel flag names (/proc/cpuinfo ``flags``, or libvirt's feature
            names through :func:`kernel_flag`).

    Returns:
        A subset of :data:`NOVA_DECIDED`; every other trait of it is one nova clears.
        The kernel and libvirt both name SSE3 ``pni``, never ``sse3``, so
        ``HW_CPU_X86_SSE3`` is never among them, as in nova.
    """
    names = (_plain(_KERNEL_TO_LIBVIRT.get(flag, flag)) for flag in flags)
    return frozenset(t for name in names for t in _BY_PLAIN_NAME.get(name, ()))
