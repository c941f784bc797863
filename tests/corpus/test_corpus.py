"""The corpus of public host descriptions: golden output, capture identity, fuzzing.

* every host's ``compute-agent discover`` output equals its golden file
  (``expected/<name>.json``), and agrees with the counts its description
  states (``expect``: reviewed by hand against the source);
* ``capture`` then ``discover`` gives the same records on every sysfs host;
* any one file of a host truncated, emptied, garbled or made unreadable
  costs at most one warning naming it (or exit 2 with one line), never a
  traceback, and never changes what the other devices report.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import libvirt
import pytest

from agent.conf import config as agent_config
from agent.model.exceptions import ConfigError
from drivers.host.capture import capture
from drivers.host.device_spec import parse_device_specs
from drivers.host.discovery import Discovery, discover_host
from drivers.host.settings import HostSettings
from drivers.host.sysfs import SysfsError
from drivers.libvirt import LibvirtDriver
from drivers.libvirt.nodedev import (
    HostDevices,
    MdevNodeDevice,
    NetNodeDevice,
    NodeDevice,
    PciNodeDevice,
    parse_node_device,
)
from drivers.libvirt.xmlutil import LibvirtXMLError
from drivers.records import HostResources
from tests.corpus.build import Host, build, load_hosts
from tests.corpus.golden import DEFAULT_SPECS, dumps, mdev_type_ids, observe, write_conf
from tests.corpus.regen import README, with_table

HOSTS = load_hosts()
SYSFS_HOSTS = [h for h in HOSTS if h.kind in ("sysfs", "capture")]
LIBVIRT_HOSTS = [h for h in HOSTS if h.kind == "libvirt"]
REGEN = "python -m tests.corpus.regen"


def _ids(hosts: list[Host]) -> list[str]:
    return [h.name for h in hosts]


def test_the_corpus_is_large_and_every_host_has_a_golden_file():
    assert len(HOSTS) >= 40
    assert {h.kind for h in HOSTS} >= {"sysfs", "libvirt"}
    missing = [h.name for h in HOSTS if not h.expected.exists()]
    assert not missing, f"no golden file for {missing}: run {REGEN} {' '.join(missing)}"
    stray = {p.stem for p in HOSTS[0].expected.parent.glob("*.json")} - {h.name for h in HOSTS}
    assert not stray, f"golden files without a host: {sorted(stray)}"
    for h in HOSTS:
        if h.kind != "capture":
            source = h.data.get("source") or {}
            assert {"project", "path", "commit", "licence"} <= set(source), h.name
    readme = README.read_text(encoding="utf-8")
    assert with_table(readme) == readme, f"README.md's table is stale: run {REGEN} --readme"


@pytest.mark.parametrize("host", HOSTS, ids=_ids(HOSTS))
def test_discover_output_is_the_golden_file(host, tmp_path):
    observed = observe(host, tmp_path)
    expected = json.loads(host.expected.read_text(encoding="utf-8"))
    assert observed == expected, (
        f"{host.name}: discover differs from {host.expected.name}; if the change is right, "
        f"run {REGEN} {host.name} and review the diff"
    )
    _check_against_description(host, observed)
    assert dumps(observed) == host.expected.read_text(encoding="utf-8")


def _totals(inventories: dict[str, Any]) -> dict[str, int]:
    return {rc: inv["total"] for rc, inv in inventories.items()}


def _check_against_description(host: Host, observed: dict[str, Any]) -> None:
    """The counts a person read off the source (``expect``) and the invariants of any host."""
    expect = dict(host.data.get("expect") or {})
    if host.kind != "capture":
        needed = {"exit"} if "exit" in expect else {"vcpu", "memory_mb", "devices", "warnings"}
        assert needed <= set(expect), f"{host.name}: 'expect' lacks {needed - set(expect)}"
        expect.setdefault("cells", {})  # no cells stated: none expected
    if "exit" in expect:
        assert observed["exit"] == expect["exit"]
        return
    assert observed["exit"] == 0
    providers = observed["providers"]
    flat = _totals(observed["flat"])
    cells = {n: p for n, p in providers.items() if re.fullmatch(r"cn1_NUMA\d+", n)}
    devices = {
        n[len("cn1_pci_") :]: _totals(p["inventories"])
        for n, p in providers.items()
        if "_pci_" in n
    }
    if "vcpu" in expect:
        assert flat.get("VCPU", 0) == expect["vcpu"]
    if "memory_mb" in expect:
        assert flat.get("MEMORY_MB", 0) == expect["memory_mb"]
    if "cells" in expect:
        got = {
            int(n[len("cn1_NUMA") :]): [
                _totals(p["inventories"]).get("VCPU", 0),
                _totals(p["inventories"]).get("MEMORY_MB", 0),
            ]
            for n, p in cells.items()
        }
        assert got == {int(k): v for k, v in expect["cells"].items()}
    if "devices" in expect:
        assert devices == expect["devices"]
    if "warnings" in expect:
        assert len(observed["warnings"]) == expect["warnings"], observed["warnings"]
    if "traits" in expect:
        assert set(expect["traits"]) <= set(providers["cn1"]["traits"])
    # Invariants: with every CPU and all memory in cells, the cells add up to the flat host.
    if cells and expect.get("cells_cover_host", True):
        cell_totals = [_totals(p["inventories"]) for p in cells.values()]
        assert sum(t.get("VCPU", 0) for t in cell_totals) == flat.get("VCPU", 0)
        assert sum(t.get("MEMORY_MB", 0) for t in cell_totals) == flat.get("MEMORY_MB", 0)


# -- capture -> discover is the identity -----------------------------------------


def _settings(host: Host, root: Path, tmp_path: Path) -> HostSettings:
    config = host.config
    return HostSettings(
        nodename="cn1",
        sysfs_root=str(root),
        instances_path=str(tmp_path / "instances"),
        shared_storage=True,
        specs=parse_device_specs(config.get("device_spec", DEFAULT_SPECS)),
        enabled_mdev_types=tuple(config.get("enabled_mdev_types", mdev_type_ids(host))),
    )


def _shape(warnings: tuple[str, ...], root: Path) -> list[tuple[str, str]]:
    """Each warning's path (below the root) and consequence; the reason may differ."""
    named = [w.replace(str(root), "<root>") for w in warnings]
    return sorted((w.split(": ")[0], w.rsplit("; ", 1)[-1]) for w in named)


