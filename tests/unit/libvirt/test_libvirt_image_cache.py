"""``[workarounds] reserve_disk_resource_for_image_cache``: DISK_GB reserved grows by the cache.

nova 34: ``nova/virt/libvirt/driver.py`` ``_get_disk_size_reserved_for_image_cache``
and ``nova/virt/libvirt/imagecache.py`` ``get_disk_usage`` (files directly in
``$instances_path/[image_cache] subdirectory_name``, by blocks occupied, in
GiB rounded up; nothing when the cache is on another device).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from drivers.host.disk import image_cache_gb
from tests.helpers.libvirt_fixtures import laid_out, libvirt_driver


def _instances(tmp_path: Path, cache_mib: int, subdir: str = "_base") -> Path:
    instances = tmp_path / "instances"
    cache = instances / subdir
    cache.mkdir(parents=True)
    (cache / "image-a").write_bytes(os.urandom(cache_mib * 1024 * 1024))
    (cache / "nested").mkdir()  # a folder is not counted (nova counts files only)
    return instances


def _disk(tmp_path: Path, **groups: dict[str, object]) -> tuple[int, int]:
    driver = libvirt_driver(tmp_path, "small-host", **groups)
    inv = laid_out(driver).data("cn1").inventory["DISK_GB"]
    return inv.total, inv.reserved


def test_the_image_cache_is_reserved_only_with_the_workaround(tmp_path):
    _instances(tmp_path, 3)
    assert _disk(tmp_path)[1] == 0  # nova's default: off
    on = {"reserve_disk_resource_for_image_cache": True}
    assert _disk(tmp_path, workarounds=on)[1] == 1  # 3 MiB: one GiB, rounded up
    mb = {"reserved_host_disk_mb": 1025}
    assert _disk(tmp_path, workarounds=on, DEFAULT=mb)[1] == 3  # 2 + 1


def test_the_cache_folder_name_and_a_cache_elsewhere(tmp_path):
    instances = _instances(tmp_path, 1, subdir="_base_10.0.0.5")
    assert image_cache_gb(str(instances), "_base_10.0.0.5") == 1
    assert image_cache_gb(str(instances), "_base") == 0  # no such folder
    shm = Path("/dev/shm")
    if shm.is_dir() and os.stat(shm).st_dev != os.stat(instances).st_dev:
        with tempfile.TemporaryDirectory(dir=shm) as other:
            Path(other, "image").write_bytes(b"x" * 4096)
            (instances / "_elsewhere").symlink_to(other)
            assert image_cache_gb(str(instances), "_elsewhere") == 0  # another device
