"""The host as libvirt sees it: capabilities, node info and node devices as :class:`HostResources`.

The host driver's rules (CPU sets, ``[pci] device_spec``, mdev type
selection, DISK_GB from ``instances_path``) are applied to libvirt's data, so
the same hardware gives the same tree with either driver (DESIGN.md).
Calls: ``virConnectGetCapabilities`` (or ``[libvirt] capabilities_file`` with
the test driver), ``virNodeGetInfo``, ``virConnectBaselineCPU``,
``virConnectListAllDevices`` and one ``virNodeDeviceGetXMLDesc`` per device,
plus what :class:`~drivers.libvirt.reader.CapabilityTraits` asks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import libvirt
from oslo_config import cfg

from drivers.errors import ConfigError
from drivers.host.cpu import split_cpus
from drivers.host.disk import discover_disk, image_cache_gb
from drivers.host.passthrough import discover_passthrough
from drivers.host.pmem import check_on_host, host_namespaces, parse_pmem_namespaces
from drivers.host.settings import HostSettings
from drivers.host.sriov import discover_sriov
from drivers.host.sysfs import SysfsReader
from drivers.libvirt.capabilities import (
    HostCapabilities,
    cpu_traits,
    expanded_features,
    parse_capabilities,
)
from drivers.libvirt.connection import (
    LibvirtCallError,
    LibvirtConnection,
    LibvirtConnectionError,
    listed_xml,
)
from drivers.libvirt.mem_encryption import host_models, parse_sev
from drivers.libvirt.nodedev import (
    HostDevices,
    MdevNodeDevice,
    NodeDevice,
    assemble,
    parse_node_device,
)
from drivers.libvirt.options import GROUP
from drivers.libvirt.pci_versions import check_live_migratable, live_migratable_specs
from drivers.libvirt.reader import CapabilityTraits
from drivers.libvirt.tdx import TdxSettings, host_tdx
from drivers.libvirt.xmlutil import LibvirtXMLError
from drivers.records import Gpu, HostResources, MemEncryption, NumaCell, SriovPF, cells_mib

# Only these kinds matter to Placement; listing them alone spares an XMLDesc
# call per USB port, SCSI target and block device.
_DEVICE_FLAGS = (
    libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV
    | libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV
    | libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_NET
)


@dataclass(frozen=True, slots=True)
class LibvirtHost:
    """One read of the host: the records and the facts behind them.

    Attributes:
        resources: the :class:`HostResources` reported.
        capabilities: the parsed capabilities (cells with distances, CPU).
        devices: the node devices read.
        cpu_features: libvirt CPU feature names the traits came from.
    """

    resources: HostResources
    capabilities: HostCapabilities
    devices: HostDevices
    cpu_features: frozenset[str]


def _numa_cells(
    caps: HostCapabilities, vcpu_ids: frozenset[int], pcpu_ids: frozenset[int]
) -> tuple[NumaCell, ...]:
    """The capabilities' cells, each with its share of the shared and dedicated CPU sets."""
    mibs = cells_mib([c.memory_kib for c in caps.cells])
    return tuple(
        NumaCell(
            id=c.id,
            vcpus=len(c.cpus & vcpu_ids),
            pcpus=len(c.cpus & pcpu_ids),
            memory_mb=mib,
            hugepages=c.pages,
        )
        for c, mib in zip(caps.cells, mibs, strict=True)
    )