@pytest.mark.parametrize("host", SYSFS_HOSTS, ids=_ids(SYSFS_HOSTS))
def test_capture_then_discover_gives_the_same_records(host, tmp_path):
    root = build(host, tmp_path / "host")
    settings = _settings(host, root, tmp_path)
    try:
        original = discover_host(settings)
    except SysfsError:
        with pytest.raises(SysfsError):
            capture(settings, tmp_path / "cap")
        return
    result = capture(settings, tmp_path / "cap")
    replay = discover_host(replace(settings, sysfs_root=str(tmp_path / "cap")))
    assert result.discovery.resources == original.resources
    assert replay.resources == original.resources
    assert replay.functions == original.functions
    assert _shape(replay.warnings, tmp_path / "cap") == _shape(original.warnings, root)


# -- fuzzing: one file at a time ---------------------------------------------------

FILES_PER_HOST = 6
"""Files (or links) mutated per sysfs host besides :data:`ALWAYS`: a deterministic
sample (seeded by the host's name), so the suite stays short."""
ALWAYS = ("proc/cpuinfo", "proc/meminfo", "sys/devices/system/cpu/online")
"""Files every host's fuzzing covers: the CPU features, the memory, the online CPUs."""


def _garble(path: Path) -> None:
    path.write_bytes(b"\xff\xfe\x00garbled\x80\n")


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _unreadable(path: Path) -> None:
    path.unlink()
    os.symlink(path.name, path)  # ELOOP: unreadable even for root


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _retarget(path: Path) -> None:
    path.unlink()
    os.symlink("../nowhere/not-a-name!", path)


CAPTURED = frozenset({"garbled", "unreadable", "directory"})
"""Mutations whose host is also captured and replayed: those a capture must carry
as something other than plain text (truncated and emptied files are plain text)."""

FILE_MUTATIONS: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate,
    "emptied": _empty,
    "garbled": _garble,
    "unreadable": _unreadable,
    "directory": _directory,
}
LINK_MUTATIONS: dict[str, Callable[[Path], None]] = {
    "garbled": _retarget,
    "unreadable": _unreadable,
    "directory": _directory,
}


