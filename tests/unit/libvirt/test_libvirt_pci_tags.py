"""``[pci] device_spec`` tags nova turns into Placement data: remote_managed, live_migratable,
one_time_use (nova 34: compute/resource_tracker.py ``_get_traits``,
compute/pci_placement_translator.py ``_get_traits_for_dev``, ``add_parent``,
``_handle_one_time_use``; pci/devspec.py).

The numa-sriov libvirt fixture (real libvirt, test driver): NVMe drives
0000:5e:00.0 (free) and 0000:d8:00.0 (domain vm-nvme holds it), PF ens2f0
0000:af:00.0 with 4 VFs.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from agent.model.exceptions import ConfigError
from agent.model.provider_tree import ProviderTree
from agent.shape.adapter import adapt
from drivers.libvirt.pci_versions import check_live_migratable
from tests.helpers.libvirt_fixtures import ROOT_UUID, laid_out, libvirt_driver, tree_view
from tests.helpers.paths import LIBVIRT

PF = '{{"devname": "ens2f0"{tags}}}'
NVME = '{{"vendor_id": "8086", "product_id": "0a54"{tags}}}'
FREE, HELD = "cn1_0000:5E:00.0", "cn1_0000:D8:00.0"


def _pci(*specs: str, placement: bool = True) -> dict[str, object]:
    return {"device_spec": list(specs), "report_in_placement": placement}


VPD = (
    "<capability type='vpd'><name>X710 card</name><fields access='readonly'>"
    "<serial_number>MT2113X00000</serial_number></fields></capability>"
)


def with_pf_vpd(tmp_path: Path) -> dict[str, object]:
    """The numa-sriov host with a VPD card serial number on PF 0000:af:00.0 (none on its
    VFs), as libvirt shows one (its tests/nodedevschemadata/pci_0000_42_00_0_vpd.xml);
    the ``[libvirt]`` options that point the driver at it."""
    host = tmp_path / "vpd-host"
    shutil.copytree(LIBVIRT / "numa-sriov", host)
    text = (host / "host.xml").read_text()
    anchor = "<capability type='virt_functions' maxCount='64'>"
    assert text.count(anchor) == 1
    (host / "host.xml").write_text(text.replace(anchor, VPD + anchor))
    return {
        "connection_uri": f"test://{host / 'host.xml'}",
        "capabilities_file": str(host / "capabilities.xml"),
    }


def test_remote_managed_ports_only_with_a_remote_managed_device(tmp_path):
    plain = laid_out(libvirt_driver(tmp_path, "numa-sriov", pci=_pci(PF.format(tags=""))))
    assert "COMPUTE_REMOTE_MANAGED_PORTS" not in plain.data("cn1").traits
    tagged = PF.format(tags=', "remote_managed": "true"')
    libvirt = with_pf_vpd(tmp_path)
    driver = libvirt_driver(
        tmp_path, "numa-sriov", pci=_pci(tagged, placement=False), libvirt=libvirt
    )
    tree = laid_out(driver)
    assert "COMPUTE_REMOTE_MANAGED_PORTS" in tree.data("cn1").traits
    assert tree.data("cn1_pci_0000_af_00_0").inventory["SRIOV_NET_VF"].total == 4


def test_remote_managed_vfs_without_a_vpd_serial_are_not_offered(tmp_path, caplog):
    """nova drops a remote-managed device without a card serial number (devspec.py),
    looking at the VF's VPD and then its PF's (host.py ``_get_vpd_details``): neither has
    one here, so no VF is offered, no COMPUTE_REMOTE_MANAGED_PORTS, one warning."""
    tagged = PF.format(tags=', "remote_managed": "true"')
    for placement in (False, True):
        tree = laid_out(
            libvirt_driver(tmp_path, "numa-sriov", pci=_pci(tagged, placement=placement))
        )
        assert "COMPUTE_REMOTE_MANAGED_PORTS" not in tree.data("cn1").traits
        assert not {"cn1_pci_0000_af_00_0", "cn1_0000:AF:00.0"} & {p.name for p in tree.all_data()}
    assert "remote_managed needs a card serial number" in caplog.text
    assert "0000:af:00.0" in caplog.text


def test_a_spec_naming_the_pf_itself_offers_it_whole(tmp_path, caplog):
    """nova reports an SR-IOV PF as a type-PF device; a spec matching it and none of its
    VFs makes it one whole device (pci_placement_translator ``add_parent``: total 1)."""
    pf_ids = '{"vendor_id": "8086", "product_id": "1572"}'
    view = tree_view(laid_out(libvirt_driver(tmp_path, "numa-sriov", pci=_pci(pf_ids))))
    assert view["cn1_0000:AF:00.0"]["inv"] == {"CUSTOM_PCI_8086_1572": (1, 0, 1, 1.0)}
    assert "COMPUTE_MANAGED_PCI_DEVICE" in view["cn1_0000:AF:00.0"]["traits"]
    # Its VFs named too: the VFs are offered (and the PF is not also whole); nova's
    # translator refuses the two (PlacementPciDependentDeviceException): a warning.
    vf_ids = '{"vendor_id": "8086", "product_id": "154c"}'
    view = tree_view(laid_out(libvirt_driver(tmp_path, "numa-sriov", pci=_pci(pf_ids, vf_ids))))
    assert view["cn1_0000:AF:00.0"]["inv"] == {"CUSTOM_PCI_8086_154C": (4, 0, 4, 1.0)}
    assert "matches PF 0000:af:00.0 itself" in caplog.text
    # An address naming the PF alone matches its VFs too (nova's WhitelistPciAddress).
    by_address = '{"address": "0000:af:00.0"}'
    view = tree_view(laid_out(libvirt_driver(tmp_path, "numa-sriov", pci=_pci(by_address))))
    assert view["cn1_0000:AF:00.0"]["inv"] == {"CUSTOM_PCI_8086_154C": (4, 0, 4, 1.0)}


class NewLibvirt:
    """A connection that answers nova's version check as libvirt 10.0.0 with QEMU 8.2.2."""

    def __init__(self, conn: object) -> None:
        self.conn = conn

    def __getattr__(self, name: str) -> object:
        return getattr(self.conn, name)

    def getLibVersion(self) -> int:
        return 10_000_000

    def getVersion(self) -> int:
        return 8_002_002

    def getType(self) -> str:
        return "QEMU"


