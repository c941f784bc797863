"""Connection behaviour and bad input, against the real libvirt library.

A connection that cannot be opened is a test:/// URI whose file does not exist
(yet); a lost connection is one closed under the driver (``virConnectClose``),
after which libvirt answers ``VIR_ERR_INVALID_CONN`` exactly as it does once
libvirtd has gone. Unparsable XML cannot come out of real libvirt, so the
parsers are given bad documents directly, and a garbled capabilities file goes
through the driver.
"""

from __future__ import annotations

import shutil

import libvirt
import pytest

from agent.model.exceptions import ConfigError
from drivers.libvirt import LibvirtDriver
from drivers.libvirt.capabilities import kernel_flag, parse_capabilities
from drivers.libvirt.connection import (
    LibvirtCallError,
    LibvirtConnection,
    LibvirtConnectionError,
    redact_uri,
)
from drivers.libvirt.domain import parse_domain
from drivers.libvirt.metadata import read_metadata
from drivers.libvirt.nodedev import assemble, parse_node_device
from drivers.libvirt.xmlutil import LibvirtXMLError, parse_xml
from tests.helpers.libvirt_fixtures import laid_out, libvirt_driver, make_conf, tree_view
from tests.helpers.paths import LIBVIRT


def test_open_failure_backs_off_then_next_cycle_retries(tmp_path, caplog):
    host = tmp_path / "host.xml"
    driver = libvirt_driver(
        tmp_path,
        None,
        libvirt={"connection_uri": f"test://{host}", "reconnect_attempts": 3},
    )
    with pytest.raises(LibvirtConnectionError) as exc:
        driver.get_host_resources("cn1")
    msg = str(exc.value)
    assert msg.startswith(f"libvirt test://{host}: virConnectOpen failed: ")
    assert "after 3 attempts" in msg
    assert caplog.text.count("cannot connect (attempt") == 2  # waits between 3 attempts
    shutil.copy(LIBVIRT / "small-host" / "host.xml", host)
    assert driver.get_host_resources("cn1").vcpus == 8  # the next cycle connects
    assert driver.connection.opened == 1


def test_lost_connection_fails_the_call_then_reconnects(tmp_path, caplog):
    driver = libvirt_driver(tmp_path, "small-host")
    stale = driver.connection.get()
    stale.close()
    with pytest.raises(LibvirtConnectionError) as exc:
        driver.connection.call("virConnectListAllDomains", stale.listAllDomains, 0)
    assert "virConnectListAllDomains failed" in str(exc.value)
    assert "the next cycle reconnects" in str(exc.value)
    assert exc.value.code == libvirt.VIR_ERR_INVALID_CONN
    assert len(driver.list_instances("cn1")) == 6  # a new connection
    assert driver.connection.opened == 2
    assert "reconnected" in caplog.text


def test_dead_connection_is_replaced_before_a_cycle(tmp_path):
    driver = libvirt_driver(tmp_path, "small-host")
    driver.connection.get().close()  # isAlive() now fails: reopened on the next get()
    assert driver.get_host_resources("cn1").memory_mb == 16384
    assert driver.connection.opened == 2


def test_call_errors_carry_uri_and_call(tmp_path):
    connection = LibvirtConnection(f"test://{LIBVIRT / 'small-host' / 'host.xml'}")
    conn = connection.get()
    with pytest.raises(LibvirtCallError) as exc:
        connection.call("virDomainLookupByName", conn.lookupByName, "no-such-vm")
    assert not isinstance(exc.value, LibvirtConnectionError)
    assert exc.value.code == libvirt.VIR_ERR_NO_DOMAIN
    assert str(exc.value).startswith(
        f"libvirt test://{LIBVIRT / 'small-host' / 'host.xml'}: virDomainLookupByName failed: "
    )
    assert connection.opened == 1  # a refused call does not drop the connection


def test_password_never_in_messages():
    assert redact_uri("qemu+tls://admin:s3cret@kvm1/system") == "qemu+tls://admin:***@kvm1/system"
    connection = LibvirtConnection("qemu+tcp://admin:s3cret@127.0.0.1:1/system", attempts=1)
    with pytest.raises(LibvirtConnectionError) as exc:
        connection.get()
    assert "s3cret" not in str(exc.value) and "admin:***@" in str(exc.value)


