"""``[pci] device_spec`` tags nova turns into Placement data: remote_managed, live_migratable,
one_time_use (nova 34: compute/resource_tracker.py ``_get_traits``,
compute/pci_placement_translator.py ``_get_traits_for_dev``, ``add_parent``,
``_handle_one_time_use``; pci/devspec.py).

The numa-sriov libvirt fixture (real libvirt, test driver): NVMe drives
0000:5e:00.0 (free) and 0000:d8:00.0 (domain vm-nvme holds it), PF ens2f0
0000:af:00.0 with 4 VFs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.model.exceptions import ConfigError
from agent.model.provider_tree import ProviderTree
from agent.shape.adapter import adapt
from tests.helpers.libvirt_fixtures import ROOT_UUID, laid_out, libvirt_driver, tree_view

PF = '{{"devname": "ens2f0"{tags}}}'
NVME = '{{"vendor_id": "8086", "product_id": "0a54"{tags}}}'
FREE, HELD = "cn1_0000:5E:00.0", "cn1_0000:D8:00.0"


def _pci(*specs: str, placement: bool = True) -> dict[str, object]:
    return {"device_spec": list(specs), "report_in_placement": placement}


def test_remote_managed_ports_only_with_a_remote_managed_device(tmp_path):
    plain = laid_out(libvirt_driver(tmp_path, "numa-sriov", pci=_pci(PF.format(tags=""))))
    assert "COMPUTE_REMOTE_MANAGED_PORTS" not in plain.data("cn1").traits
    tagged = PF.format(tags=', "remote_managed": "true"')
    tree = laid_out(libvirt_driver(tmp_path, "numa-sriov", pci=_pci(tagged, placement=False)))
    assert "COMPUTE_REMOTE_MANAGED_PORTS" in tree.data("cn1").traits


def test_live_migratable_devices_carry_hw_pci_live_migratable(tmp_path):
    tags = ', "live_migratable": "yes"'
    pci = _pci(NVME.format(tags=tags), PF.format(tags=tags))
    view = tree_view(laid_out(libvirt_driver(tmp_path, "numa-sriov", pci=pci)))
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