def test_live_migratable_is_refused_as_nova_refuses_it(tmp_path):
    """nova's ``_check_pci_whitelist``: the tag at all ("false" too) needs libvirt 10.0.0
    and QEMU 8.2.2. The test driver is libvirt 9.0.0, type TEST: refused at the start-up
    check, exit 2's ConfigError naming the option and the versions."""
    for value in ("true", "false"):
        spec = NVME.format(tags=f', "live_migratable": "{value}"')
        driver = libvirt_driver(tmp_path, "numa-sriov", pci=_pci(spec))
        with pytest.raises(ConfigError) as refused:
            adapt(driver).check_host_config()
        message = str(refused.value)
        assert "[pci] device_spec" in message and "live_migratable" in message
        assert "libvirt 10.0.0 and QEMU 8.2.2" in message and "found libvirt 9." in message
    check_live_migratable(driver.settings.specs, 10_000_000, 8_002_002, "QEMU")
    for versions in ((9_010_000, 8_002_002, "QEMU"), (10_000_000, 8_002_001, "QEMU")):
        with pytest.raises(ConfigError, match="live_migratable needs"):
            check_live_migratable(driver.settings.specs, *versions)


def test_live_migratable_devices_carry_hw_pci_live_migratable(tmp_path):
    tags = ', "live_migratable": "yes"'
    pci = _pci(NVME.format(tags=tags), PF.format(tags=tags))
    driver = libvirt_driver(tmp_path, "numa-sriov", pci=pci)
    conn = driver.connection.get()
    driver.connection.get = lambda: NewLibvirt(conn)  # type: ignore[method-assign]
    view = tree_view(laid_out(driver))
    for name in (FREE, HELD, "cn1_0000:AF:00.0"):
        assert {"COMPUTE_MANAGED_PCI_DEVICE", "HW_PCI_LIVE_MIGRATABLE"} <= view[name]["traits"]
    plain = tree_view(
        laid_out(libvirt_driver(tmp_path, "numa-sriov", pci=_pci(NVME.format(tags=""))))
    )
    assert "HW_PCI_LIVE_MIGRATABLE" not in plain[FREE]["traits"]