@contextmanager
def _mutated(path: Path, mutate: Callable[[Path], None]) -> Iterator[None]:
    link = os.readlink(path) if path.is_symlink() else None
    data = None if link is not None else path.read_bytes()
    mutate(path)
    try:
        yield
    finally:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        if link is not None:
            os.symlink(link, path)
        else:
            assert data is not None
            path.write_bytes(data)


def _sample(host: Host, root: Path) -> list[str]:
    paths = sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_symlink() or p.is_file()
    )
    always = [p for p in ALWAYS if p in paths]
    rest = [p for p in paths if p not in always]
    picked = random.Random(host.name).sample(rest, min(FILES_PER_HOST, len(rest)))
    return always + sorted(picked)


def _device_records(res: HostResources) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rec in (*res.pci_devices, *res.sriov_pfs, *res.gpus):
        out[f"{type(rec).__name__} {rec.address}"] = rec
    return out


def _owners(rel: str, base: Discovery) -> set[str]:
    """PCI addresses whose report may change when ``rel`` is mutated: its device and kin."""
    m = re.match(r"sys/(?:bus/pci/devices|class/mdev_bus)/([^/]+)", rel)
    owners: set[str] = set()
    if m:
        owners.add(m[1])
    m = re.match(r"sys/bus/mdev/devices/([^/]+)", rel)
    if m:
        owners.update(
            g.address for g in base.resources.gpus if any(x.uuid == m[1] for x in g.mdevs)
        )
    for address in list(owners):
        fn = base.functions.get(address)
        if fn is not None:
            owners.update(fn.vf_addresses)
            if fn.physfn:
                owners.add(fn.physfn)
    return owners


@pytest.mark.parametrize("host", SYSFS_HOSTS, ids=_ids(SYSFS_HOSTS))
def test_one_bad_sysfs_file_costs_at_most_one_warning(host, tmp_path):
    root = build(host, tmp_path / "host")
    settings = _settings(host, root, tmp_path)
    try:
        base = discover_host(settings)
    except SysfsError:
        return  # a host that cannot be read at all: its golden file holds exit 2
    before = set(base.warnings)
    for rel in _sample(host, root):
        path = root / rel
        mutations = LINK_MUTATIONS if path.is_symlink() else FILE_MUTATIONS
        for kind, mutate in mutations.items():
            with _mutated(path, mutate):
                try:
                    got = discover_host(settings)
                except SysfsError as exc:
                    # The host itself cannot be read: exit 2 with one line naming a path.
                    assert "\n" not in str(exc) and str(root) in str(exc), (rel, kind, exc)
                    continue
                if kind in CAPTURED:
                    # The mutated host, captured, replays to the same records.
                    cap = tmp_path / f"cap-{rel.replace('/', '_')}-{kind}"
                    capture(settings, cap)
                    replay = discover_host(replace(settings, sysfs_root=str(cap)))
                    assert replay.resources == got.resources, (rel, kind)
                    assert replay.functions == got.functions, (rel, kind)
            new = set(got.warnings) - before
            assert len(new) <= 1, (rel, kind, new)
            assert all(str(path) in w for w in new), (rel, kind, new)
            owners = _owners(rel, base)
            for key, rec in _device_records(base.resources).items():
                if rec.address not in owners:
                    assert _device_records(got.resources).get(key) == rec, (rel, kind, key)


class _BadDevice:
    """A listed node device whose XML comes back mutated (or not at all)."""

    def __init__(self, dev: libvirt.virNodeDevice, text: str | None) -> None:
        self._dev = dev
        self._text = text

    def name(self) -> str:
        return self._dev.name()

    def XMLDesc(self, flags: int = 0) -> str:
        if self._text is None:
            raise libvirt.libvirtError("Input/output error reading the device")
        return self._text

    def isActive(self) -> int:
        return self._dev.isActive()


def _parsed(dev: libvirt.virNodeDevice) -> NodeDevice | None:
    try:
        return parse_node_device(dev.XMLDesc(0), dev.name())
    except LibvirtXMLError:
        return None  # already left out in the baseline