def test_capabilities_file_only_with_test_uri(tmp_path):
    conf = make_conf(tmp_path, "gpu-host", libvirt={"connection_uri": "qemu:///system"})
    with pytest.raises(ConfigError, match=r"\[libvirt\] capabilities_file is only for"):
        LibvirtDriver(conf)


def test_garbled_capabilities_warn_and_the_rest_is_reported(tmp_path):
    bad = tmp_path / "caps.xml"
    bad.write_text("<capabilities><host><cpu><arch>x86_64</arch></cpu><topology><cells>")
    driver = libvirt_driver(tmp_path, "numa-sriov", libvirt={"capabilities_file": str(bad)})
    tree = tree_view(laid_out(driver))
    assert tree["cn1"]["inv"]["VCPU"][0] == 32  # virNodeGetInfo still counts
    assert driver.warnings[0].startswith("host capabilities: unparsable XML from libvirt")
    assert driver.warnings[0].endswith("reporting without NUMA cells and CPU feature traits")


@pytest.mark.parametrize(
    ("parse", "what"),
    [
        (lambda t: parse_capabilities(t), "host capabilities"),
        (lambda t: parse_node_device(t, "pci_0000_af_00_0"), "node device pci_0000_af_00_0"),
        (lambda t: parse_domain(t, "domain vm-1 (1234)"), "domain vm-1 (1234)"),
    ],
)
def test_unparsable_xml_names_the_object(parse, what):
    with pytest.raises(LibvirtXMLError) as exc:
        parse("<device><name>x</name")
    assert str(exc.value).startswith(f"{what}: unparsable XML from libvirt")


def test_garbled_node_devices_and_orphan_vf():
    with pytest.raises(LibvirtXMLError, match="node device pci_0000_01_00_0: vendor id 'zz'"):
        parse_node_device(
            "<device><name>pci_0000_01_00_0</name><capability type='pci'><domain>0</domain>"
            "<bus>1</bus><slot>0</slot><function>0</function><product id='0x1'/>"
            "<vendor id='zz'/></capability></device>"
        )
    assert parse_node_device("<device><name>usb1</name><capability type='usb'/></device>") is None
    vf = parse_node_device(
        "<device><name>pci_0000_af_02_0</name><parent>pci_0000_af_00_0</parent>"
        "<capability type='pci'><domain>0</domain><bus>175</bus><slot>2</slot>"
        "<function>0</function><product id='0x154c'/><vendor id='0x8086'/>"
        "<capability type='phys_function'><address domain='0x0000' bus='0xaf' slot='0x00' "
        "function='0x0'/></capability></capability></device>"
    )
    warnings: list[str] = []
    devices = assemble([vf], warnings.append)
    assert devices.functions == {}
    assert warnings == [
        "node device pci_0000_af_02_0: its PF 0000:af:00.0 was not read; VF left out"
    ]


def test_capabilities_offline_cpus_and_kernel_names():
    caps = parse_capabilities(
        "<capabilities><host><cpu><arch>x86_64</arch><pages unit='KiB' size='4'/></cpu>"
        "<topology><cells num='1'><cell id='0'><memory unit='KiB'>1048576</memory>"
        "<pages unit='KiB' size='4'>262144</pages><pages unit='KiB' size='2048'>8</pages>"
        "<cpus num='3'><cpu id='0' socket_id='0' core_id='0' siblings='0-1'/>"
        "<cpu id='1' socket_id='0' core_id='0' siblings='0-1'/><cpu id='2'/></cpus>"
        "</cell></cells></topology></host></capabilities>"
    )
    (cell,) = caps.cells
    assert (cell.cpus, cell.offline_cpus, cell.max_siblings) == (
        frozenset({0, 1}),
        frozenset({2}),
        2,
    )
    assert dict(cell.pages) == {2048: 8} and cell.memory_kib == 1048576
    assert [kernel_flag(f) for f in ("sse4.2", "pclmuldq", "md-clear", "avx2")] == [
        "sse4_2",
        "pclmulqdq",
        "md_clear",
        "avx2",
    ]


