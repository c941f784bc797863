"""Configuration: nova's names and defaults; bad values refused at start, by name."""

from __future__ import annotations

import pytest

from agent.conf import catalog
from agent.conf import config as agent_config
from agent.model.exceptions import ConfigError


def write(tmp_path, text: str):
    path = tmp_path / "agent.conf"
    path.write_text(text)
    return str(path)


def test_defaults_follow_nova():
    conf = agent_config.load([])
    assert conf.update_interval == 60
    assert conf.reserved_host_memory_mb == 512
    assert conf.reserved_host_disk_mb == 0
    assert conf.reserved_host_cpus == 0
    assert conf.cpu_allocation_ratio is None
    assert conf.initial_cpu_allocation_ratio == 4.0
    assert conf.initial_ram_allocation_ratio == 1.0
    assert conf.initial_disk_allocation_ratio == 1.0
    assert conf.numa.model_in_placement is False
    assert conf.devices.enabled_mdev_types == []
    assert conf.host


def test_file_values_and_overrides(tmp_path):
    path = write(
        tmp_path,
        "[DEFAULT]\nhost = cn7\nupdate_interval = 30\ncpu_allocation_ratio = 2.5\n"
        "[numa]\nmodel_in_placement = true\n[compute]\ndriver = fake\n",
    )
    conf = agent_config.load([path], {"DEFAULT": {"update_interval": 45}})
    assert conf.host == "cn7"
    assert conf.update_interval == 45
    assert conf.cpu_allocation_ratio == 2.5
    assert conf.numa.model_in_placement is True
    assert conf.compute.driver == "fake"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[DEFAULT]\nupdate_interval = 0\n", "[DEFAULT] update_interval"),
        ("[DEFAULT]\nupdate_interval = soon\n", "[DEFAULT] update_interval"),
        ("[DEFAULT]\nreserved_host_memory_mb = -1\n", "[DEFAULT] reserved_host_memory_mb"),
        ("[DEFAULT]\ncpu_allocation_ratio = -1\n", "[DEFAULT] cpu_allocation_ratio"),
        ("[DEFAULT]\ninitial_ram_allocation_ratio = 0.0\n", "initial_ram_allocation_ratio"),
        ("[numa]\nmodel_in_placement = maybe\n", "[numa] model_in_placement"),
        ("[placement]\nauth_type = kerberos-magic\n", "[placement] auth_type = 'kerberos-magic'"),
    ],
)
def test_bad_value_is_refused_with_the_option_name(tmp_path, text, named):
    with pytest.raises(ConfigError) as err:
        agent_config.load([write(tmp_path, text)])
    assert named in str(err.value)


def test_an_available_auth_plugin_is_accepted(tmp_path):
    conf = agent_config.load([write(tmp_path, "[placement]\nauth_type = v3password\n")])
    assert agent_config.auth_plugin(conf) == "v3password"
    assert agent_config.auth_plugin(agent_config.load([])) is None


def test_missing_file_is_named(tmp_path):
    missing = str(tmp_path / "nope.conf")
    with pytest.raises(ConfigError) as err:
        agent_config.load([missing])
    assert missing in str(err.value)


def test_garbled_file_is_named(tmp_path):
    path = write(tmp_path, "[DEFAULT\nhost = x\n")
    with pytest.raises(ConfigError) as err:
        agent_config.load([path])
    assert path in str(err.value)


def test_unknown_override_is_refused():
    with pytest.raises(ConfigError) as err:
        agent_config.load([], {"compute": {"no_such_option": 1}})
    assert "[compute] no_such_option" in str(err.value)


def test_list_opts_covers_every_registered_option():
    conf = agent_config.new_conf()
    listed = {(g, o.dest) for g, opts in catalog.list_opts() for o in opts}
    assert ("DEFAULT", "reserved_host_memory_mb") in listed
    assert ("fake", "host_file") in listed
    for group, dest in listed:
        section = conf if group == "DEFAULT" else conf[group]
        assert hasattr(section, dest)
