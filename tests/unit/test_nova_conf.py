"""nova.conf read as nova 34 reads it (agent/conf/, drivers' options).

The table lists, for each resource-tracker option of nova 34 (nova/conf/*.py:
group, name, default), the value the agent reads when nova.conf does not set
it, and a nova.conf line with the value the agent then reads.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agent.conf import config as agent_config
from agent.conf import nova_conf
from agent.model.exceptions import ConfigError
from agent.shape.policy import policy_from_conf


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test sees the agent's once-per-process warnings as a new process would."""
    monkeypatch.setattr(nova_conf, "_warned", set())


DEVSTACK = Path(__file__).resolve().parents[1] / "fixtures" / "nova" / "devstack-nova.conf"


def write(tmp_path, text: str) -> str:
    path = tmp_path / "nova.conf"
    path.write_text(text)
    return str(path)


def read(conf, group: str, name: str):
    return getattr(conf if group == "DEFAULT" else conf[group], name)


# (group, nova name, nova default, a nova.conf value, what the agent reads for it)
TABLE = [
    ("DEFAULT", "host", None, "cn7", "cn7"),
    ("DEFAULT", "state_path", "/var/lib/nova", "/srv/n", "/srv/n"),
    ("DEFAULT", "instances_path", "$state_path/instances", "/srv/i", "/srv/i"),
    ("DEFAULT", "compute_driver", None, "libvirt.LibvirtDriver", "libvirt.LibvirtDriver"),
    ("DEFAULT", "update_resources_interval", 0, "30", 30),
    ("DEFAULT", "cpu_allocation_ratio", None, "2.0", 2.0),
    ("DEFAULT", "ram_allocation_ratio", None, "1.5", 1.5),
    ("DEFAULT", "disk_allocation_ratio", None, "1.2", 1.2),
    ("DEFAULT", "initial_cpu_allocation_ratio", 4.0, "8.0", 8.0),
    ("DEFAULT", "initial_ram_allocation_ratio", 1.0, "1.5", 1.5),
    ("DEFAULT", "initial_disk_allocation_ratio", 1.0, "2.0", 2.0),
    ("DEFAULT", "reserved_host_cpus", 0, "2", 2),
    ("DEFAULT", "reserved_host_memory_mb", 512, "4096", 4096),
    ("DEFAULT", "reserved_host_disk_mb", 0, "10240", 10240),
    ("DEFAULT", "force_raw_images", True, "false", False),
    ("compute", "cpu_dedicated_set", None, "4-7", "4-7"),
    ("compute", "cpu_shared_set", None, "0-3", "0-3"),
    ("compute", "resource_class_renames", [], "CUSTOM_A:CUSTOM_B", ["CUSTOM_A:CUSTOM_B"]),
    ("compute", "image_type_exclude_list", [], "iso,qcow2", ["iso", "qcow2"]),
    ("compute", "provider_config_location", "/etc/nova/provider_config/", "/srv/p", "/srv/p"),
    ("numa", "model_in_placement", False, "true", True),
    ("devices", "enabled_mdev_types", [], "nvidia-35", ["nvidia-35"]),
    ("pci", "device_spec", [], '{"vendor_id": "8086"}', ['{"vendor_id": "8086"}']),
    ("pci", "report_in_placement", False, "true", True),
    ("libvirt", "connection_uri", "qemu:///system", "qemu:///session", "qemu:///session"),
    ("libvirt", "virt_type", "kvm", "qemu", "qemu"),
    ("libvirt", "images_type", "default", "rbd", "rbd"),
    ("libvirt", "swtpm_enabled", False, "true", True),
    ("libvirt", "supported_tpm_secret_security", ["user", "host", "deployment"], "host", ["host"]),
    ("libvirt", "hw_machine_type", None, "x86_64=q35", ["x86_64=q35"]),
    ("libvirt", "pmem_namespaces", [], "128G:ns0|ns1", ["128G:ns0|ns1"]),
    ("workarounds", "reserve_disk_resource_for_image_cache", False, "true", True),
    ("image_cache", "subdirectory_name", "_base", "_base_10.0.0.5", "_base_10.0.0.5"),
    ("placement", "valid_interfaces", ["internal", "public"], "public", ["public"]),
    ("placement", "service_type", "placement", "placement", "placement"),
    ("placement", "region_name", None, "RegionTwo", "RegionTwo"),
    # Deprecated names nova still reads (oslo.config deprecated_opts).
    ("pci", "passthrough_whitelist", None, '{"vendor_id": "10de"}', None),
    ("devices", "enabled_vgpu_types", None, "nvidia-36", None),
    ("DEFAULT", "image_cache_subdirectory_name", None, "_cache", None),
]
ALIASES = {
    ("pci", "passthrough_whitelist"): ("pci", "device_spec", ['{"vendor_id": "10de"}']),
    ("devices", "enabled_vgpu_types"): ("devices", "enabled_mdev_types", ["nvidia-36"]),
    ("DEFAULT", "image_cache_subdirectory_name"): ("image_cache", "subdirectory_name", "_cache"),
}


