"""CPU lists, CPU flags, CPU sets, device specs: the rules, and refusals at start."""

from __future__ import annotations

import pytest

from agent.conf import config
from agent.model.exceptions import ConfigError
from drivers.host import HostDriver
from drivers.host.cpu import cpu_flag_traits, split_cpus
from drivers.host.cpuset import format_cpu_set, parse_cpu_spec, parse_cpulist
from drivers.host.device_spec import parse_address, parse_device_spec
from drivers.host.pci import PciFunction
from tests.helpers.sysfs_fixtures import make_conf


def test_cpu_spec_syntax():
    assert parse_cpu_spec("0-3,^2,8") == {0, 1, 3, 8}
    assert parse_cpu_spec("^4-5, 0-7") == {0, 1, 2, 3, 6, 7}
    assert parse_cpu_spec("") == frozenset()
    assert parse_cpulist("0-7,16-23\n".strip()) == set(range(8)) | set(range(16, 24))
    assert format_cpu_set({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    for bad in ("a", "3-1", "1-", "^"):
        with pytest.raises(ValueError):
            parse_cpu_spec(bad)
    with pytest.raises(ValueError):
        parse_cpulist("0-3,^2")


def test_flag_traits_come_from_os_traits():
    traits = cpu_flag_traits(
        ["pni", "sse4_1", "avx512_vnni", "sha_ni", "pcid", "nosuchflag"], "GenuineIntel"
    )
    # pni is SSE3, but nova's map looks for "sse3" and clears the trait: nova's value.
    assert traits == {
        "HW_CPU_X86_SSE41",
        "HW_CPU_X86_AVX512VNNI",
        "HW_CPU_X86_SHA",
        "HW_CPU_X86_INTEL_PCID",
    }
    assert cpu_flag_traits(["pcid", "sev"], "AuthenticAMD") == {"HW_CPU_X86_AMD_SEV"}


def test_split_cpus_nova_rules():
    online = frozenset(range(8))
    assert split_cpus(online, None, None) == (online, frozenset())
    assert split_cpus(online, frozenset({4, 5}), None) == (frozenset(), {4, 5})
    assert split_cpus(online, frozenset({4}), frozenset({0, 1})) == ({0, 1}, {4})
    with pytest.raises(ConfigError, match=r"cpu_dedicated_set names CPUs 8-9 that are not online"):
        split_cpus(online, frozenset({8, 9}), None)
    with pytest.raises(ConfigError, match="overlap on CPUs 2"):
        split_cpus(online, frozenset({1, 2}), frozenset({2, 3}))


def test_bad_cpu_sets_refused_at_start(tmp_path):
    with pytest.raises(ConfigError, match=r"\[compute\] cpu_shared_set '0-x'"):
        HostDriver(make_conf(tmp_path, "no-numa", compute={"cpu_shared_set": "0-x"}))
    with pytest.raises(ConfigError, match="overlap"):
        HostDriver(
            make_conf(
                tmp_path, "no-numa", compute={"cpu_shared_set": "0-2", "cpu_dedicated_set": "2-3"}
            )
        )
    driver = HostDriver(make_conf(tmp_path, "no-numa", compute={"cpu_dedicated_set": "2-9"}))
    with pytest.raises(ConfigError, match="not online"):
        driver.get_host_resources("cn1")


def fn(address="0000:3b:00.0", vendor="8086", product="1572", netdevs=()):
    return PciFunction(address, vendor, product, "020000", netdevs=netdevs)


def test_address_patterns():
    assert parse_address("0000:3b:00.*").matches("0000:3b:00.1")
    assert not parse_address("0000:3b:00.*").matches("0000:3c:00.1")
    assert parse_address(":3b:00.").matches("0001:3b:00.5")
    assert parse_address("*:3B:*.1").matches("0000:3b:07.1")
    assert parse_address({"bus": "3[a-c]", "function": "[0-1]"}).matches("0000:3c:11.1")
    assert not parse_address({"bus": "3[a-c]"}).matches("0000:4c:11.1")


def test_device_spec_parse_and_match():
    (spec,) = parse_device_spec(
        '{"vendor_id": "8086", "product_id": "*", "address": "*:3b:00.*", '
        '"resource_class": "nic-pf", "traits": "fast,HW_NIC_SRIOV"}'
    )
    assert spec.matches(fn()) and not spec.matches(fn(vendor="15b3"))
    # As written: the layout makes them Placement's names (agent/shape/pci.py).
    assert spec.resource_class == "nic-pf"
    assert spec.traits == {"fast", "HW_NIC_SRIOV"}
    a, b = parse_device_spec('[{"devname": "ens1f0"}, {"vendor_id": "15B3"}]')
    assert a.matches(fn(netdevs=("ens1f0",))) and not a.matches(fn())
    assert b.matches(fn(vendor="15b3"))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{vendor_id: 8086}", "not valid JSON"),
        ('{"vendorid": "8086"}', "unknown key(s) ['vendorid']"),
        ('{"vendor_id": "80861"}', "is not up to 4 hex digits"),
        ('{"address": "0000:3b:00.9"}', "address function '9' is larger than 7"),
        ('{"address": "1:2:3:4.0"}', "too many ':'"),
        ('{"address": "*:3b:00.*", "devname": "eth0"}', "cannot both be given"),
        ('{"address": {"bus": "("}}', "is not a regular expression"),
        ('{"trusted": "maybe"}', "trusted must be true or false"),
        ('{"traits": 5}', "traits must be"),
        ("[]", "empty list"),
        ('"8086"', "must be a JSON object"),
    ],
)
def test_bad_device_spec_refused_at_start(tmp_path, text, reason):
    conf = make_conf(tmp_path, "no-numa", pci={"device_spec": [text]})
    with pytest.raises(ConfigError) as err:
        HostDriver(conf)
    assert f"[pci] device_spec {text}: " in str(err.value)
    assert reason in str(err.value)


def test_options_registered_without_shadowing_default_host(tmp_path):
    conf = config.load([], {"DEFAULT": {"host": "cn9", "state_path": str(tmp_path)}})
    assert conf.host == "cn9"  # a [host] group would have shadowed this
    assert conf.host_driver.sysfs_root == "/"
    assert conf.instances_path == f"{tmp_path}/instances"
    assert conf.pci.device_spec == [] and conf.compute.shared_storage is False


def test_virtualisation_flags_give_generic_and_vendor_traits_as_nova():
    """nova/virt/libvirt/utils.py CPU_TRAITS_MAPPING: vmx and svm map to two traits each."""
    assert cpu_flag_traits(["vmx"], "GenuineIntel") == {
        "HW_CPU_X86_VMX",
        "HW_CPU_X86_INTEL_VMX",
    }
    assert cpu_flag_traits(["svm"], "AuthenticAMD") == {"HW_CPU_X86_SVM", "HW_CPU_X86_AMD_SVM"}
    assert cpu_flag_traits(["vmx"]) == {"HW_CPU_X86_VMX", "HW_CPU_X86_INTEL_VMX"}


def test_arch_trait_from_cpuinfo():
    from drivers.host.arch import arch_traits

    assert arch_traits("GenuineIntel", ["fpu", "lm", "vmx"]) == {"HW_ARCH_X86_64"}
    assert arch_traits("AuthenticAMD", ["fpu"]) == {"HW_ARCH_I686"}
    assert arch_traits("", []) == frozenset()
