"""The host's architecture trait (``HW_ARCH_*``) from /proc/cpuinfo.

Nova's libvirt driver reports ``HW_ARCH_{host CPU arch}`` when os-traits has
it (``nova/virt/libvirt/driver.py`` ``_get_cpu_arch_traits``, from the host
capabilities' ``<cpu><arch>``). The host driver reads the same fact from the
first CPU of /proc/cpuinfo, so a captured host replays with its own arch:

* x86 (``vendor_id`` present): ``lm`` (long mode, kernel
  arch/x86/include/asm/cpufeatures.h) means ``X86_64``, else ``I686``;
* arm64 (``CPU architecture: 8``): ``AARCH64``;
* anything else: no trait.
"""

from __future__ import annotations

from collections.abc import Iterable

import os_traits


def arch_traits(vendor: str, flags: Iterable[str], cpu_architecture: str = "") -> frozenset[str]:
    """``{HW_ARCH_*}`` for the first CPU of /proc/cpuinfo, or empty when unknown.

    Args:
        vendor: ``vendor_id`` (x86 only), e.g. ``GenuineIntel``.
        flags: the ``flags`` line's words (x86).
        cpu_architecture: the ``CPU architecture`` value (arm).
    """
    if vendor:
        arch = "X86_64" if "lm" in set(flags) else "I686"
    elif cpu_architecture.strip() == "8":
        arch = "AARCH64"
    else:
        return frozenset()
    trait = f"HW_ARCH_{arch}"
    return frozenset({trait}) if trait in os_traits.get_traits(prefix="HW_ARCH_") else frozenset()