DEVIATIONS = {("DEFAULT", "state_path"): "/var/lib/compute-agent"}
"""Defaults that differ from nova's on purpose (docs/configuration.md): the agent's own state."""


@pytest.mark.parametrize(("group", "name", "default", "line", "value"), TABLE)
def test_every_nova_option_by_nova_name_group_and_default(
    tmp_path, group, name, default, line, value
):
    if (group, name) in ALIASES:
        new_group, new_name, expected = ALIASES[(group, name)]
        conf = agent_config.load([write(tmp_path, f"[{group}]\n{name} = {line}\n")])
        assert read(conf, new_group, new_name) == expected
        return
    conf = agent_config.load([])
    expected = DEVIATIONS.get((group, name), default)
    if isinstance(expected, str):
        expected = expected.replace("$state_path", conf.state_path)
    if expected is not None:
        assert read(conf, group, name) == expected
    conf = agent_config.load([write(tmp_path, f"[{group}]\n{name} = {line}\n")])
    assert read(conf, group, name) == value


def test_a_ratio_of_zero_means_unset_as_in_nova(tmp_path):
    conf = agent_config.load([write(tmp_path, "[DEFAULT]\ncpu_allocation_ratio = 0.0\n")])
    assert agent_config.allocation_ratio(conf, "cpu") is None
    assert policy_from_conf(conf).cpu_allocation_ratio is None


def test_compute_driver_selects_the_libvirt_driver_and_refuses_others(tmp_path):
    conf = agent_config.load(
        [write(tmp_path, "[DEFAULT]\ncompute_driver = libvirt.LibvirtDriver\n")]
    )
    assert conf.compute.driver == "libvirt"
    both = "[DEFAULT]\ncompute_driver = libvirt.LibvirtDriver\n[compute]\ndriver = fake\n"
    assert agent_config.load([write(tmp_path, both)]).compute.driver == "fake"
    with pytest.raises(ConfigError, match=r"\[DEFAULT\] compute_driver = ironic.IronicDriver"):
        agent_config.load([write(tmp_path, "[DEFAULT]\ncompute_driver = ironic.IronicDriver\n")])


def test_update_resources_interval_sets_the_cycle_unless_update_interval_is_set(tmp_path):
    conf = agent_config.load([write(tmp_path, "[DEFAULT]\nupdate_resources_interval = 30\n")])
    assert conf.update_interval == 30
    text = "[DEFAULT]\nupdate_resources_interval = 30\nupdate_interval = 90\n"
    assert agent_config.load([write(tmp_path, text)]).update_interval == 90
    never = agent_config.load([write(tmp_path, "[DEFAULT]\nupdate_resources_interval = -1\n")])
    assert never.update_interval == 60


def test_mdev_groups_pin_gpus_to_types_with_their_class(tmp_path):
    text = (
        "[devices]\nenabled_mdev_types = nvidia-35,nvidia-36\n"
        "[mdev_nvidia-35]\ndevice_addresses = 0000:84:00.0,85:00.0\nmdev_class = CUSTOM_M60\n"
        "max_instances = 8\n"
    )
    policy = policy_from_conf(agent_config.load([write(tmp_path, text)]))
    assert policy.mdev_addresses == (
        ("nvidia-35", ("0000:84:00.0", "85:00.0")),
        ("nvidia-36", ()),
    )
    assert dict(policy.mdev_classes) == {"nvidia-35": "CUSTOM_M60", "nvidia-36": "VGPU"}
    assert policy.mdev_max_instances == (("nvidia-35", 8),)
    dup = text + "[mdev_nvidia-36]\ndevice_addresses = 0000:85:00.0\n"
    with pytest.raises(ConfigError, match="already listed for type nvidia-35"):
        agent_config.load([write(tmp_path, dup)])