def test_metadata_agent_first_then_nova_and_bad_amounts():
    nova = (
        "<nova:instance xmlns:nova='http://openstack.org/xmlns/libvirt/nova/1.0'>"
        "<nova:owner><nova:user uuid='u1'/><nova:project uuid='p1'/></nova:owner>"
        "</nova:instance>"
    )
    agent = (
        "<ca:instance xmlns:ca='http://compute-agent/xmlns/instance/1.0'>"
        "<ca:owner project='p2' user='u2'/><ca:flavor vcpus='-1'/></ca:instance>"
    )
    both = parse_xml(f"<domain><metadata>{nova}{agent}</metadata></domain>", "d")
    with pytest.raises(LibvirtXMLError, match="d: flavor vcpus -1 is negative"):
        read_metadata(both, "d")
    only_nova = read_metadata(parse_xml(f"<domain><metadata>{nova}</metadata></domain>", "d"), "d")
    assert only_nova is not None
    assert (only_nova.source, only_nova.project_id, only_nova.boot_from_volume) == (
        "nova",
        "p1",
        True,
    )
    assert read_metadata(parse_xml("<domain/>", "d"), "d") is None


def test_domain_root_disk_pinning_and_cells():
    d = parse_domain(
        "<domain><name>x</name><uuid>ABC</uuid><memory unit='KiB'>1025</memory>"
        "<vcpu>2</vcpu><cputune><vcpupin vcpu='0' cpuset='1'/><vcpupin vcpu='1' cpuset='2-3'/>"
        "</cputune><numatune><memnode cellid='0' nodeset='0'/><memnode cellid='1' "
        "nodeset='2'/></numatune><devices>"
        "<disk type='file' device='disk'><target dev='vda'/></disk>"
        "<disk type='volume' device='disk'><source pool='p' volume='v'/><target dev='vdb'/>"
        "<boot order='1'/></disk></devices></domain>"
    )
    assert (d.uuid, d.memory_mb, d.pinned, d.numa_cells) == ("abc", 2, False, (0, 2))
    assert d.root is not None and d.root.target == "vdb" and d.root.is_volume
    with pytest.raises(LibvirtXMLError, match=r"domain x \(abc\): no vcpu"):
        parse_domain("<domain><name>x</name><uuid>ABC</uuid></domain>")


def test_guest_numa_cells_and_nova_image_properties():
    d = parse_domain(
        "<domain><name>x</name><uuid>ABC</uuid><memory>2097152</memory><vcpu>4</vcpu>"
        "<numatune><memnode cellid='0' nodeset='1'/><memnode cellid='1' nodeset='0'/>"
        "</numatune><cpu><numa><cell id='1' cpus='1-3' memory='1536' unit='MiB'/>"
        "<cell id='0' cpus='0' memory='524288'/></numa></cpu></domain>"
    )
    assert [(c.id, sorted(c.cpus), c.memory_mb, sorted(c.host_cells)) for c in d.guest_cells] == [
        (0, [0], 512, [1]),
        (1, [1, 2, 3], 1536, [0]),
    ]
    with pytest.raises(LibvirtXMLError, match=r"domain x \(abc\): numa cell 0 memory"):
        parse_domain(
            "<domain><name>x</name><uuid>ABC</uuid><memory>1024</memory><vcpu>1</vcpu>"
            "<cpu><numa><cell id='0' cpus='0' memory='lots'/></numa></cpu></domain>"
        )
    nova = (
        "<nova:instance xmlns:nova='http://openstack.org/xmlns/libvirt/nova/1.1'>"
        "<nova:image uuid='i1'><nova:properties>"
        "<nova:property name='hw_cpu_realtime_mask'>^0-1</nova:property>"
        "</nova:properties></nova:image>"
        "<nova:owner><nova:user uuid='u1'/><nova:project uuid='p1'/></nova:owner>"
        "</nova:instance>"
    )
    meta = read_metadata(parse_xml(f"<domain><metadata>{nova}</metadata></domain>", "d"), "d")
    assert meta is not None and dict(meta.image_properties) == {"hw_cpu_realtime_mask": "^0-1"}
