"""Disk: DISK_GB from the file system holding ``[compute] instances_path``.

The size comes from psutil (``statvfs`` of the path). Whether that file system
is shared between hosts comes from the mount table (``/proc/self/mounts``, the
longest mount point containing the path): instance disks on shared storage
are not reported as DISK_GB on the compute node (compute-node-inventory.rst,
4b).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

import psutil

from drivers.host.sysfs import Root, SysfsError, as_reader

MOUNTS = "proc/self/mounts"
GIB = 1024**3

SHARED_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "ceph",
        "fuse.ceph",
        "fuse.ceph-fuse",
        "glusterfs",
        "fuse.glusterfs",
        "lustre",
    }
)
"""Mount types (third field of /proc/mounts) of NFS, CephFS, GlusterFS and Lustre."""

_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True, slots=True)
class DiskInfo:
    """The file system holding the instance disks.

    Attributes:
        path: the existing directory measured (instances_path or its nearest
            existing parent).
        total_gb: its size in GiB, rounded down, before reserved_host_disk_mb.
        mountpoint: the mount point holding it ("" when the mount table is unreadable).
        fstype: its file system type ("" when unknown).
        shared: on shared storage (detected, or forced by configuration).
    """

    path: str
    total_gb: int
    mountpoint: str
    fstype: str
    shared: bool


def existing_dir(path: str) -> str:
    """``path`` if it exists, else its nearest existing parent.

    The instances directory may not exist before the first instance; its
    parent is on the file system that will hold it.
    """
    p = os.path.abspath(path)
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def instances_disk(path: str) -> int:
    """GiB (rounded down) of the file system holding ``path``, from psutil.

    Raises:
        OSError: the file system cannot be measured.
    """
    return int(psutil.disk_usage(existing_dir(path)).total // GIB)


def parse_mounts(text: str) -> list[tuple[str, str, str]]:
    """``(device, mountpoint, fstype)`` of each line of a mounts file (octal escapes undone).

    Raises:
        ValueError: a line has fewer than three fields.
    """
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) < 3:
            raise ValueError(f"line {line!r} has fewer than 3 fields")
        device, mnt, fstype = (_OCTAL.sub(lambda m: chr(int(m[1], 8)), f) for f in fields[:3])
        out.append((device, mnt, fstype))
    return out


def mounts_essentials(text: str) -> str:
    """A mounts file with only the fields discovery reads.

    ``capture`` stores this: mount options (which can carry user names or
    server-side settings) are replaced by ``rw``. A line with fewer than three
    fields is kept as it is (it holds no options), so that a garbled table
    stays garbled in the capture.
    """
    lines = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            lines.append(f"{fields[0]} {fields[1]} {fields[2]} rw 0 0")
        elif fields:
            lines.append(line)
    return "\n".join(lines) + "\n"


def mount_of(mounts: list[tuple[str, str, str]], path: str) -> tuple[str, str]:
    """``(mountpoint, fstype)`` of the last-mounted, longest mount point holding ``path``."""
    best = ("", "")
    for _device, mnt, fstype in mounts:
        prefix = mnt.rstrip("/") + "/"
        if (path == mnt or path.startswith(prefix)) and len(mnt) >= len(best[0]):
            best = (mnt, fstype)
    return best


def image_cache_gb(instances_path: str, subdirectory: str) -> int:
    """Disk the image cache takes, GiB rounded up, as nova measures it.

    nova (``nova/virt/libvirt/imagecache.py`` ``get_disk_usage``,
    ``_get_disk_size_reserved_for_image_cache``): the files directly in
    ``instances_path/subdirectory``, by the blocks they occupy (``st_blocks``
    * 512: cached images do not grow to their virtual size); 0 when the
    cache is on another device than ``instances_path`` or cannot be read
    (missing, or changing under the walk).

    Args:
        instances_path: ``[DEFAULT] instances_path``.
        subdirectory: ``[image_cache] subdirectory_name``.
    """
    cache = os.path.join(instances_path, subdirectory)
    try:
        if os.stat(instances_path).st_dev != os.stat(cache).st_dev:
            return 0
        used = 0
        for name in os.listdir(cache):
            path = os.path.join(cache, name)
            if os.path.isfile(path):
                used += os.stat(path).st_blocks * 512
    except OSError:
        return 0
    return math.ceil(used / 1024**3)


def discover_disk(root: Root, instances_path: str, force_shared: bool = False) -> DiskInfo:
    """Size and sharing of the file system holding the instance disks.

    Args:
        root: sysfs root or reader (its ``proc/self/mounts`` is the mount table).
        instances_path: ``[compute] instances_path``.
        force_shared: ``[compute] shared_storage``.

    Returns:
        :class:`DiskInfo`. An unreadable mount table is a warning: the
        storage is then taken as local unless ``force_shared``.

    Raises:
        OSError: psutil cannot measure the path.
    """
    reader = as_reader(root)
    path = existing_dir(instances_path)
    # The configured path, not its existing parent: a mount point named in the
    # table may not exist yet on this machine (fixtures) but still decides.
    real = os.path.realpath(instances_path)
    try:
        mounts = reader.parse(MOUNTS, parse_mounts)
        assert mounts is not None
        mountpoint, fstype = mount_of(mounts, real)
    except SysfsError as exc:
        reader.skip(exc, "shared storage detection")
        mountpoint, fstype = "", ""
    return DiskInfo(
        path=path,
        total_gb=instances_disk(path),
        mountpoint=mountpoint,
        fstype=fstype,
        shared=force_shared or fstype in SHARED_FILESYSTEMS,
    )