def test_unknown_options_are_warned_once_and_novas_accepted_silently(tmp_path, caplog):
    text = (
        "[DEFAULT]\nmy_ip = 10.0.0.1\ntransport_url = rabbit://x\nreserved_host_memroy_mb = 1\n"
        "[libvirt]\ncpu_mode = none\n[keystone_authtoken]\nwww_authenticate_uri = http://k\n"
        "[numa]\nmodel_in_placment = true\n"
    )
    path = write(tmp_path, text)
    caplog.set_level(logging.WARNING, logger="agent.conf.nova_conf")
    agent_config.load([path])
    agent_config.load([path])
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2
    assert "[DEFAULT] reserved_host_memroy_mb" in warned[0]
    assert "[numa] model_in_placment" in warned[1]


def test_nova_options_that_change_placement_but_are_not_read_are_said(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="agent.conf.nova_conf")
    agent_config.load([write(tmp_path, "[libvirt]\ncpu_mode = custom\ncpu_models = Haswell\n")])
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "[libvirt] cpu_mode is set: read for Intel TDX (host-passthrough) only by the agent "
        "(with custom, nova reports the guest "
        "CPU model's features as CPU traits; the agent the host CPU's)",
        "[libvirt] cpu_models is set: not read by the agent (see [libvirt] cpu_mode)",
    ]


def test_nova_option_list_has_provenance_and_the_resource_tracker_options():
    _, any_option = nova_conf.nova_options()
    assert "placement" in any_option and "keystone_authtoken" in any_option
    for group, name in [
        ("DEFAULT", "compute_driver"),
        ("DEFAULT", "instances_path"),
        ("DEFAULT", "update_resources_interval"),
        ("pci", "passthrough_whitelist"),
        ("pci", "report_in_placement"),
        ("devices", "enabled_vgpu_types"),
        ("compute", "cpu_dedicated_set"),
        # new in nova 34.0.0 (the list is read from that release)
        ("compute", "update_resources_max_workers"),
        ("DEFAULT", "stale_share_access_reconcile_interval"),
        ("libvirt", "num_intel_tdx_guests"),
    ]:
        assert nova_conf.is_nova_option(group, name), (group, name)
    assert not nova_conf.is_nova_option("DEFAULT", "reserved_host_memroy_mb")
    assert "nova 34.0.0 (the installed package)" in nova_conf.NOVA_OPTIONS.read_text()


def test_devstack_nova_conf_is_read_as_nova_reads_it(caplog):
    caplog.set_level(logging.WARNING, logger="agent.conf.nova_conf")
    conf = agent_config.load([str(DEVSTACK)])
    # Every option there is nova's or the agent's: nothing said but oslo.config's own
    # notice of nova's renamed options (enabled_vgpu_types, passthrough_whitelist), which
    # nova logs too, once per process (so present or not depending on what ran before).
    others = [r for r in caplog.records if r.name != "oslo_config.cfg"]
    assert not others, [r.getMessage() for r in others]
    notices = [r.getMessage() for r in caplog.records if r.name == "oslo_config.cfg"]
    assert all(" is deprecated. Use option " in text for text in notices), notices
    assert conf.compute.driver == "libvirt"
    assert conf.instances_path == "/opt/stack/data/nova/instances"
    assert conf.update_interval == 30
    assert agent_config.allocation_ratio(conf, "cpu") is None
    assert conf.devices.enabled_mdev_types == ["nvidia-35"]
    assert conf["mdev_nvidia-35"].mdev_class == "CUSTOM_VGPU_M60"
    assert conf.pci.device_spec == ['{"vendor_id": "8086", "product_id": "0a54"}']
    assert conf.placement.auth_type == "password"
    assert conf.placement.valid_interfaces == ["internal", "public"]


def test_novas_intel_tdx_options_are_read_silently(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="agent.conf.nova_conf")
    text = "[libvirt]\ncpu_mode = host-passthrough\nnum_intel_tdx_guests = 4\n"
    conf = agent_config.load([write(tmp_path, text)])
    assert (conf.libvirt.cpu_mode, conf.libvirt.num_intel_tdx_guests) == ("host-passthrough", 4)
    assert caplog.records == []