class HostView:
    """Reads the host's resources from libvirt, afresh on every :meth:`discover`.

    Args:
        conf: the loaded configuration (``[libvirt]`` options).
        connection: the connection every call goes through.
        settings: the host rules shared with the host driver.
        warn: where warnings go (the driver keeps them and logs each once).

    Attributes:
        last: the last read, or None before the first.

    Raises:
        ConfigError: ``capabilities_file`` or ``domain_capabilities_file``
            with a URI that is not libvirt's test driver.
    """

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        connection: LibvirtConnection,
        settings: HostSettings,
        warn: Callable[[str], None],
    ) -> None:
        opts = conf[GROUP]
        for name in ("capabilities_file", "domain_capabilities_file"):
            if opts[name] and not opts.connection_uri.startswith("test:"):
                raise ConfigError(
                    f"[{GROUP}] {name} is only for replaying a host with libvirt's test "
                    f"driver, not with connection_uri {opts.connection_uri!r}; unset it"
                )
        self.capabilities_file: str | None = opts.capabilities_file
        self.pmem = parse_pmem_namespaces(opts.pmem_namespaces)
        self.image_cache: str | None = (
            conf.image_cache.subdirectory_name
            if conf.workarounds.reserve_disk_resource_for_image_cache
            else None
        )
        self.capability_traits = CapabilityTraits(conf, warn)
        self.tdx = TdxSettings(opts.cpu_mode, opts.num_intel_tdx_guests)
        self.connection = connection
        self.settings = settings
        self._warn = warn
        self.last: LibvirtHost | None = None
        self._caps_text = ""

    def _capabilities(self, conn: libvirt.virConnect) -> HostCapabilities:
        if self.capabilities_file:
            try:
                with open(self.capabilities_file, "rb") as f:
                    data = f.read()
            except OSError as exc:
                raise ConfigError(
                    f"[{GROUP}] capabilities_file {self.capabilities_file}: {exc.strerror}"
                ) from None
            # Not text is as unusable as unparsable: the same warning, not a traceback.
            text = data.decode("utf-8", errors="replace")
        else:
            text = self.connection.call("virConnectGetCapabilities", conn.getCapabilities)
        self._caps_text = text
        try:
            caps = parse_capabilities(text)
        except LibvirtXMLError as exc:
            self._warn(f"{exc}; reporting without NUMA cells and CPU feature traits")
            return HostCapabilities(arch="")
        for line in caps.warnings:
            self._warn(line)
        return caps

    def _cpu_features(self, conn: libvirt.virConnect, caps: HostCapabilities) -> frozenset[str]:
        if not caps.model:
            return caps.features
        try:
            expanded = self.connection.call(
                "virConnectBaselineCPU",
                conn.baselineCPU,
                [caps.cpu_xml],
                libvirt.VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES,
            )
            return expanded_features(expanded) | caps.features
        except (LibvirtCallError, LibvirtXMLError) as exc:
            self._warn(
                f"CPU model {caps.model}: features not expanded ({exc}); traits come from the "
                "features libvirt lists beyond the model only"
            )
            return caps.features

    def _gpus(self, devices: HostDevices) -> tuple[Gpu, ...]:
        """The vGPU-capable GPUs; a ``[pci] device_spec`` matching one is warned about."""
        gpus = devices.gpus(self.settings.enabled_mdev_types)
        for spec in self.settings.specs:
            for address in sorted({g.address for g in gpus}):
                fn = devices.functions.get(address)
                if fn is not None and spec.matches(fn):
                    self._warn(
                        f"[pci] device_spec {spec.text} matches {address}, which is offered as "
                        "vGPU; it is not also offered for passthrough"
                    )
        return gpus

    def _mem_encryption(
        self, conn: libvirt.virConnect, arch: str, reader: SysfsReader
    ) -> tuple[MemEncryption, ...]:
        """AMD SEV models (:mod:`.mem_encryption`), then Intel TDX (:mod:`.tdx`), from the
        domain capabilities just read."""
        models = self._sev(conn, arch, reader)
        tdx = host_tdx(arch, self.tdx, self.capability_traits.host_domains, reader, self._warn)
        return models if tdx is None else (*models, tdx)

    def _sev(
        self, conn: libvirt.virConnect, arch: str, reader: SysfsReader
    ) -> tuple[MemEncryption, ...]:
        """AMD SEV models from the host arch's first domain capabilities document."""
        text = self.capability_traits.domain_text
        if not text or arch != "x86_64":
            return ()
        try:
            sev = parse_sev(text)
        except LibvirtXMLError as exc:
            self._warn(f"{exc}; no memory encryption (SEV) is reported")
            return ()
        if not sev.sev:
            return ()
        qemu = int(self.connection.call("virConnectGetVersion", conn.getVersion))
        models = host_models(arch, sev, reader, qemu)
        for line in reader.warnings:
            self._warn(line)
        return models

    def _sriov_pfs(self, devices: HostDevices, gpus: frozenset[str]) -> tuple[SriovPF, ...]:
        """The SR-IOV PFs whose VFs are offered (:func:`drivers.host.sriov.discover_sriov`)."""
        settings = self.settings
        return discover_sriov(devices.functions, settings.specs, gpus, settings.report_in_placement)

    def _check_versions(self, conn: libvirt.virConnect) -> None:
        """Refuse ``live_migratable`` on a libvirt or QEMU too old for it, as nova does.

        Raises:
            ConfigError: :func:`drivers.libvirt.pci_versions.check_live_migratable`.
        """
        if live_migratable_specs(self.settings.specs):
            check_live_migratable(
                self.settings.specs,
                int(self.connection.call("virConnectGetLibVersion", conn.getLibVersion)),
                int(self.connection.call("virConnectGetVersion", conn.getVersion)),
                str(self.connection.call("virConnectGetType", conn.getType)),
            )

    def discover(self) -> LibvirtHost:
        """Read the host now (kept as :attr:`last`).

        Raises:
            LibvirtConnectionError: libvirt cannot be reached (after backoff).
            LibvirtCallError: a host-wide call failed (capabilities, node info,
                device listing).
            ConfigError: the CPU sets name CPUs the host does not have online,
                ``[libvirt] pmem_namespaces`` names a namespace the host
                does not have in device-DAX mode, or a ``[pci] device_spec``
                tags ``live_migratable`` with a libvirt or QEMU too old for it
                (:mod:`drivers.libvirt.pci_versions`).
        """
        conn = self.connection.get()
        self._check_versions(conn)
        caps = self._capabilities(conn)
        # [model, memory MiB, active CPUs, MHz, nodes, sockets, cores, threads]
        info = self.connection.call("virNodeGetInfo", conn.getInfo)
        online = caps.online_cpus or frozenset(range(int(info[2])))
        vcpu_ids, pcpu_ids = split_cpus(online, self.settings.dedicated, self.settings.shared)
        features = self._cpu_features(conn, caps)
        threads = caps.threads_per_core or max(
            (c.max_siblings for c in caps.cells), default=int(info[7])
        )
        reader = SysfsReader(self.settings.sysfs_root)
        pmem = check_on_host(self.pmem, host_namespaces(reader)) if self.pmem else {}
        disk = discover_disk(reader, self.settings.instances_path, self.settings.shared_storage)
        for line in reader.warnings:
            self._warn(line)
        devices = self.read_node_devices(self.list_node_devices())
        gpus = self._gpus(devices)
        gpu_addresses = frozenset(g.address for g in gpus)
        traits = cpu_traits(features, caps.vendor, threads) | self.capability_traits.read(
            self.connection, conn, caps.arch, self._caps_text
        )
        resources = HostResources(
            nodename=self.settings.nodename,
            vcpus=len(vcpu_ids),
            pcpus=len(pcpu_ids),
            memory_mb=int(info[1]),
            disk_gb=disk.total_gb,
            shared_storage=disk.shared,
            traits=traits,
            numa_cells=_numa_cells(caps, vcpu_ids, pcpu_ids),
            pci_devices=discover_passthrough(devices.functions, self.settings.specs, gpu_addresses),
            sriov_pfs=self._sriov_pfs(devices, gpu_addresses),
            gpus=gpus,
            pmem_namespaces=pmem,
            image_cache_gb=(
                image_cache_gb(self.settings.instances_path, self.image_cache)
                if self.image_cache is not None and not disk.shared
                else 0
            ),
            mem_encryption=self._mem_encryption(conn, caps.arch, SysfsReader(reader.root)),
        )
        self.last = LibvirtHost(resources, caps, devices, features)
        return self.last

    def devices(self) -> HostDevices:
        """The node devices of the last :meth:`discover`, or read now if there was none.

        Raises:
            LibvirtConnectionError, LibvirtCallError: a fresh listing failed.
        """
        if self.last is not None:
            return self.last.devices
        return self.read_node_devices(self.list_node_devices())

    def list_node_devices(self) -> list[libvirt.virNodeDevice]:
        """The PCI, mdev and net node devices, as libvirt lists them now.

        Raises:
            LibvirtConnectionError, LibvirtCallError: the listing failed.
        """
        conn = self.connection.get()
        return self.connection.call("virConnectListAllDevices", conn.listAllDevices, _DEVICE_FLAGS)

    def read_node_devices(self, listed: list[libvirt.virNodeDevice]) -> HostDevices:
        """Read and parse each listed device.

        A device that vanished since the listing (``VIR_ERR_NO_NODE_DEVICE``),
        whose XML cannot be read or parsed, is warned about by name and left
        out; the VFs of such a PF go with it without a warning each.

        Raises:
            LibvirtConnectionError: the connection was lost meanwhile.
        """
        parsed: list[NodeDevice] = []
        left_out: set[str] = set()
        for dev in listed:
            name = dev.name()
            text = listed_xml(
                self.connection,
                "virNodeDeviceGetXMLDesc",
                dev.XMLDesc,
                f"node device {name}",
                libvirt.VIR_ERR_NO_NODE_DEVICE,
                "left out",
                self._warn,
            )
            if text is None:
                left_out.add(name)
                continue
            try:
                device = parse_node_device(text, name)
            except LibvirtXMLError as exc:
                self._warn(f"{exc}; left out (libvirt's XML for it: virsh nodedev-dumpxml {name})")
                left_out.add(name)
                continue
            if isinstance(device, MdevNodeDevice) and not self._active(dev):
                self._warn(
                    f"node device {name} is not active (stopped, or defined and not started); "
                    "left out"
                )
                continue
            if device is not None:
                parsed.append(device)
        return assemble(parsed, self._warn, frozenset(left_out))

    def _active(self, dev: libvirt.virNodeDevice) -> bool:
        # libvirt >= 7.8 lists defined-but-stopped mdevs too (mdevctl); such an
        # mdev does not exist on the host, so no domain can hold it.
        try:
            return bool(self.connection.call("virNodeDeviceIsActive", dev.isActive))
        except LibvirtConnectionError:
            raise
        except LibvirtCallError as exc:
            if exc.code == libvirt.VIR_ERR_NO_SUPPORT:
                return True  # older libvirt: every listed device exists
            raise
