"""Intel TDX on a libvirt host (fixtures/libvirt/tdx-host): nova 34's detection rules.

Rules: nova 34 ``nova/virt/libvirt/host.py`` (``supports_intel_tdx``: x86_64,
``[libvirt] cpu_mode = host-passthrough``, ``<tdx supported='yes'/>`` in any x86_64
machine type's domain capabilities; ``_get_cgroup_tdx_capacity`` /
``_get_tdx_capacity``: the misc cgroup's ``tdx`` line, else ``[libvirt]
num_intel_tdx_guests``, the option winning when both are set) and
``nova/virt/libvirt/driver.py`` (``_ensure_memory_encryption_providers``: no provider
for 0 slots). The fixture's domain capabilities: docs in tdx-host/domcapabilities.xml.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from drivers.host.sysfs import SysfsReader
from drivers.libvirt.tdx import (
    MISC_CAPACITY,
    cgroup_capacity,
    supports_tdx,
    tdx_slots,
)
from drivers.libvirt.traits import parse_domain_capabilities
from drivers.libvirt.xmlutil import LibvirtXMLError
from tests.helpers.libvirt_fixtures import (
    allocations_by_name,
    laid_out,
    libvirt_driver,
    tdx_host_groups,
    tree_view,
    with_tdx_guests,
)
from tests.helpers.paths import LIBVIRT

TDX_HOST = LIBVIRT / "tdx-host"
DOMCAPS = (TDX_HOST / "domcapabilities.xml").read_text()
SEV_DOMCAPS = (LIBVIRT / "sev-host" / "domcapabilities.xml").read_text()
NO_TDX = DOMCAPS.replace("<tdx supported='yes'/>", "<tdx supported='no'/>")
TDX_GUEST = "7d7d7d7d-0000-4000-8000-000000000001"
PLAIN_GUEST = "7d7d7d7d-0000-4000-8000-000000000002"


def sysfs(tmp_path: Path, capacity: str | bytes | None) -> Path:
    """A sysfs root like the fixture's, with ``capacity`` as misc.capacity (None: absent)."""
    root = tmp_path / "sysfs"
    shutil.copytree(TDX_HOST / "sysfs", root)
    target = root / MISC_CAPACITY
    target.unlink()
    if isinstance(capacity, bytes):
        target.write_bytes(capacity)
    elif capacity is not None:
        target.write_text(capacity)
    return root


def tdx_driver(tmp_path: Path, capacity: str | bytes | None = "tdx 63\n", **libvirt_opts):
    groups = tdx_host_groups()
    groups["libvirt"].update(libvirt_opts)
    groups["host_driver"] = {"sysfs_root": str(sysfs(tmp_path, capacity))}
    return libvirt_driver(tmp_path, "tdx-host", **groups)


def offered(driver) -> dict[str, tuple[int, str]]:
    host = driver.get_host_resources("cn1")
    return {m.model: (m.slots, m.trait) for m in host.mem_encryption}


def domain_offers_tdx(text: str) -> bool:
    return parse_domain_capabilities(text).tdx_supported


def test_the_tdx_feature_is_read_from_the_domain_capabilities():
    assert domain_offers_tdx(DOMCAPS)
    assert not domain_offers_tdx(NO_TDX)
    assert not domain_offers_tdx(SEV_DOMCAPS)  # no <tdx> element at all
    with pytest.raises(LibvirtXMLError):
        domain_offers_tdx("<domainCapabilities>")


@pytest.mark.parametrize(
    "arch,cpu_mode,texts,expected",
    [
        ("x86_64", "host-passthrough", [DOMCAPS], True),
        # Any machine type of the host arch: the q35 document offers it, the pc one not.
        ("x86_64", "host-passthrough", [NO_TDX, DOMCAPS], True),
        ("aarch64", "host-passthrough", [DOMCAPS], False),
        ("x86_64", None, [DOMCAPS], False),  # unset: nova's default is host-model
        ("x86_64", "host-model", [DOMCAPS], False),
        ("x86_64", "custom", [DOMCAPS], False),
        ("x86_64", "none", [DOMCAPS], False),
        ("x86_64", "host-passthrough", [NO_TDX, SEV_DOMCAPS], False),
        ("x86_64", "host-passthrough", [], False),  # libvirt gave no domain capabilities
    ],
)
def test_each_condition_of_novas_detection(arch, cpu_mode, texts, expected):
    domains = [parse_domain_capabilities(t) for t in texts]
    assert supports_tdx(arch, cpu_mode, domains) is expected


@pytest.mark.parametrize(
    "content,expected,warned",
    [
        ("tdx 63\n", 63, None),
        ("sev 509\nsev_es 0\ntdx 31\n", 31, None),
        ("tdx 0\n", 0, None),
        (None, None, None),  # no misc controller: nova logs at debug level
        ("sev 509\n", None, "no tdx line"),
        ("tdx lots\n", None, "'lots' is not a whole number"),
        ("tdx -1\n", None, "'-1' is not a whole number"),
        (b"tdx \xff\n", None, "garbled"),
    ],
)
def test_the_misc_cgroup_capacity(tmp_path, content, expected, warned):
    said: list[str] = []
    reader = SysfsReader(sysfs(tmp_path, content))
    assert cgroup_capacity(reader, said.append) == expected
    if warned is None:
        assert said == []
    else:
        assert len(said) == 1 and warned in said[0]
        assert said[0].startswith(reader.path(MISC_CAPACITY))  # names the file


