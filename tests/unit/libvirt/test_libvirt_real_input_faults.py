"""Faults real libvirt documents showed (issue 13): each read right or refused clearly."""

from __future__ import annotations

import json
from pathlib import Path

from agent.cli import main as cli
from tests.helpers.libvirt_fixtures import laid_out, libvirt_driver, tree_view

NODE = """<node>
  <cpu><nodes>2</nodes><sockets>2</sockets><cores>2</cores><threads>1</threads>
    <active>4</active><mhz>2400</mhz><model>x86_64</model></cpu>
  <memory>{memory_kib}</memory>
  {devices}
</node>
"""

PCI = """<device><name>{name}</name><parent>computer</parent>
  <capability type='pci'><class>0x010802</class>
    <domain>0</domain><bus>{bus}</bus><slot>0</slot><function>0</function>
    <product id='0x0a54'/><vendor id='0x8086'/><numa node='0'/>
  </capability></device>"""

# Westmere-era libvirt: <cpu id=.../> without socket_id/core_id/siblings.
CAPS = """<capabilities><host>
  <cpu><arch>x86_64</arch><model>Westmere</model><vendor>Intel</vendor>
    <topology sockets='2' cores='2' threads='1'/><feature name='vmx'/></cpu>
  <topology><cells num='2'>
    <cell id='0'>{memory0}<cpus num='2'>{cpus0}</cpus></cell>
    <cell id='1'><memory unit='KiB'>2098175</memory><cpus num='2'>{cpus1}</cpus></cell>
  </cells></topology>
</host></capabilities>
"""


def _host(tmp_path: Path, devices: str = "", memory_kib: int = 4196350, **caps: str) -> dict:
    (tmp_path / "host.xml").write_text(NODE.format(memory_kib=memory_kib, devices=devices))
    fields = {
        "memory0": "<memory unit='KiB'>2098175</memory>",
        "cpus0": "<cpu id='0'/><cpu id='1'/>",
        "cpus1": "<cpu id='2'/><cpu id='3'/>",
        **caps,
    }
    (tmp_path / "caps.xml").write_text(CAPS.format(**fields))
    return {
        "connection_uri": f"test://{tmp_path / 'host.xml'}",
        "capabilities_file": str(tmp_path / "caps.xml"),
    }


def test_out_of_range_pci_bus_costs_that_device_only(tmp_path, capsys, caplog):
    devices = PCI.format(name="pci_0000_ff_00_0", bus=4294967295) + PCI.format(
        name="pci_0000_01_00_0", bus=1
    )
    lv = _host(tmp_path, devices)
    driver = libvirt_driver(tmp_path, None, libvirt=lv, pci={"device_spec": ['{"vendor_id": "*"}']})
    view = tree_view(laid_out(driver))
    assert "cn1_pci_0000_01_00_0" in view
    assert len(view) == 2
    bad = [w for w in driver.warnings if "pci_0000_ff_00_0" in w]
    assert len(bad) == 1 and "4294967295" in bad[0] and "out of range" in bad[0]

    conf = tmp_path / "agent.conf"
    conf.write_text(
        f"[DEFAULT]\nhost = cn1\nstate_path = {tmp_path}\n[compute]\ninstances_path = {tmp_path}\n"
        f'[pci]\ndevice_spec = {{"vendor_id": "*"}}\n'
        f"[libvirt]\nconnection_uri = {lv['connection_uri']}\n"
    )
    caplog.clear()
    code = cli.main(["discover", "--config", str(conf), "--driver", "libvirt", "--format", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    # The CLI logs to stderr (oslo.log): the operator sees the warning naming the device.
    assert "pci_0000_ff_00_0" in out.err and "out of range" in out.err
    names = {p["name"] for n in json.loads(out.out)["nodes"] for p in n["providers"]}
    assert "cn1_pci_0000_01_00_0" in names


def test_cpus_without_topology_attributes_are_online_in_their_cells(tmp_path):
    lv = _host(tmp_path)
    driver = libvirt_driver(tmp_path, None, libvirt=lv, numa={"model_in_placement": True})
    view = tree_view(laid_out(driver))
    assert view["cn1_NUMA0"]["inv"]["VCPU"][0] == 2
    assert view["cn1_NUMA1"]["inv"]["VCPU"][0] == 2
    flat = tree_view(laid_out(libvirt_driver(tmp_path, None, libvirt=lv)))
    assert flat["cn1"]["inv"]["VCPU"][0] == 4


def test_with_topology_attributes_a_cpu_without_them_is_offline(tmp_path):
    lv = _host(
        tmp_path,
        cpus0="<cpu id='0' socket_id='0' core_id='0' siblings='0'/><cpu id='1'/>",
        cpus1="<cpu id='2' socket_id='1' core_id='0' siblings='2'/>"
        "<cpu id='3' socket_id='1' core_id='1' siblings='3'/>",
    )
    driver = libvirt_driver(tmp_path, None, libvirt=lv, numa={"model_in_placement": True})
    view = tree_view(laid_out(driver))
    assert [view[f"cn1_NUMA{i}"]["inv"]["VCPU"][0] for i in (0, 1)] == [1, 2]


def test_a_cell_without_memory_keeps_the_cells_and_cpu_traits(tmp_path):
    lv = _host(tmp_path, memory0="", memory_kib=2098175)
    driver = libvirt_driver(tmp_path, None, libvirt=lv, numa={"model_in_placement": True})
    view = tree_view(laid_out(driver))
    assert "MEMORY_MB" not in view["cn1_NUMA0"]["inv"]
    assert view["cn1_NUMA0"]["inv"]["VCPU"][0] == 2
    assert view["cn1_NUMA1"]["inv"]["MEMORY_MB"][0] == 2048
    assert "HW_CPU_X86_VMX" in view["cn1"]["traits"]
    assert not driver.warnings


def test_a_garbled_cell_costs_that_cell_only(tmp_path):
    lv = _host(tmp_path, memory0="<memory unit='KiB'>lots</memory>")
    driver = libvirt_driver(tmp_path, None, libvirt=lv, numa={"model_in_placement": True})
    view = tree_view(laid_out(driver))
    assert "cn1_NUMA0" not in view and "cn1_NUMA1" in view
    assert "HW_CPU_X86_VMX" in view["cn1"]["traits"]
    assert [w for w in driver.warnings if "cell 0" in w and "lots" in w]


def test_cells_memory_sums_to_the_flat_total(tmp_path):
    # Both cells end in 1023 KiB: rounded down alone each would lose 1 MiB.
    lv = _host(tmp_path)
    numa = tree_view(
        laid_out(libvirt_driver(tmp_path, None, libvirt=lv, numa={"model_in_placement": True}))
    )
    flat = tree_view(laid_out(libvirt_driver(tmp_path, None, libvirt=lv)))
    cells = [numa[f"cn1_NUMA{i}"]["inv"]["MEMORY_MB"][0] for i in (0, 1)]
    assert sum(cells) == flat["cn1"]["inv"]["MEMORY_MB"][0] == 4196350 // 1024
