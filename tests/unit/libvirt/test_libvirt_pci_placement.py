"""[pci] report_in_placement with the libvirt driver: the VFs' ids from libvirt's node devices."""

from __future__ import annotations

from agent.model import ownership
from agent.model.provider_tree import ProviderTree
from tests.helpers.libvirt_fixtures import ROOT_UUID, laid_out, libvirt_driver, tree_view


def test_vfs_without_physnet_get_novas_provider_with_the_vf_class(tmp_path):
    driver = libvirt_driver(
        tmp_path,
        "numa-sriov",
        pci={"device_spec": ['{"devname": "ens2f0"}'], "report_in_placement": True},
        numa={"model_in_placement": True},
    )
    tree = laid_out(driver)
    view = tree_view(tree)
    # ens2f0 is PF 0000:af:00.0 with 4 VFs 8086:154c (the fixture's node devices).
    assert view["cn1_0000:AF:00.0"] == {
        "parent": "cn1",
        "inv": {"CUSTOM_PCI_8086_154C": (4, 0, 4, 1.0)},
        "traits": {"COMPUTE_MANAGED_PCI_DEVICE"},
    }
    assert "cn1_pci_0000_af_00_0" not in view


def test_only_a_compute_node_with_content_is_taken_over():
    tree = ProviderTree()
    tree.new_root("cn1", ROOT_UUID)
    assert ownership.to_adopt(tree, "cn1", "OWNER_NOVA") == []  # just created by the agent
    tree.update_traits("cn1", ["COMPUTE_NODE"])  # nova before OWNER_NOVA
    assert ownership.to_adopt(tree, "cn1", "OWNER_NOVA") == [("cn1", ROOT_UUID, "compute node")]
