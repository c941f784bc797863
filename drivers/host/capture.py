"""``compute-agent capture``: copy exactly the files discovery reads.

Discovery is run once with a :class:`~drivers.host.sysfs.Recorder`; every
file, link and directory entry it used is written below the destination, so
``--sysfs-root DEST`` replays the same records. Nothing else is copied:
no config space, no device memory (``resource*``), no ``/proc`` beyond
cpuinfo (first CPU's vendor and flags), meminfo and the mount table (mount
options dropped).

Links are written relative and resolvable inside the capture (a PF's
``virtfn3`` points at ``../<vf address>``, ``driver`` at
``../../drivers/<name>``), since discovery reads only the link's name.

What could not be read is carried too, so that the capture fails where the
original failed: bytes that are not text are copied as they are, a directory
standing where a file or link was expected is written as a directory, a file
where a link was expected as a file, and anything else unreadable as a
symlink to itself (which no one can read, root included).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from drivers.errors import ConfigError
from drivers.host.cpu import CPUINFO, cpuinfo_essentials
from drivers.host.discovery import Discovery, discover_host
from drivers.host.disk import MOUNTS, mounts_essentials
from drivers.host.settings import HostSettings
from drivers.host.sysfs import BROKEN_DIR, BROKEN_FILE, Recorder, SysfsReader

SANITIZERS: dict[str, Callable[[str], str]] = {
    CPUINFO: cpuinfo_essentials,
    MOUNTS: mounts_essentials,
}

_LINK_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str], str], tuple[str, str]]], ...] = (
    (re.compile(r"sys/bus/pci/devices/[^/]+/(virtfn\d+|physfn)"), lambda m, n: (f"../{n}", "")),
    (
        re.compile(r"sys/bus/pci/devices/[^/]+/driver"),
        lambda m, n: (f"../../drivers/{n}", f"sys/bus/pci/drivers/{n}"),
    ),
    (
        re.compile(r"sys/bus/pci/devices/[^/]+/iommu_group"),
        lambda m, n: (f"../../../../kernel/iommu_groups/{n}", f"sys/kernel/iommu_groups/{n}"),
    ),
    (
        re.compile(r"sys/class/mdev_bus/[^/]+/[^/]+/mdev_type"),
        lambda m, n: (f"../mdev_supported_types/{n}", ""),
    ),
)


@dataclass(frozen=True, slots=True)
class CaptureResult:
    """What a capture wrote.

    Attributes:
        dest: the destination directory.
        files: files written.
        links: symlinks written.
        discovery: the discovery that was recorded.
    """

    dest: Path
    files: int
    links: int
    discovery: Discovery


def _link_target(rel: str, raw: str) -> tuple[str, str]:
    """``(target to write, directory to create)`` for a recorded link."""
    parts = [p for p in raw.split("/") if p]
    if not parts:
        return raw, ""  # "/" or "": discovery finds no name in it either way
    name = parts[-1]
    for pattern, rule in _LINK_RULES:
        m = pattern.fullmatch(rel)
        if m:
            return rule(m, name)
    if rel.startswith("sys/bus/mdev/devices/") and len(parts) >= 2:
        # An mdev's link names its parent device then itself.
        parent = parts[-2]
        return f"../../../class/mdev_bus/{parent}/{name}", f"sys/class/mdev_bus/{parent}/{name}"
    return raw, ""


def _write_broken(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == BROKEN_DIR:
        path.mkdir(exist_ok=True)
    elif kind == BROKEN_FILE:
        path.write_bytes(b"")
    else:
        os.symlink(path.name, path)  # ELOOP on open and listdir


def write_capture(recorder: Recorder, dest: Path) -> tuple[int, int]:
    """Write what ``recorder`` holds below ``dest``; returns ``(files, links)``.

    Raises:
        OSError: ``dest`` cannot be written.
    """
    for rel, text in sorted(recorder.files.items()):
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SANITIZERS.get(rel, lambda t: t)(text), encoding="utf-8")
    for rel, data in sorted(recorder.blobs.items()):
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for rel, kind in sorted(recorder.broken.items()):
        _write_broken(dest / rel, kind)
    for rel, raw in sorted(recorder.links.items()):
        target, make = _link_target(rel, raw)
        if make:
            (dest / make).mkdir(parents=True, exist_ok=True)
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
    for rel, names in sorted(recorder.dirs.items()):
        for name in names:
            entry = f"{rel}/{name}"
            if (
                entry not in recorder.links
                and entry not in recorder.broken
                and not os.path.lexists(dest / entry)
            ):
                (dest / entry).mkdir(parents=True, exist_ok=True)
    return len(recorder.files) + len(recorder.blobs), len(recorder.links)


def capture(
    settings: HostSettings, dest: str | os.PathLike[str], recorder: Recorder | None = None
) -> CaptureResult:
    """Run discovery on ``settings.sysfs_root`` and copy what it read into ``dest``.

    Args:
        settings: the host driver's settings (the source root among them).
        dest: a directory that does not exist yet or is empty.
        recorder: records what discovery reads; pass one to watch it grow
            (a progress display); a new one by default.

    Raises:
        ConfigError: ``dest`` exists and is not an empty directory.
        SysfsError, OSError: see :func:`drivers.host.discovery.discover_host`.
    """
    out = Path(dest)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"capture destination {out} exists and is not an empty directory")
    recorder = recorder if recorder is not None else Recorder()
    discovery = discover_host(settings, SysfsReader(settings.sysfs_root, recorder))
    out.mkdir(parents=True, exist_ok=True)
    files, links = write_capture(recorder, out)
    return CaptureResult(out, files, links, discovery)