def test_an_unreadable_capacity_file_is_named(tmp_path):
    root = sysfs(tmp_path, None)
    (root / MISC_CAPACITY).mkdir()  # a directory where the file should be
    said: list[str] = []
    assert cgroup_capacity(SysfsReader(root), said.append) is None
    assert len(said) == 1 and str(root / MISC_CAPACITY) in said[0]


@pytest.mark.parametrize(
    "cgroup,option,slots,warned",
    [
        (63, None, 63, False),  # the cgroup alone
        (None, 16, 16, False),  # the option alone
        (63, 16, 16, False),  # both: the option
        (63, 100, 100, True),  # both, the option above the cgroup: the option, warned
        (None, None, 0, True),  # neither: no slots, warned
        (None, 0, 0, False),  # the operator says none
    ],
)
def test_capacity_from_the_cgroup_or_the_option(cgroup, option, slots, warned):
    said: list[str] = []
    assert tdx_slots(cgroup, option, said.append) == slots
    assert bool(said) is warned
    if option is not None and warned:
        assert "num_intel_tdx_guests = 100 exceeds the 63" in said[0]


def test_the_driver_lays_out_novas_tdx_child_and_plans_the_guest_on_it(tmp_path):
    driver = with_tdx_guests(tdx_driver(tmp_path), {TDX_GUEST})
    tree = laid_out(driver)
    view = tree_view(tree)
    assert view["cn1_intel_tdx"] == {
        "parent": "cn1",
        "inv": {"MEM_ENCRYPTION_CONTEXT": (63, 0, 1, 1.0)},
        "traits": {"HW_CPU_X86_INTEL_TDX"},
    }
    assert "HW_CPU_X86_INTEL_TDX" not in view["cn1"]["traits"]
    assert "MEM_ENCRYPTION_CONTEXT" not in view["cn1"]["inv"]
    planned = allocations_by_name(driver, tree)
    assert planned[TDX_GUEST]["allocations"] == {
        "cn1": {"DISK_GB": 20, "MEMORY_MB": 2048, "VCPU": 2},
        "cn1_intel_tdx": {"MEM_ENCRYPTION_CONTEXT": 1},
    }
    assert planned[PLAIN_GUEST]["allocations"] == {
        "cn1": {"DISK_GB": 20, "MEMORY_MB": 2048, "VCPU": 1}
    }


@pytest.mark.parametrize(
    "options,capacity",
    [
        ({"cpu_mode": "host-model"}, "tdx 63\n"),
        ({"cpu_mode": None}, "tdx 63\n"),
        ({}, "tdx 0\n"),  # the cgroup allows none: no provider
    ],
)
def test_no_tdx_provider_when_a_condition_is_off(tmp_path, options, capacity):
    driver = tdx_driver(tmp_path, capacity, **options)
    assert offered(driver) == {}
    assert "cn1_intel_tdx" not in tree_view(laid_out(driver))


def test_no_tdx_in_the_domain_capabilities_no_provider(tmp_path):
    other = tmp_path / "domcaps.xml"
    other.write_text(NO_TDX)
    driver = tdx_driver(tmp_path, domain_capabilities_file=str(other))
    assert offered(driver) == {}


def test_capacity_unknown_costs_one_warning_and_the_guest_its_context(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="drivers.libvirt.driver")
    driver = with_tdx_guests(tdx_driver(tmp_path, None), {TDX_GUEST})
    assert offered(driver) == {}
    assert offered(driver) == {}  # a second cycle: the same warning, not logged again
    said = [r.getMessage() for r in caplog.records if "num_intel_tdx_guests" in r.getMessage()]
    assert len(said) == 1 and "no TDX slots are reported" in said[0]
    planned = allocations_by_name(driver, laid_out(driver))
    assert planned[TDX_GUEST]["allocations"] == {
        "cn1": {"DISK_GB": 20, "MEMORY_MB": 2048, "VCPU": 2}
    }


def test_the_option_sizes_tdx_without_the_cgroup_and_wins_over_it(tmp_path):
    assert offered(tdx_driver(tmp_path / "a", None, num_intel_tdx_guests=8)) == {
        "intel_tdx": (8, "HW_CPU_X86_INTEL_TDX")
    }
    driver = tdx_driver(tmp_path / "b", "tdx 63\n", num_intel_tdx_guests=100)
    assert offered(driver) == {"intel_tdx": (100, "HW_CPU_X86_INTEL_TDX")}
    assert any("num_intel_tdx_guests = 100 exceeds the 63" in w for w in driver.warnings)


def test_a_malformed_capacity_file_costs_a_warning_not_the_host(tmp_path):
    driver = tdx_driver(tmp_path, "tdx: sixty-three\n")
    host = driver.get_host_resources("cn1")
    assert host.mem_encryption == () and host.vcpus == 16 and host.memory_mb == 65536
    path = str(tmp_path / "sysfs" / MISC_CAPACITY)
    assert any(w.startswith(f"{path}: no tdx line") for w in driver.warnings)
    # With the option set the host still offers TDX, sized by the option.
    again = tdx_driver(tmp_path / "again", "tdx many\n", num_intel_tdx_guests=4)
    assert offered(again) == {"intel_tdx": (4, "HW_CPU_X86_INTEL_TDX")}