def _kin(base: HostDevices, device: NodeDevice | None) -> set[str]:
    """PCI addresses whose record may change when ``device``'s document is bad."""
    if isinstance(device, PciNodeDevice):
        owner: str | None = device.function.address
    elif isinstance(device, (MdevNodeDevice, NetNodeDevice)):
        parent = device.parent.removeprefix("pci_").split("_")
        owner = f"{parent[0]}:{parent[1]}:{parent[2]}.{parent[3]}" if len(parent) == 4 else None
    else:
        owner = None
    kin = {owner} if owner else set()
    fn = base.functions.get(owner) if owner else None
    if fn is not None:
        kin.update(fn.vf_addresses)
        kin.update({fn.physfn} - {None})
    return kin


def _xml_mutations(text: str) -> dict[str, str | None]:
    return {
        "truncated": text[: len(text) // 2],
        "emptied": "",
        "garbled": re.sub(r"[0-9]", "g", text),
        "unreadable": None,
    }


def _libvirt_driver(host: Host, tmp_path: Path) -> LibvirtDriver:
    built = build(host, tmp_path / "host")
    conf = write_conf(host, built, tmp_path, numa=True)
    return LibvirtDriver(agent_config.load([str(conf)], {}))


@pytest.mark.parametrize("host", LIBVIRT_HOSTS, ids=_ids(LIBVIRT_HOSTS))
def test_one_bad_libvirt_document_costs_at_most_one_warning(host, tmp_path):
    driver = _libvirt_driver(host, tmp_path)
    listed = driver.host.list_node_devices()
    base = driver.host.read_node_devices(listed)
    before = set(driver.warnings)
    names = sorted(d.name() for d in listed)
    originals = {d.name(): _parsed(d) for d in listed}
    for name in random.Random(host.name).sample(names, min(3, len(names))):
        index = next(i for i, d in enumerate(listed) if d.name() == name)
        for kind, text in _xml_mutations(listed[index].XMLDesc(0)).items():
            driver.warnings = []
            mutated = [*listed[:index], _BadDevice(listed[index], text), *listed[index + 1 :]]
            got = driver.host.read_node_devices(mutated)
            new = set(driver.warnings) - before
            assert len(new) <= 1 and all(name in w for w in new), (name, kind, new)
            kin = _kin(base, originals[name])
            for address, fn in base.functions.items():
                if address not in kin:
                    assert got.functions.get(address) == fn, (name, kind, address)
    caps = Path(driver.host.capabilities_file) if driver.host.capabilities_file else None
    if caps is None:
        return
    whole = driver.get_host_resources("cn1")
    before = set(driver.warnings)
    for kind, mutate in FILE_MUTATIONS.items():
        with _mutated(caps, mutate):
            try:
                res = driver.get_host_resources("cn1")
            except ConfigError as exc:
                # The file itself cannot be opened: exit 2, one line naming it.
                assert "\n" not in str(exc) and str(caps) in str(exc), (kind, exc)
                continue
        new = set(driver.warnings) - before
        assert len(new) <= 1 and all("capabilities" in w for w in new), (kind, new)
        assert _device_records(res) == _device_records(whole), kind


def test_adding_a_capture_writes_its_golden_file(tmp_path, monkeypatch, capsys):
    from tests.corpus import build as build_module
    from tests.corpus import regen

    host = next(h for h in SYSFS_HOSTS if h.name == "sysfs-nova-i350-pf-four-vfs")
    root = build(host, tmp_path / "machine")
    capture(_settings(host, root, tmp_path), tmp_path / "cap")
    for module in (build_module, regen):
        monkeypatch.setattr(module, "CAPTURES", tmp_path / "captures")
        monkeypatch.setattr(module, "EXPECTED", tmp_path / "expected")
    monkeypatch.setattr(build_module, "HOSTS", tmp_path / "hosts")
    (tmp_path / "captures").mkdir()
    (tmp_path / "hosts").mkdir()
    assert regen.main(["--add", str(tmp_path / "cap"), "mine"]) == 0
    assert "+++ b/mine.json" in capsys.readouterr().out
    golden = json.loads((tmp_path / "expected/mine.json").read_text())
    # The capture carries no [pci] config: the default spec offers the PF's VFs.
    assert golden["providers"]["cn1_pci_0000_04_00_3"]["inventories"]["SRIOV_NET_VF"]["total"] == 4
    assert regen.main(["--check"]) == 0
    assert regen.main(["--add", str(tmp_path / "cap"), "mine"]) == 2
