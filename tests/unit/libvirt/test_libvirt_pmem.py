"""``[libvirt] pmem_namespaces``: CUSTOM_PMEM_NAMESPACE_* on the compute node, as nova 34.

nova: ``nova/virt/libvirt/driver.py`` ``_discover_vpmems`` (format, namespaces
on the host, each named once) and ``_update_provider_tree_for_vpmems`` (one
unit per namespace, ratio 1, reserved 0). The host's namespaces come from a
sysfs tree under ``[host_driver] sysfs_root`` (what ``ndctl list`` reads).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.model.exceptions import ConfigError
from tests.helpers.libvirt_fixtures import laid_out, libvirt_driver

OPTION = "128G:ns0|ns1|ns2,262144MB:ns3,MEDIUM:ns4"


def _sysfs(tmp_path: Path, namespaces: dict[str, str]) -> str:
    """``sys/bus/nd/devices/namespace0.N/{alt_name,mode}``; an unnamed one, as ndctl leaves it."""
    root = tmp_path / "sysfs"
    for i, (name, mode) in enumerate([*namespaces.items(), ("", "dax")]):
        ns = root / "sys/bus/nd/devices" / f"namespace0.{i}"
        ns.mkdir(parents=True)
        (ns / "alt_name").write_text(f"{name}\n")
        (ns / "mode").write_text(f"{mode}\n")
    (root / "sys/bus/nd/devices/region0").mkdir()  # not a namespace
    return str(root)


def _driver(tmp_path: Path, option: list[str], namespaces: dict[str, str]):
    return libvirt_driver(
        tmp_path,
        "small-host",
        libvirt={"pmem_namespaces": option},
        host_driver={"sysfs_root": _sysfs(tmp_path, namespaces)},
    )


def test_each_label_is_a_class_of_its_namespaces(tmp_path):
    driver = _driver(tmp_path, OPTION.split(","), {f"ns{i}": "dax" for i in range(6)})
    inventory = laid_out(driver).data("cn1").inventory
    got = {rc: (i.total, i.max_unit, i.reserved, i.allocation_ratio) for rc, i in inventory.items()}
    assert {rc: v for rc, v in got.items() if "PMEM" in rc} == {
        "CUSTOM_PMEM_NAMESPACE_128G": (3, 3, 0, 1.0),
        "CUSTOM_PMEM_NAMESPACE_262144MB": (1, 1, 0, 1.0),
        "CUSTOM_PMEM_NAMESPACE_MEDIUM": (1, 1, 0, 1.0),
    }


def test_no_option_no_pmem_class(tmp_path):
    inventory = laid_out(_driver(tmp_path, [], {"ns0": "dax"})).data("cn1").inventory
    assert not [rc for rc in inventory if "PMEM" in rc]


@pytest.mark.parametrize(
    ("option", "namespaces", "message"),
    [
        (["128G"], {}, "expected LABEL:NSNAME"),
        (["A:ns0", "B:ns0"], {"ns0": "dax"}, "ns0 is named twice"),
        (["A:ns9"], {"ns0": "dax"}, "ns9 is not on this host"),
        (["A:ns0"], {"ns0": "memory"}, "ns0 is in memory mode"),
    ],
)
def test_a_namespace_nova_would_refuse_is_refused(tmp_path, option, namespaces, message):
    with pytest.raises(ConfigError, match=message):
        _driver(tmp_path, option, namespaces).get_host_resources("cn1")
