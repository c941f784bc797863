"""The libvirt driver: the host as libvirt sees it, and every domain as an instance.

The hardware half follows the host driver's rules (CPU sets, ``[pci]
device_spec``, mdev type selection, DISK_GB from ``instances_path``) on
libvirt's data, so the same hardware gives the same tree with either driver
(DESIGN.md). The instance half turns each domain, running or not, into an
:class:`~drivers.records.Instance`; :mod:`agent.shape.planning` turns those into
allocations.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import libvirt
from oslo_config import cfg

from agent.model.exceptions import ConfigError
from drivers.base import SingleNodeDriver
from drivers.host.cpu import split_cpus
from drivers.host.disk import discover_disk
from drivers.host.passthrough import discover_passthrough
from drivers.host.settings import HostSettings, settings_from_conf
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
)
from drivers.libvirt.domain import DomainDef, domain_from_element
from drivers.libvirt.metadata import InstanceMeta, read_metadata
from drivers.libvirt.nodedev import (
    HostDevices,
    MdevNodeDevice,
    NodeDevice,
    assemble,
    parse_node_device,
)
from drivers.libvirt.options import GROUP
from drivers.libvirt.reader import CapabilityTraits
from drivers.libvirt.xmlutil import LibvirtXMLError, parse_xml
from drivers.records import Flavor, HostResources, Instance, NumaCell, cells_mib

LOG = logging.getLogger(__name__)
GIB = 1024**3

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


class LibvirtDriver(SingleNodeDriver):
    """Reports a libvirt hypervisor (``[libvirt] connection_uri``) as one node.

    Args:
        conf: loaded configuration.
        connection: the connection to use; default: one to
            ``[libvirt] connection_uri`` with the reconnect options.

    Attributes:
        warnings: the warnings of the last read (host or instances), one line each.

    Raises:
        ConfigError: at start, for a ``[pci] device_spec`` or CPU set that
            does not parse, or ``capabilities_file`` with a non-test URI.
    """

    def __init__(self, conf: cfg.ConfigOpts, connection: LibvirtConnection | None = None) -> None:
        super().__init__(conf)
        opts = conf[GROUP]
        self.settings: HostSettings = settings_from_conf(conf)
        for name in ("capabilities_file", "domain_capabilities_file"):
            if opts[name] and not opts.connection_uri.startswith("test:"):
                raise ConfigError(
                    f"[{GROUP}] {name} is only for replaying a host with libvirt's test "
                    f"driver, not with connection_uri {opts.connection_uri!r}; unset it"
                )
        self.capabilities_file: str | None = opts.capabilities_file
        self.capability_traits = CapabilityTraits(conf, self._warn)
        self.connection = connection or LibvirtConnection(
            opts.connection_uri,
            attempts=opts.reconnect_attempts,
            min_delay=opts.reconnect_min_delay,
            max_delay=max(opts.reconnect_max_delay, opts.reconnect_min_delay),
        )
        self.unowned_project_id: str = opts.unowned_project_id
        self.unowned_user_id: str = opts.unowned_user_id
        self.warnings: list[str] = []
        # UUIDs of domains listed but not readable by the last list_instances.
        self._unreadable: set[str] = set()
        self.last: LibvirtHost | None = None
        self._caps_text = ""
        self._warned: set[str] = set()

    # -- warnings ---------------------------------------------------------------

    def _warn(self, message: str) -> None:
        """Record a warning; log it the first time only (cycles repeat every minute)."""
        self.warnings.append(message)
        if message not in self._warned:
            self._warned.add(message)
            LOG.warning("%s", message)

    # -- ComputeDriver ------------------------------------------------------------

    def get_host_resources(self, nodename: str) -> HostResources:
        """What the hypervisor offers now (a fresh read on every call).

        Raises:
            LibvirtConnectionError: libvirt cannot be reached (after backoff).
            LibvirtCallError: a host-wide call failed (capabilities, node info,
                device listing).
            ConfigError: the CPU sets name CPUs the host does not have online.
        """
        self._check(nodename)
        return self.discover().resources

    def list_instances(self, nodename: str) -> list[Instance]:
        """Every domain, running or not, as an instance.

        A domain that vanished between listing and reading, or whose XML or
        metadata cannot be used, is warned about (naming it); the rest are
        returned. See :meth:`read_instances`.

        Raises:
            LibvirtConnectionError, LibvirtCallError: the listing itself failed.
        """
        self._check(nodename)
        self.warnings = []
        self._unreadable = set()
        return self.read_instances(self.list_domains())

    def unreadable_instances(self, nodename: str) -> set[str]:
        """Domains the last :meth:`list_instances` listed but could not read.

        Their XML could not be fetched (other than because the domain went
        away) or parsed: such a domain still runs, so it is neither an
        instance to write nor a gone one to clear (its allocation stays).
        """
        self._check(nodename)
        return set(self._unreadable)

    # -- host -----------------------------------------------------------------------

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

    def discover(self) -> LibvirtHost:
        """Read the host now (kept as :attr:`last`).

        Raises:
            See :meth:`get_host_resources`.
        """
        self.warnings = []
        conn = self.connection.get()
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
        disk = discover_disk(reader, self.settings.instances_path, self.settings.shared_storage)
        for line in reader.warnings:
            self._warn(line)
        devices = self.read_node_devices(self.list_node_devices())
        enabled = self.settings.enabled_mdev_types
        gpus = devices.gpus(enabled)
        gpu_addresses = frozenset(g.address for g in gpus)
        for spec in self.settings.specs:
            for address in sorted(gpu_addresses):
                fn = devices.functions.get(address)
                if fn is not None and spec.matches(fn):
                    self._warn(
                        f"[pci] device_spec {spec.text} matches {address}, which is offered as "
                        "vGPU; it is not also offered for passthrough"
                    )
        resources = HostResources(
            nodename=self.settings.nodename,
            vcpus=len(vcpu_ids),
            pcpus=len(pcpu_ids),
            memory_mb=int(info[1]),
            disk_gb=disk.total_gb,
            shared_storage=disk.shared,
            traits=cpu_traits(features, caps.vendor, threads)
            | self.capability_traits.read(self.connection, conn, caps.arch, self._caps_text),
            numa_cells=tuple(
                NumaCell(
                    id=c.id,
                    vcpus=len(c.cpus & vcpu_ids),
                    pcpus=len(c.cpus & pcpu_ids),
                    memory_mb=mib,
                    hugepages=c.pages,
                )
                for c, mib in zip(
                    caps.cells, cells_mib([c.memory_kib for c in caps.cells]), strict=True
                )
            ),
            pci_devices=discover_passthrough(devices.functions, self.settings.specs, gpu_addresses),
            sriov_pfs=discover_sriov(devices.functions, self.settings.specs, gpu_addresses),
            gpus=gpus,
        )
        self.last = LibvirtHost(resources, caps, devices, features)
        return self.last

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
            text = self._xml_desc(
                "virNodeDeviceGetXMLDesc",
                dev.XMLDesc,
                f"node device {name}",
                libvirt.VIR_ERR_NO_NODE_DEVICE,
                "left out",
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

    def _xml_desc(
        self, call: str, xml_desc: Callable[[int], str], what: str, vanished: int, fate: str
    ) -> str | None:
        """The XML of a listed object, or None (warned) when it vanished or cannot be read.

        Raises:
            LibvirtConnectionError: the connection was lost meanwhile.
        """
        try:
            return self.connection.call(call, xml_desc, 0)
        except LibvirtConnectionError:
            raise
        except LibvirtCallError as exc:
            if exc.code == vanished:
                self._warn(f"{what} vanished after it was listed; {fate}")
            else:
                self._warn(f"{what}: {exc}; {fate}")
            return None

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

    # -- instances ------------------------------------------------------------------

    def list_domains(self) -> list[libvirt.virDomain]:
        """Every domain, active and inactive, as libvirt lists them now.

        Raises:
            LibvirtConnectionError, LibvirtCallError: the listing failed.
        """
        conn = self.connection.get()
        return self.connection.call("virConnectListAllDomains", conn.listAllDomains, 0)

    def read_instances(self, domains: list[libvirt.virDomain]) -> list[Instance]:
        """Turn listed domains into instances.

        A domain that vanished since the listing, or whose XML or metadata
        cannot be used, is warned about (``domain NAME (UUID): ...``); with
        bad metadata it is still counted, under the unowned project and user.

        Raises:
            LibvirtConnectionError: the connection was lost meanwhile.
        """
        devices = self.last.devices if self.last is not None else None
        out = []
        for dom in domains:
            what = f"domain {dom.name()} ({dom.UUIDString()})"
            text = self._xml_desc(
                "virDomainGetXMLDesc",
                dom.XMLDesc,
                what,
                libvirt.VIR_ERR_NO_DOMAIN,
                "its allocation is left as it is until it can be read",
            )
            if text is None:
                if self._domain_exists(dom):
                    self._unreadable.add(dom.UUIDString())
                continue
            try:
                root = parse_xml(text, what)
                ddef = domain_from_element(root, what)
            except LibvirtXMLError as exc:
                self._warn(
                    f"{exc}; its allocation is left as it is until it can be read "
                    f"(virsh dumpxml {dom.UUIDString()})"
                )
                self._unreadable.add(dom.UUIDString())
                continue
            try:
                meta = read_metadata(root, what)
            except LibvirtXMLError as exc:
                self._warn(f"{exc}; counted under the unowned project and user")
                meta = None
            if devices is None:
                devices = self.read_node_devices(self.list_node_devices())
            out.append(self._instance(dom, ddef, meta, devices, what))
        return out

    def _domain_exists(self, dom: libvirt.virDomain) -> bool:
        """False when ``dom`` went away since it was listed (then it is gone, not unreadable)."""
        try:
            self.connection.call("virDomainGetInfo", dom.info)
        except LibvirtConnectionError:
            raise
        except LibvirtCallError as exc:
            return exc.code != libvirt.VIR_ERR_NO_DOMAIN
        return True

    def _disk_gib(self, dom: libvirt.virDomain, target: str, what: str) -> int:
        try:
            capacity = self.connection.call("virDomainGetBlockInfo", dom.blockInfo, target, 0)[0]
        except LibvirtConnectionError:
            raise
        except LibvirtCallError as exc:
            self._warn(f"{what}: size of disk {target} unknown ({exc.reason}); counted as 0 GiB")
            return 0
        return math.ceil(capacity / GIB)

    def _instance(
        self,
        dom: libvirt.virDomain,
        ddef: DomainDef,
        meta: InstanceMeta | None,
        devices: HostDevices,
        what: str,
    ) -> Instance:
        for kind in sorted(set(ddef.other_hostdevs)):
            self._warn(
                f"{what}: <hostdev type={kind!r}> is not a kind the agent accounts (pci, mdev); "
                "it is not allocated, the rest of the domain is"
            )
        if meta is not None and meta.flavor is not None:
            f = meta.flavor
            flavor = Flavor(
                vcpus=ddef.vcpus if f.vcpus is None else f.vcpus,
                memory_mb=ddef.memory_mb if f.memory_mb is None else f.memory_mb,
                root_gb=f.root_gb,
                ephemeral_gb=f.ephemeral_gb,
                swap_mb=f.swap_mb,
                name=f.name,
            )
        else:
            sizes = {
                d.target: self._disk_gib(dom, d.target, what) for d in ddef.disks if d.is_local
            }
            root = ddef.root.target if ddef.root is not None else None
            flavor = Flavor(
                vcpus=ddef.vcpus,
                memory_mb=ddef.memory_mb,
                root_gb=sizes.get(root, 0) if root else 0,
                ephemeral_gb=sum(v for k, v in sizes.items() if k != root),
            )
        if meta is not None and meta.boot_from_volume is not None:
            bfv = meta.boot_from_volume
        else:
            bfv = ddef.root is not None and ddef.root.is_volume
        pci = list(ddef.pci_addresses)
        for iface in ddef.direct_interfaces:
            address = devices.netdev_to_pci.get(iface)
            fn = devices.functions.get(address) if address else None
            if fn is not None and fn.is_vf:
                pci.append(address)  # macvtap on a VF holds that VF
        return Instance(
            uuid=ddef.uuid,
            project_id=meta.project_id if meta else self.unowned_project_id,
            user_id=meta.user_id if meta else self.unowned_user_id,
            flavor=flavor,
            boot_from_volume=bfv,
            pinned=ddef.pinned,
            numa_cells=ddef.numa_cells,
            pci_devices=tuple(dict.fromkeys(pci)),
            mdevs=tuple(dict.fromkeys(ddef.mdev_uuids)),
            name=(meta.name if meta and meta.name else ddef.name),
        )
