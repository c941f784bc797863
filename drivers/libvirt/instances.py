"""Every libvirt domain, running or not, as an :class:`~drivers.records.Instance`.

What a domain holds comes from its XML (:mod:`drivers.libvirt.domain`): vCPUs,
memory, PCI host devices, mdevs, NUMA placement, disks. Who owns it and its
flavor come from nova's metadata (:mod:`drivers.libvirt.metadata`); without
it the domain is counted under ``[libvirt] unowned_project_id`` and
``unowned_user_id``, its disks sized by ``virDomainGetBlockInfo``.
:mod:`agent.shape.planning` turns the records into allocations.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import libvirt

from drivers.libvirt.connection import (
    LibvirtCallError,
    LibvirtConnection,
    LibvirtConnectionError,
    listed_xml,
)
from drivers.libvirt.cpu_policy import CpuPolicy, cpu_policy
from drivers.libvirt.domain import DomainDef, domain_from_element
from drivers.libvirt.mem_encryption import TRAITS
from drivers.libvirt.metadata import InstanceMeta, read_metadata
from drivers.libvirt.nodedev import HostDevices
from drivers.libvirt.xmlutil import LibvirtXMLError, parse_xml
from drivers.records import Flavor, GuestCellShare, Instance

GIB = 1024**3
_KEPT = "its allocation is left as it is until it can be read"


class InstanceView:
    """Reads the domains of a libvirt host as instances.

    Args:
        connection: the connection every call goes through.
        unowned_project_id, unowned_user_id: the owner of a domain without
            nova's metadata (or with metadata that cannot be read).
        devices: the host's node devices (a macvtap interface on a VF holds
            that VF); called once per read, only when a domain needs it.
        warn: where warnings go (the driver keeps them and logs each once).
        shared_cpus: ``[compute] cpu_shared_set``, or None: tells a mixed guest's
            shared vCPUs and a shared emulator thread from dedicated ones
            (:mod:`drivers.libvirt.cpu_policy`).

    Attributes:
        unreadable: UUIDs of the domains the last :meth:`read` listed but
            could not read.
    """

    def __init__(
        self,
        connection: LibvirtConnection,
        unowned_project_id: str,
        unowned_user_id: str,
        devices: Callable[[], HostDevices],
        warn: Callable[[str], None],
        shared_cpus: frozenset[int] | None = None,
    ) -> None:
        self.shared_cpus = shared_cpus
        self.connection = connection
        self.unowned_project_id = unowned_project_id
        self.unowned_user_id = unowned_user_id
        self._devices = devices
        self._warn = warn
        self.unreadable: set[str] = set()

    def list_domains(self) -> list[libvirt.virDomain]:
        """Every domain, active and inactive, as libvirt lists them now.

        Raises:
            LibvirtConnectionError, LibvirtCallError: the listing failed.
        """
        conn = self.connection.get()
        return self.connection.call("virConnectListAllDomains", conn.listAllDomains, 0)

    def lookup(self, uuid: str) -> libvirt.virDomain | None:
        """The domain with UUID ``uuid``, or None when libvirt has none.

        Raises:
            LibvirtConnectionError, LibvirtCallError: the lookup failed otherwise.
        """
        conn = self.connection.get()
        try:
            lookup = conn.lookupByUUIDString
            return self.connection.call("virDomainLookupByUUIDString", lookup, uuid)
        except LibvirtCallError as exc:
            if isinstance(exc, LibvirtConnectionError) or exc.code != libvirt.VIR_ERR_NO_DOMAIN:
                raise
            return None

    def read(self, domains: list[libvirt.virDomain]) -> list[Instance]:
        """Turn listed domains into instances (and :attr:`unreadable` anew).

        A domain that vanished since the listing, or whose XML or metadata
        cannot be used, is warned about (``domain NAME (UUID): ...``); with
        bad metadata it is still counted, under the unowned project and user.

        Raises:
            LibvirtConnectionError: the connection was lost meanwhile.
        """
        self.unreadable = set()
        devices: HostDevices | None = None
        out = []
        for dom in domains:
            what = f"domain {dom.name()} ({dom.UUIDString()})"
            read = self._definition(dom, what)
            if read is None:
                continue
            ddef, meta = read
            if devices is None:
                devices = self._devices()
            out.append(self._instance(dom, ddef, meta, devices, what))
        return out

    def _definition(
        self, dom: libvirt.virDomain, what: str
    ) -> tuple[DomainDef, InstanceMeta | None] | None:
        """The domain's definition and nova's metadata (None if unusable, warned).

        None when the domain cannot be read; it is then :attr:`unreadable`
        unless it went away since the listing (then it is gone).
        """
        text = listed_xml(
            self.connection,
            "virDomainGetXMLDesc",
            dom.XMLDesc,
            what,
            libvirt.VIR_ERR_NO_DOMAIN,
            _KEPT,
            self._warn,
        )
        if text is None:
            if self._domain_exists(dom):
                self.unreadable.add(dom.UUIDString())
            return None
        try:
            root = parse_xml(text, what)
            ddef = domain_from_element(root, what)
        except LibvirtXMLError as exc:
            self._warn(f"{exc}; {_KEPT} (virsh dumpxml {dom.UUIDString()})")
            self.unreadable.add(dom.UUIDString())
            return None
        try:
            return ddef, read_metadata(root, what)
        except LibvirtXMLError as exc:
            self._warn(f"{exc}; counted under the unowned project and user")
            return ddef, None

    def _cpu_policy(self, ddef: DomainDef, meta: InstanceMeta | None, what: str) -> CpuPolicy:
        """The guest's dedicated vCPUs and emulator threads (:mod:`.cpu_policy`); nova's
        recorded extra specs and image properties are set aside, with a warning, when a
        mask in them does not parse."""
        flavor = meta.flavor if meta is not None else None
        specs = flavor.extra_specs if flavor is not None else {}
        image = meta.image_properties if meta is not None else {}
        vcpus = flavor.vcpus if flavor is not None and flavor.vcpus is not None else ddef.vcpus
        pins, emulator = ddef.vcpu_pins, ddef.emulator_pin
        try:
            return cpu_policy(vcpus, pins, emulator, specs, self.shared_cpus, what, image)
        except LibvirtXMLError as exc:
            self._warn(f"{exc}; the CPU policy is read from the domain's <cputune>")
            return cpu_policy(vcpus, pins, emulator, {}, self.shared_cpus, what)

    def _guest_cells(
        self, ddef: DomainDef, policy: CpuPolicy, flavor: Flavor, what: str
    ) -> tuple[GuestCellShare, ...]:
        """The guest's NUMA cells on the host's: each guest cell's vCPUs (dedicated ones
        by ``policy``) and memory on the one host cell its ``<memnode>`` names. Empty when
        the guest has no cells, or when they do not add up to its flavor or a cell is not
        bound to exactly one host cell (warned: its CPUs and memory are then split evenly
        over its host cells)."""
        cells = ddef.guest_cells
        if not cells:
            return ()
        vcpus = sum(len(c.cpus) for c in cells)
        memory = sum(c.memory_mb for c in cells)
        unbound = [c.id for c in cells if len(c.host_cells) != 1]
        if unbound or vcpus != flavor.vcpus or memory != flavor.memory_mb:
            why = (
                f"guest cells {unbound} are not bound to one host cell each by <memnode>"
                if unbound
                else f"its NUMA cells hold {vcpus} vCPUs and {memory} MiB, its flavor "
                f"{flavor.vcpus} and {flavor.memory_mb}"
            )
            self._warn(f"{what}: {why}; its CPUs and memory are split evenly over its cells")
            return ()
        return tuple(
            GuestCellShare(
                host_cell=next(iter(c.host_cells)),
                vcpus=len(c.cpus),
                dedicated=len(c.cpus & policy.dedicated_set),
                memory_mb=c.memory_mb,
            )
            for c in cells
        )

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
        """Disk ``target``'s capacity in GiB, rounded up; 0 (warned) when libvirt cannot say."""
        try:
            capacity = self.connection.call("virDomainGetBlockInfo", dom.blockInfo, target, 0)[0]
        except LibvirtConnectionError:
            raise
        except LibvirtCallError as exc:
            self._warn(f"{what}: size of disk {target} unknown ({exc.reason}); counted as 0 GiB")
            return 0
        return math.ceil(capacity / GIB)

    def _flavor(
        self, dom: libvirt.virDomain, ddef: DomainDef, meta: InstanceMeta | None, what: str
    ) -> Flavor:
        """nova's flavor from the metadata (CPU and memory from the XML where it leaves them
        out); without one, the XML's CPU and memory and the local disks' sizes (the root
        disk is the boot disk, every other local disk is ephemeral)."""
        if meta is not None and meta.flavor is not None:
            f = meta.flavor
            return Flavor(
                vcpus=ddef.vcpus if f.vcpus is None else f.vcpus,
                memory_mb=ddef.memory_mb if f.memory_mb is None else f.memory_mb,
                root_gb=f.root_gb,
                ephemeral_gb=f.ephemeral_gb,
                swap_mb=f.swap_mb,
                name=f.name,
            )
        sizes = {d.target: self._disk_gib(dom, d.target, what) for d in ddef.disks if d.is_local}
        root = ddef.root.target if ddef.root is not None else None
        return Flavor(
            vcpus=ddef.vcpus,
            memory_mb=ddef.memory_mb,
            root_gb=sizes.get(root, 0) if root else 0,
            ephemeral_gb=sum(v for k, v in sizes.items() if k != root),
        )

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
        flavor = self._flavor(dom, ddef, meta, what)
        if meta is not None and meta.boot_from_volume is not None:
            bfv = meta.boot_from_volume
        else:
            bfv = ddef.root is not None and ddef.root.is_volume
        policy = self._cpu_policy(ddef, meta, what)
        if ddef.mem_encryption and ddef.mem_encryption not in TRAITS:
            self._warn(
                f"{what}: <launchSecurity type={ddef.mem_encryption!r}> is not a memory "
                "encryption model the agent reports (AMD SEV, SEV-ES, SEV-SNP, Intel TDX); "
                "none is allocated"
            )
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
            pinned=policy.dedicated >= flavor.vcpus > 0,
            dedicated_vcpus=policy.dedicated,
            emulator_isolated=policy.emulator_isolated,
            mem_encryption=ddef.mem_encryption if ddef.mem_encryption in TRAITS else "",
            numa_cells=ddef.numa_cells,
            guest_cells=self._guest_cells(ddef, policy, flavor, what),
            pci_devices=tuple(dict.fromkeys(pci)),
            mdevs=tuple(dict.fromkeys(ddef.mdev_uuids)),
            name=(meta.name if meta and meta.name else ddef.name),
        )