def test_one_time_use_needs_report_in_placement(tmp_path):
    spec = NVME.format(tags=', "one_time_use": "true"')
    with pytest.raises(ConfigError, match=r"one_time_use.*report_in_placement"):
        libvirt_driver(tmp_path, "numa-sriov", pci=_pci(spec, placement=False))


def test_one_time_use_on_vfs_costs_a_warning_not_the_host(tmp_path, caplog):
    """nova refuses the tag on VFs (only type-PCI and type-PF devices qualify): the PF's
    VFs are offered without it, with one warning naming the spec and the PF."""
    tagged = PF.format(tags=', "one_time_use": "true"')
    tree = tree_view(laid_out(libvirt_driver(tmp_path, "numa-sriov", pci=_pci(tagged))))
    pf = tree["cn1_0000:AF:00.0"]  # its VFs, in Placement as nova reports them
    assert "HW_PCI_ONE_TIME_USE" not in pf["traits"]
    assert pf["inv"] == {"CUSTOM_PCI_8086_154C": (4, 0, 4, 1.0)}  # nothing reserved
    assert "one_time_use is for whole devices only" in caplog.text
    assert "0000:af:00.0" in caplog.text


def test_a_one_time_use_device_is_reserved_while_held_and_after_until_cleared(tmp_path):
    driver = libvirt_driver(
        tmp_path, "numa-sriov", pci=_pci(NVME.format(tags=', "one_time_use": "true"'))
    )
    view = tree_view(laid_out(driver))
    assert view[HELD]["inv"] == {"CUSTOM_PCI_8086_0A54": (1, 1, 1, 1.0)}  # vm-nvme holds it
    assert view[FREE]["inv"] == {"CUSTOM_PCI_8086_0A54": (1, 0, 1, 1.0)}
    assert (
        "HW_PCI_ONE_TIME_USE" in view[FREE]["traits"]
        and "HW_PCI_ONE_TIME_USE" in view[HELD]["traits"]
    )
    # Placement holds the free one reserved (its user gone): it stays so; once an
    # operator clears it, it stays cleared. The held one is reserved again whatever
    # Placement holds (nova sets it while allocated).
    for placed, expected in ((1, 1), (0, 0)):
        tree = ProviderTree()
        tree.new_root("cn1", ROOT_UUID)
        adapt(driver).update_provider_tree(tree, "cn1")
        free = dict(tree.data(FREE).inventory)
        free["CUSTOM_PCI_8086_0A54"] = replace(free["CUSTOM_PCI_8086_0A54"], reserved=placed)
        tree.update_inventory(FREE, free)
        held = dict(tree.data(HELD).inventory)
        held["CUSTOM_PCI_8086_0A54"] = replace(held["CUSTOM_PCI_8086_0A54"], reserved=0)
        tree.update_inventory(HELD, held)
        adapt(driver).update_provider_tree(tree, "cn1")
        assert tree.data(FREE).inventory["CUSTOM_PCI_8086_0A54"].reserved == expected
        assert tree.data(HELD).inventory["CUSTOM_PCI_8086_0A54"].reserved == 1


def test_without_the_tag_no_domain_is_read_for_the_host(tmp_path):
    driver = libvirt_driver(tmp_path, "numa-sriov", pci=_pci(NVME.format(tags="")))
    calls = []
    driver.instances.list_domains = lambda: calls.append(1) or []  # type: ignore[method-assign]
    driver.get_host_resources("cn1")
    assert calls == []
