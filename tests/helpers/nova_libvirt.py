"""nova 34's own libvirt driver on nova's fakelibvirt: the judge of what a libvirt host reports.

Run as a separate process (``python -m tests.helpers.nova_libvirt report|fixture ...``):
nova's ``LibvirtFixture`` patches process-wide state (``os.uname``, the libvirt module
of nova's driver, nova's global ``CONF``), so it never runs inside pytest's process.

* ``report SCENARIO INSTANCES_PATH LIBVIRT_VERSION`` prints, as JSON, ``{provider name:
  {"inventory": {rc: fields}, "traits": [...]}}``: the provider tree after nova's
  ``LibvirtDriver.update_provider_tree`` and the traits nova's resource tracker adds
  (``ResourceTracker._get_traits``: the driver's capability traits, ``COMPUTE_NODE``,
  ``OWNER_NOVA``) and, with ``[pci] report_in_placement``, its PCI-in-placement
  providers (``pci_placement_translator.update_provider_tree_for_pci`` on nova's
  ``PciDevTracker`` fed with the driver's PCI devices, as ``_update_to_placement``
  does), for :data:`NODENAME`, with fakelibvirt answering ``getLibVersion``
  with LIBVIRT_VERSION (``major * 1_000_000 + minor * 1000 + micro``): the version of
  the libvirt whose test driver the agent reads, so both see one libvirt (nova's
  version-gated traits).
* ``fixture SCENARIO DIR`` writes what the same fakelibvirt connection serves, for the
  agent's libvirt driver on libvirt's test driver (``tests/fixtures/libvirt/`` and the
  scenario's :attr:`Scenario.fixture`):
  ``capabilities.xml`` (``getCapabilities``), ``domcapabilities.xml``
  (``getDomainCapabilities`` for the host's architecture, kvm, no machine type) and
  ``host.xml`` (``getInfo`` as the test driver's ``<cpu>`` and ``<memory>``, each
  ``listAllDevices`` node device's ``XMLDesc``), each file naming its source.

The hosts (:data:`SCENARIOS`; :data:`HOSTS` adds more for tests/helpers/nova_compute.py):
:data:`HOST` (nova's ``HostInfo``: two NUMA cells, two cores of two threads each; its
memory, 16780000, is what nova reads as MiB from ``getInfo``) with, in ``vgpu``, two
mdev-capable GPUs and ``[devices] enabled_mdev_types = nvidia-11``; in ``pci``, two whole
PCI devices and a PF with two VFs,
``[pci] device_spec`` offering the devices and the VFs, ``report_in_placement = true``;
in ``pf-whole``, a PF with two VFs and a spec naming the PF's own ids (nova: one whole
type-PF device), with a resource class and traits written in lower case; in
``remote-managed``, two cards as nova's RemoteManagedServersTest adds them, VFs tagged
``remote_managed``, one PF with a VPD serial number (its VFs offered by nova's fallback
to the PF's VPD), one without (its VFs dropped); in ``live-migratable``,
the ``pci`` host with a ``live_migratable`` tag ("false") on this libvirt, older than 10.0.0
(``report`` prints ``{"refused": why}`` when nova's ``init_host`` refuses);
in ``provider-config``, the ``vgpu`` host with a provider config file (nova's
``_merge_provider_configs`` runs after the PCI step, as in ``_update_to_placement``);
in ``tdx``, the ``vgpu`` host offering Intel TDX: fakelibvirt's domain capabilities with
``<tdx supported='yes'/>`` (its ``_domain_capability_features_with_TDX``), ``[libvirt]
cpu_mode = host-passthrough`` and ``num_intel_tdx_guests = 16``, and no misc cgroup
capacity file on nova's side (``MISC_CONTROL_GROUP_CAPACITY_FILE`` pointed at a path
that does not exist; the agent uses the option whatever its host's cgroup says).
Disk: nova's ``get_fs_info`` of the instances path given (the fixture stubs it; the
real function is put back), so nova and the agent measure the same file system.

nova's fixtures package imports testtools in its ``__init__``; only its ``libvirt`` and
``libvirt_data`` modules are needed, loaded here without that ``__init__``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

NODENAME = "compute1"
HOST = {"cpu_nodes": 2, "cpu_sockets": 1, "cpu_cores": 2, "cpu_threads": 2}
SOURCE = "nova 34.0.0 nova/tests/fixtures/libvirt.py (fakelibvirt), tests/helpers/nova_libvirt.py"


@dataclass(frozen=True)
class Scenario:
    """One host given to both drivers.

    Attributes:
        fixture: the agent's fixture directory under tests/fixtures/libvirt.
        pci: ``HostPCIDevicesInfo`` arguments (nova's fakelibvirt).
        options: ``{group: {option: value}}`` set in nova's and in the agent's
            configuration alike (the agent reads nova's option names).
        tdx: fakelibvirt's domain capabilities offer Intel TDX.
        sev: fakelibvirt's domain capabilities offer AMD SEV
            (``_domain_capability_features_with_SEV``: 100 guests) and nova's
            ``AmdSevFixture`` says the kernel supports it; the agent reads the kernel's
            ``kvm_amd`` parameters from the fixture's ``sysfs`` (``[host_driver] sysfs_root``).
        vtpm: fakelibvirt's domain capabilities offer a TPM (``_domain_capability_tpm_supported``)
            and nova's ``_check_vtpm_support`` (swtpm binaries, the tss user) is patched
            out, as nova's ``VTPMServersTest`` does.
        devices: more PCI devices, as ``HostPCIDevicesInfo.add_device`` arguments.
        provider_config: a provider config file (nova's schema 1.0), written to
            :func:`provider_config_dir` and read by both sides (``[compute]
            provider_config_location``).
    """

    fixture: str
    pci: dict[str, int]
    options: dict[str, dict[str, Any]]
    tdx: bool = False
    sev: bool = False
    vtpm: bool = False
    devices: tuple[dict[str, Any], ...] = ()
    provider_config: str = ""


PROVIDER_CONFIG = """\
meta:
  schema_version: '1.0'
providers:
  - identification:
      uuid: $COMPUTE_NODE
    inventories:
      additional:
        - CUSTOM_LICENSE_WINDOWS:
            total: 8
            reserved: 1
            max_unit: 4
    traits:
      additional:
        - CUSTOM_SITE_PARIS
  - identification:
      name: compute1_pci_0000_81_01_0
    traits:
      additional:
        - CUSTOM_GOLD_GPU
"""
"""Inventory and a trait on the compute node, a trait on one GPU by its name."""


def _card(bus: int, pf: str, vf: str, serial: str | None) -> tuple[dict[str, Any], ...]:
    """A PF at ``bus`` and its 4 VFs, as nova's RemoteManagedServersTest adds them
    (nova/tests/functional/libvirt/test_pci_sriov_servers.py); the PF's VPD has
    ``serial`` (none when None), the VFs have no VPD of their own."""
    common = {"vend_id": "15b3", "vend_name": "Mellanox Technologies", "numa_node": 0}
    vpd = {"name": "BlueField", "readonly": {"serial_number": serial}} if serial else None
    first = {"dev_type": "PF", "bus": bus, "slot": 0, "function": 0, "iommu_group": bus}
    out = [{**first, **common, "vf_ratio": 4, "prod_id": pf, "vpd_fields": vpd}]
    for idx in range(4):
        out.append(
            {
                **common,
                **{"dev_type": "VF", "bus": bus, "slot": 0, "function": idx + 1},
                **{"iommu_group": bus + idx + 1, "vf_ratio": 4, "parent": (bus, 0, 0)},
                "prod_id": vf,
            }
        )
    return tuple(out)


REMOTE_MANAGED_CARDS = (
    *_card(0x81, "a2dc", "1021", "MT0000X00001"),  # the PF's VPD serves its VFs (nova's fallback)
    *_card(0x82, "a2d6", "101e", None),  # no serial anywhere: nova drops the VFs
)

SCENARIOS = {
    "vgpu": Scenario(
        "nova-fakelibvirt",
        {"num_pci": 0, "num_pfs": 0, "num_vfs": 0, "num_mdevcap": 2},
        {"devices": {"enabled_mdev_types": ["nvidia-11"]}},
    ),
    "pci": Scenario(
        "nova-fakelibvirt-pci",
        {"num_pci": 2, "num_pfs": 1, "num_vfs": 2},
        {
            "pci": {
                "device_spec": [
                    json.dumps({"vendor_id": "8086", "product_id": "1533"}),
                    json.dumps({"vendor_id": "8086", "product_id": "1515"}),
                ],
                "report_in_placement": True,
            }
        },
    ),
    "pf-whole": Scenario(
        "nova-fakelibvirt-pf-whole",
        {"num_pci": 0, "num_pfs": 1, "num_vfs": 2},
        {
            "pci": {
                # The PF's own ids (fakelibvirt's PF_PROD_ID), not its VFs' (1515); names
                # nova normalises its own way (pci_placement_translator._normalize_*).
                "device_spec": [
                    json.dumps(
                        {
                            "vendor_id": "8086",
                            "product_id": "1528",
                            "resource_class": "pci_device",
                            "traits": "gold,custom_silver,HW_NIC_SRIOV,hw_nic_sriov_trusted",
                        }
                    )
                ],
                "report_in_placement": True,
            }
        },
    ),
    "remote-managed": Scenario(
        "nova-fakelibvirt-remote-managed",
        {"num_pci": 0, "num_pfs": 0, "num_vfs": 0},
        {
            "pci": {
                "device_spec": [
                    json.dumps({"vendor_id": "15b3", "product_id": p, "remote_managed": "true"})
                    for p in ("1021", "101e")
                ],
                "report_in_placement": True,
            }
        },
        devices=(*REMOTE_MANAGED_CARDS,),
    ),
    "live-migratable": Scenario(
        "nova-fakelibvirt-pci",
        {"num_pci": 2, "num_pfs": 1, "num_vfs": 2},
        {
            "pci": {
                "device_spec": [
                    json.dumps(
                        {"vendor_id": "8086", "product_id": "1533", "live_migratable": "false"}
                    )
                ],
                "report_in_placement": True,
            }
        },
    ),
    "provider-config": Scenario(
        "nova-fakelibvirt",
        {"num_pci": 0, "num_pfs": 0, "num_vfs": 0, "num_mdevcap": 2},
        {"devices": {"enabled_mdev_types": ["nvidia-11"]}},
        provider_config=PROVIDER_CONFIG,
    ),
    "tdx": Scenario(
        "nova-fakelibvirt-tdx",
        {"num_pci": 0, "num_pfs": 0, "num_vfs": 0, "num_mdevcap": 2},
        {
            "devices": {"enabled_mdev_types": ["nvidia-11"]},
            "libvirt": {"cpu_mode": "host-passthrough", "num_intel_tdx_guests": 16},
        },
        tdx=True,
    ),
}


def _remote_managed(vpd: bool) -> tuple[dict[str, Any], ...]:
    """A BlueField-2 PF programmed for an overlay network and its two remote-managed VFs,
    as nova's ``RemoteManagedServersTest`` builds them (test_pci_sriov_servers.py), the
    card's VPD serial number on each (nova needs it) or on none."""
    serial = {"readonly": {"serial_number": "MT0000X00002"}} if vpd else None
    common = {"bus": 0x82, "slot": 0x0, "numa_node": 0, "vf_ratio": 2, "vend_id": "15b3"}
    pf = {
        **common,
        "dev_type": "PF",
        "function": 0,
        "iommu_group": 84,
        "vend_name": "Mellanox Technologies",
        "prod_id": "a2d6",
        "prod_name": "MT42822 BlueField-2 integrated ConnectX-6",
        "driver_name": "mlx5_core",
        "vpd_fields": {"name": "MT42822 BlueField-2 integrated ConnectX-6", **(serial or {})}
        if vpd
        else None,
    }
    vfs = tuple(
        {
            **common,
            "dev_type": "VF",
            "function": n,
            "iommu_group": 84 + n,
            "parent": (0x82, 0x0, 0),
            "vend_name": "Mellanox Technologies",
            "prod_id": "101e",
            "prod_name": "ConnectX Family mlx5Gen Virtual Function",
            "driver_name": "mlx5_core",
            "vpd_fields": {"name": "ConnectX Family", **(serial or {})} if vpd else None,
        }
        for n in (1, 2)
    )
    return (pf, *vfs)


REMOTE_MANAGED_SPEC = {
    "pci": {
        "device_spec": [
            json.dumps({"vendor_id": "15b3", "product_id": "a2d6", "remote_managed": "false"}),
            json.dumps({"vendor_id": "15b3", "product_id": "101e", "remote_managed": "true"}),
        ]
    }
}
"""nova's ``RemoteManagedServersTest`` device_spec for the overlay PF and its VFs."""

HOSTS = {
    **SCENARIOS,
    "bluefield-vpd": Scenario(
        "nova-fakelibvirt-bluefield-vpd",
        {"num_pci": 0, "num_pfs": 0, "num_vfs": 0, "num_mdevcap": 0},
        REMOTE_MANAGED_SPEC,
        devices=_remote_managed(vpd=True),
    ),
    "bluefield-no-vpd": Scenario(
        "nova-fakelibvirt-bluefield-no-vpd",
        {"num_pci": 0, "num_pfs": 0, "num_vfs": 0, "num_mdevcap": 0},
        REMOTE_MANAGED_SPEC,
        devices=_remote_managed(vpd=False),
    ),
    "plain": Scenario(
        "nova-fakelibvirt-plain",
        {"num_pci": 0, "num_pfs": 0, "num_vfs": 0, "num_mdevcap": 0},
        {},
    ),
    "vtpm": Scenario(
        "nova-fakelibvirt-vtpm",
        {"num_pci": 0, "num_pfs": 0, "num_vfs": 0, "num_mdevcap": 0},
        {"libvirt": {"swtpm_enabled": True}},
        vtpm=True,
    ),
    "sev": Scenario(
        "nova-fakelibvirt-sev",
        {"num_pci": 0, "num_pfs": 0, "num_vfs": 0, "num_mdevcap": 0},
        {},
        sev=True,
    ),
}
"""Every host: :data:`SCENARIOS` (the hosts the parity test compares, each with children)
``plain``, a compute node alone, and the plain host offering AMD SEV (``sev``) or a
vTPM (``vtpm``, ``[libvirt] swtpm_enabled``), and a BlueField-2 with remote-managed VFs,
its VPD card serial on each or on none (``bluefield-vpd``, ``bluefield-no-vpd``;
``[pci] report_in_placement`` off, as in nova's own test)
(tests/helpers/nova_compute.py)."""


def provider_config_dir(instances_path: str | Path) -> Path:
    """Where a scenario's provider config file goes: beside the instances path."""
    return Path(instances_path).parent / "provider_config"


def write_provider_config(scenario: Scenario, instances_path: str | Path) -> None:
    """Write ``scenario``'s provider config file, when it has one and it is not there yet."""
    if scenario.provider_config:
        path = provider_config_dir(instances_path) / "site.yaml"
        if path.exists() and path.read_text() == scenario.provider_config:
            return  # written already (by the test, before both sides read it)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(scenario.provider_config)


def _fakelibvirt() -> Any:
    import nova.tests

    pkg = types.ModuleType("nova.tests.fixtures")
    pkg.__path__ = [str(Path(nova.tests.__path__[0]) / "fixtures")]
    sys.modules.setdefault("nova.tests.fixtures", pkg)
    from nova.tests.fixtures import libvirt as fakelibvirt

    return fakelibvirt


def _real_baseline_cpu(_conn: Any, cpus: list[str], flags: int = 0) -> str:
    """libvirt's own ``baselineCPU`` (its test driver), for nova's fakelibvirt connection.

    fakelibvirt's ``baselineCPU`` answers one fixed document (Penryn's explicit features
    plus ``aes``) whatever it is asked, and nova's ``Host.get_capabilities`` expands the
    host CPU through it (``VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES``), so nova's CPU
    feature traits would be those of no real host. Answered by real libvirt, nova expands
    the host CPU exactly as the agent's libvirt driver does (same call, same libvirt): what
    the two do on a real host. The flag values are libvirt's in both (1: expand features).
    """
    import libvirt

    conn = libvirt.open("test:///default")
    try:
        return conn.baselineCPU(cpus, flags)
    finally:
        conn.close()


def _connection(
    fakelibvirt: Any,
    scenario: Scenario,
    libvirt_version: int | None = None,
    hostname: str = NODENAME,
) -> Any:
    if scenario.tdx:
        # Class-wide: nova's driver may open more connections; its own TDX test patches so.
        fakelibvirt.virConnect._domain_capability_features = (
            fakelibvirt.virConnect._domain_capability_features_with_TDX
        )
    if scenario.vtpm:  # as nova's VTPMServersTest patches it (test_vtpm.py)
        fakelibvirt.virConnect._domain_capability_tpm = (
            fakelibvirt.virConnect._domain_capability_tpm_supported
        )
    if scenario.sev:  # as nova's TestSEV patches it (nova/tests/functional/libvirt/test_amd_sev.py)
        fakelibvirt.virConnect._domain_capability_features = (
            fakelibvirt.virConnect._domain_capability_features_with_SEV
        )
    pci_info = fakelibvirt.HostPCIDevicesInfo(**scenario.pci)
    for device in scenario.devices:
        pci_info.add_device(**device)
    return fakelibvirt.Connection(
        "qemu:///system",
        version=libvirt_version or fakelibvirt.FAKE_LIBVIRT_VERSION,
        hv_version=fakelibvirt.FAKE_QEMU_VERSION,
        host_info=fakelibvirt.HostInfo(**HOST),
        pci_info=pci_info,
        hostname=hostname,
    )


@contextlib.contextmanager
def nova_driver(
    scenario: Scenario,
    instances_path: str,
    libvirt_version: int,
    options: dict[str, dict[str, Any]] | None = None,
    hostname: str = NODENAME,
) -> Iterator[Any]:
    """nova's ``LibvirtDriver`` on fakelibvirt for ``scenario``, as nova's functional
    libvirt tests set it up (``LibvirtFixture``, ``Host.get_connection`` patched to the
    scenario's connection), not yet ``init_host``-ed; nova's global ``CONF`` holds the
    scenario's options, ``instances_path`` and ``options`` (``{group: {name: value}}``,
    e.g. ``state_path``, ``[database] connection``); libvirt's hostname (nova's name for
    the compute node) is ``hostname``. Undone on exit."""
    from nova import conf as nova_conf
    from nova import objects
    from nova.virt import fake as fake_virt
    from nova.virt.libvirt import driver as libvirt_driver
    from nova.virt.libvirt import utils as libvirt_utils

    objects.register_all()
    conf = nova_conf.CONF
    if not conf._args:  # parsed once per process; a restart keeps nova's options
        conf([], project="nova", default_config_files=[])
    conf.set_override("instances_path", instances_path)
    write_provider_config(scenario, instances_path)
    conf.set_override(
        "provider_config_location", str(provider_config_dir(instances_path)), group="compute"
    )
    for group, values in [*scenario.options.items(), *(options or {}).items()]:
        for name, value in values.items():
            conf.set_override(name, value, group=None if group == "DEFAULT" else group)
    real_fs_info = libvirt_utils.get_fs_info
    fakelibvirt = _fakelibvirt()
    fixture = fakelibvirt.LibvirtFixture()
    fixture.setUp()
    fixture.amd_sev.sev = scenario.sev
    # _connection patches fakelibvirt's class for TDX, SEV and a TPM: undone on exit, so
    # the next host of a long-lived process starts from fakelibvirt's own.
    features = fakelibvirt.virConnect._domain_capability_features
    tpm = fakelibvirt.virConnect._domain_capability_tpm
    conn = _connection(fakelibvirt, scenario, libvirt_version, hostname)
    no_cgroup = str(Path(instances_path) / "no-misc-cgroup" / "misc.capacity")
    try:
        with (
            mock.patch("nova.virt.libvirt.utils.get_fs_info", real_fs_info),
            mock.patch("nova.virt.libvirt.host.Host.get_connection", return_value=conn),
            mock.patch("nova.virt.libvirt.host.MISC_CONTROL_GROUP_CAPACITY_FILE", no_cgroup),
            mock.patch.object(type(conn), "baselineCPU", _real_baseline_cpu),
            mock.patch.object(
                libvirt_driver.LibvirtDriver,
                "_check_vtpm_support",
                new=lambda _self: None,
            )
            if scenario.vtpm
            else contextlib.nullcontext(),
        ):
            yield libvirt_driver.LibvirtDriver(fake_virt.FakeVirtAPI(), False)
    finally:
        fakelibvirt.virConnect._domain_capability_features = features
        fakelibvirt.virConnect._domain_capability_tpm = tpm
        fixture.cleanUp()


def _nova_tree(
    scenario: Scenario, instances_path: str, libvirt_version: int
) -> dict[str, dict[str, Any]]:
    """The tree nova's driver and tracker write, or ``{"refused": why}`` when nova-compute
    refuses to start on this host and configuration (``init_host``)."""
    from nova import conf as nova_conf
    from nova import exception
    from nova.compute import (
        pci_placement_translator,
        provider_config,
        provider_tree,
        resource_tracker,
    )

    conf = nova_conf.CONF
    with nova_driver(scenario, instances_path, libvirt_version) as driver:
        try:
            driver.init_host(NODENAME)
        except exception.InvalidConfiguration as exc:
            return {"refused": str(exc)}
        tree = provider_tree.ProviderTree()
        tree.new_root(NODENAME, "00000000-0000-0000-0000-0000000000c1")
        driver.update_provider_tree(tree, NODENAME)
        # The resource tracker's part (_update_to_placement -> _get_traits): capability
        # traits, COMPUTE_NODE, OWNER_NOVA. Its two other reads: the PCI tracker's pools
        # (has_remote_managed_device_pools, on nova's own PciDevTracker fed by the
        # driver) and the service record (enabled: nothing to add).
        pci_tracker = _nova_pci_tracker(driver)
        rt = types.SimpleNamespace(
            driver=driver,
            pci_tracker=pci_tracker,
            _sync_compute_service_disabled_trait=lambda _context, _traits: None,
        )
        rt._should_expose_remote_managed_ports_trait = types.MethodType(
            resource_tracker.ResourceTracker._should_expose_remote_managed_ports_trait, rt
        )
        traits = resource_tracker.ResourceTracker._get_traits(rt, None, NODENAME, tree)
        tree.update_traits(NODENAME, traits)
        if conf.pci.report_in_placement:
            pci_placement_translator.update_provider_tree_for_pci(
                tree, NODENAME, pci_tracker, {}, []
            )
        # Then the provider config files (_update_to_placement -> _merge_provider_configs).
        rt.absent_providers = set()
        for name in ("_get_providers_to_update", "_merge_provider_configs"):
            method = getattr(resource_tracker.ResourceTracker, name)
            setattr(rt, name, types.MethodType(method, rt))
        configs = provider_config.get_provider_configs(conf.compute.provider_config_location)
        rt._merge_provider_configs(configs, tree)
    out = {}
    for uuid in tree.get_provider_uuids():
        data = tree.data(uuid)
        out[data.name] = {"inventory": data.inventory, "traits": sorted(data.traits)}
    return out


def _nova_pci_tracker(driver: Any) -> Any:
    """nova's ``PciDevTracker`` fed with the driver's PCI devices, as the resource tracker
    feeds it (``_setup_pci_tracker``; no instances, so no allocations). It reads the
    compute node's devices from the cell database: none yet, as on a new compute node."""
    from nova import context, objects
    from nova.pci import manager as pci_manager

    node = objects.ComputeNode(id=1, numa_topology=None)
    empty = objects.PciDeviceList(objects=[])
    with mock.patch.object(objects.PciDeviceList, "get_by_compute_node", return_value=empty):
        tracker = pci_manager.PciDevTracker(context.get_admin_context(), node)
    tracker.update_devices_from_hypervisor_resources(driver._get_pci_passthrough_devices())
    return tracker


def _fixture(name: str, directory: Path) -> None:
    from lxml import etree

    scenario = HOSTS[name]
    fakelibvirt = _fakelibvirt()
    conn = _connection(fakelibvirt, scenario)
    directory.mkdir(parents=True, exist_ok=True)
    tdx = ", Intel TDX (_domain_capability_features_with_TDX)" if scenario.tdx else ""
    tdx += ", a TPM (_domain_capability_tpm_supported)" if scenario.vtpm else ""
    if scenario.sev:
        tdx = ", AMD SEV (_domain_capability_features_with_SEV, AmdSevFixture sev only)"
        params = directory / "sysfs" / "sys" / "module" / "kvm_amd" / "parameters"
        params.mkdir(parents=True, exist_ok=True)
        for name, value in (("sev", "Y"), ("sev_es", "N"), ("sev_snp", "N")):
            (params / name).write_text(f"{value}\n")
        mounts = directory / "sysfs" / "proc" / "self" / "mounts"
        mounts.parent.mkdir(parents=True, exist_ok=True)
        mounts.write_text("overlay / overlay rw,relatime 0 0\nproc /proc proc rw 0 0\n")
    more = (
        f" and {len(scenario.devices)} added (the scenario's devices)" if scenario.devices else ""
    )
    note = (
        f"<!-- Served by {SOURCE}: host {HOST}, PCI devices {scenario.pci}{more}{tdx}. Regenerate\n"
    )
    note += f"     with python -m tests.helpers.nova_libvirt fixture {name} <this directory>. -->\n"
    caps = conn.getCapabilities()
    (directory / "capabilities.xml").write_text(note + caps.strip() + "\n")
    arch = etree.fromstring(caps.encode()).findtext("host/cpu/arch")
    domcaps = conn.getDomainCapabilities(None, arch, None, "kvm", 0)
    (directory / "domcapabilities.xml").write_text(note + domcaps.strip() + "\n")
    # nova asks every guest architecture of the capabilities (Host.get_domain_capabilities):
    # the agent's libvirt driver gets the same documents, one file each.
    guests = {g.get("name") for g in etree.fromstring(caps.encode()).iterfind("guest/arch")}
    for other in sorted(guests - {arch}):
        text = conn.getDomainCapabilities(None, other, None, "kvm", 0)
        (directory / f"domcapabilities-{other}.xml").write_text(note + text.strip() + "\n")
    model, memory_mib, cpus, mhz, nodes, sockets, cores, threads = conn.getInfo()
    node = etree.Element("node")
    cpu = etree.SubElement(node, "cpu")
    for tag, value in (
        ("nodes", nodes),
        ("sockets", sockets),
        ("cores", cores),
        ("threads", threads),
        ("active", cpus),
        ("mhz", mhz),
        ("model", model),
    ):
        etree.SubElement(cpu, tag).text = str(value)
    # nova reads getInfo()[1] as MiB (Host.get_memory_mb_total); the test driver's
    # <memory> is KiB.
    etree.SubElement(node, "memory").text = str(memory_mib * 1024)
    flags = 0
    for name in dir(fakelibvirt):
        if name.startswith("VIR_CONNECT_LIST_NODE_DEVICES_CAP_"):
            flags |= getattr(fakelibvirt, name)
    for dev in conn.listAllDevices(flags):
        node.append(etree.fromstring(dev.XMLDesc(0).encode()))
    etree.indent(node)
    body = etree.tostring(node, encoding="unicode")
    (directory / "host.xml").write_text('<?xml version="1.0"?>\n' + note + body + "\n")


def main(argv: list[str]) -> int:
    """``report SCENARIO INSTANCES_PATH LIBVIRT_VERSION`` or ``fixture SCENARIO DIR``."""
    if len(argv) == 4 and argv[0] == "report" and argv[1] in SCENARIOS:
        tree = _nova_tree(SCENARIOS[argv[1]], argv[2], int(argv[3]))
        json.dump(tree, sys.stdout, indent=1, sort_keys=True, default=str)
        return 0
    if len(argv) == 3 and argv[0] == "fixture" and argv[1] in HOSTS:
        _fixture(argv[1], Path(argv[2]))
        return 0
    usage = "usage: python -m tests.helpers.nova_libvirt report SCENARIO PATH VERSION"
    print(f"{usage} | fixture SCENARIO DIR (SCENARIO: {', '.join(HOSTS)})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
