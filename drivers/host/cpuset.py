"""CPU lists: nova's ``cpu_dedicated_set`` syntax and the kernel's cpulist format.

Nova's syntax (nova.conf, ``[compute] cpu_dedicated_set``): comma-separated
items, each a CPU number ``8``, a range ``0-3``, or an exclusion ``^2`` /
``^4-5``; exclusions apply after every inclusion, so ``0-3,^2,8`` is
{0, 1, 3, 8}. The kernel's cpulist (``/sys/devices/system/cpu/online``,
``node*/cpulist``; Documentation/admin-guide/cputopology.rst) is the same
without exclusions.
"""

from __future__ import annotations

import re

_ITEM = re.compile(r"^(\^)?\s*(\d+)\s*(?:-\s*(\d+))?$")


def parse_cpu_spec(spec: str, *, allow_exclusions: bool = True) -> frozenset[int]:
    """The set of CPU numbers a CPU list names.

    Args:
        spec: e.g. ``0-3,^2,8``; blank items are ignored, so an empty string
            is the empty set.
        allow_exclusions: False for the kernel's format, which has no ``^``.

    Returns:
        CPU numbers (0-based, as the kernel numbers them).

    Raises:
        ValueError: an item is not ``N``, ``N-M`` (N <= M) or ``^...``.
    """
    include: set[int] = set()
    exclude: set[int] = set()
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        m = _ITEM.match(item)
        if not m or (m[1] and not allow_exclusions):
            raise ValueError(f"{item!r} is not a CPU number, range or exclusion")
        first = int(m[2])
        last = int(m[3]) if m[3] is not None else first
        if last < first:
            raise ValueError(f"range {item!r} ends before it starts")
        (exclude if m[1] else include).update(range(first, last + 1))
    return frozenset(include - exclude)


def parse_cpulist(text: str) -> frozenset[int]:
    """The kernel's cpulist format (``0-7,16-23``; no exclusions).

    Raises:
        ValueError: not a cpulist.
    """
    return parse_cpu_spec(text, allow_exclusions=False)


def format_cpu_set(cpus: frozenset[int] | set[int]) -> str:
    """The shortest cpulist for ``cpus``: ``{0,1,2,5}`` -> ``0-2,5``; empty -> ``""``."""
    out: list[str] = []
    ordered = sorted(cpus)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)
