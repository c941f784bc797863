"""The host's architecture trait (``HW_ARCH_*``) from /proc/cpuinfo.

Nova's libvirt driver reports ``HW_ARCH_{host CPU arch}`` when os-traits has
it (``nova/virt/libvirt/driver.py`` ``_get_cpu_arch_traits``, from the host
capabilities' ``<cpu><arch>``). The host driver reads the same fact from the
first CPU of /proc/cpuinfo, so a captured host replays with its own arch:

* x86 (``vendor_id`` present): ``lm`` (long mode, kernel
  arch/x86/include/asm/cpufeatures.h) means ``X86_64``, else ``I686``;
* anything else: no trait (the cpuinfo reader reads x86's fields only).
"""

from __future__ import annotations

from collections.abc import Iterable

import os_traits


def arch_traits(vendor: str, flags: Iterable[str]) -> frozenset[str]:
    """``{HW_ARCH_*}`` for the first CPU of /proc/cpuinfo, or empty when unknown.

    Args:
        vendor: ``vendor_id`` (x86 only), e.g. ``GenuineIntel``; "" elsewhere.
        flags: the ``flags`` line's words.
    """
    if not vendor:
        return frozenset()
    arch = "X86_64" if "lm" in set(flags) else "I686"
    trait = f"HW_ARCH_{arch}"
    return frozenset({trait}) if trait in os_traits.get_traits(prefix="HW_ARCH_") else frozenset()
