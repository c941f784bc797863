"""Asks libvirt for what :mod:`drivers.libvirt.traits` turns into capability traits.

Calls: ``virConnectGetLibVersion`` and ``virConnectGetDomainCapabilities``
(for every guest arch and the machine types nova asks for, with ``[libvirt]
virt_type``: :mod:`drivers.libvirt.guests`), or the saved documents of
``[libvirt] domain_capabilities_file`` with the ``test:///`` driver, which
cannot answer the latter. A failure costs only the traits that depend on it
(warned about when the host arch has no answer); the cycle goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import libvirt
from oslo_config import cfg

from drivers.errors import ConfigError
from drivers.libvirt.connection import (
    LibvirtCallError,
    LibvirtConnection,
    LibvirtConnectionError,
)
from drivers.libvirt.guests import GuestArch, machine_types, parse_guest_arches
from drivers.libvirt.options import GROUP
from drivers.libvirt.traits import (
    DomainCapabilities,
    TraitSettings,
    capability_traits,
    guest_arches,
    parse_domain_capabilities,
    vtpm_problem,
)
from drivers.libvirt.xmlutil import LibvirtXMLError

LOG = logging.getLogger(__name__)


def settings_from_conf(conf: cfg.ConfigOpts) -> TraitSettings:
    """The nova.conf options the capability rules read."""
    return TraitSettings(
        virt_type=conf[GROUP].virt_type,
        images_type=conf[GROUP].images_type,
        force_raw_images=conf.force_raw_images,
        swtpm_enabled=conf[GROUP].swtpm_enabled,
        tpm_secret_security=tuple(conf[GROUP].supported_tpm_secret_security),
        image_type_exclude_list=tuple(conf.compute.image_type_exclude_list),
    )


class CapabilityTraits:
    """Reads the capability traits of the host on each call (they follow libvirt upgrades).

    Args:
        conf: the loaded configuration.
        warn: where warnings go (the driver logs each once).

    Attributes:
        domain_text: the host arch's first domain capabilities document of the last
            read, or None when libvirt could not give one (AMD SEV reads it).
        host_domains: the host arch's domain capabilities of the last read, one per
            machine type, in the order asked (Intel TDX: any of them).
    """

    def __init__(self, conf: cfg.ConfigOpts, warn: Callable[[str], None]) -> None:
        self.settings = settings_from_conf(conf)
        self.domain_files: tuple[str, ...] = tuple(conf[GROUP].domain_capabilities_file or ())
        self.hw_machine_type: tuple[str, ...] = tuple(conf[GROUP].hw_machine_type or ())
        self._warn = warn
        self._told = False
        self._asked_host_arch = False
        self.domain_text: str | None = None
        self.host_domains: list[DomainCapabilities] = []

    def _from_files(self) -> list[tuple[str, str]]:
        out = []
        for path in self.domain_files:
            try:
                with open(path, encoding="utf-8") as f:
                    out.append((path, f.read()))
            except OSError as exc:
                raise ConfigError(
                    f"[{GROUP}] domain_capabilities_file {path}: {exc.strerror}"
                ) from None
        return out

    def _ask(
        self,
        connection: LibvirtConnection,
        conn: libvirt.virConnect,
        guest: GuestArch,
        machine: str | None,
    ) -> str | None:
        """One ``virConnectGetDomainCapabilities``; None when libvirt refuses it.

        Raises:
            LibvirtConnectionError: the connection was lost.
            _Unsupported: the connection has no such API (libvirt's test driver).
        """
        try:
            return connection.call(
                "virConnectGetDomainCapabilities",
                conn.getDomainCapabilities,
                guest.emulator,
                guest.arch,
                machine,
                self.settings.virt_type,
                0,
            )
        except LibvirtConnectionError:
            raise
        except LibvirtCallError as exc:
            if exc.code == libvirt.VIR_ERR_NO_SUPPORT:
                raise _Unsupported(str(exc)) from None
            # nova logs this at debug level: e.g. a non-native arch with kvm.
            LOG.debug("domain capabilities of %s / %s: %s", guest.arch, machine, exc)
            return None

    def _from_libvirt(
        self,
        connection: LibvirtConnection,
        conn: libvirt.virConnect,
        host_arch: str,
        caps_xml: str,
    ) -> list[tuple[str, str]]:
        """Each guest arch's documents, in the order asked (module docstring of guests.py)."""
        try:
            guests = parse_guest_arches(caps_xml, self.settings.virt_type) if caps_xml else ()
        except LibvirtXMLError:
            guests = ()  # already warned about by the capabilities parser
        out: list[tuple[str, str]] = []
        self._asked_host_arch = any(g.arch == host_arch for g in guests)
        for guest in guests:
            gathered = []
            for machine in machine_types(guest, self.hw_machine_type):
                text = self._ask(connection, conn, guest, machine)
                if text is None:
                    gathered = []  # nova drops the arch's earlier answers too
                    continue
                gathered.append((f"{guest.arch} {machine or '(default)'}", text))
            out += gathered
        return out

    def domains(
        self, connection: LibvirtConnection, conn: libvirt.virConnect, arch: str, caps_xml: str
    ) -> list[DomainCapabilities]:
        """The domain capabilities of every guest arch and machine type libvirt answers for.

        One per (arch, machine type libvirt expands it to), a later answer for
        the same pair replacing an earlier one (nova keys them so). Empty when
        libvirt cannot say (the test driver without ``domain_capabilities_file``).

        Raises:
            LibvirtConnectionError: the connection was lost.
            ConfigError: a ``domain_capabilities_file`` cannot be read.
        """
        self.domain_text = None
        self.host_domains = []
        try:
            texts = (
                self._from_files()
                if self.domain_files
                else self._from_libvirt(connection, conn, arch, caps_xml)
            )
        except _Unsupported as exc:
            if not self._told:
                # Nothing the operator can fix (nova logs this at debug level too).
                self._told = True
                LOG.info("%s; no storage-bus, video-model, TPM or secure-boot traits", exc)
            return []
        found: dict[tuple[str, str], DomainCapabilities] = {}
        for what, text in texts:
            try:
                dom = parse_domain_capabilities(text)
            except LibvirtXMLError as exc:
                self._warn(f"{exc} ({what}); its storage-bus and video-model traits are left out")
                continue
            found[(dom.arch, dom.machine)] = dom
            if dom.arch == arch:
                self.host_domains.append(dom)
                if self.domain_text is None:
                    self.domain_text = text  # the host arch's first: AMD SEV reads it
        asked = bool(self.domain_files) or self._asked_host_arch
        if asked and not any(key[0] == arch for key in found):
            self._warn(
                f"libvirt gave no domain capabilities for the host arch {arch or '?'}: no "
                "secure-boot or TPM trait is reported"
            )
        return list(found.values())

    def read(
        self, connection: LibvirtConnection, conn: libvirt.virConnect, arch: str, caps_xml: str
    ) -> frozenset[str]:
        """Every capability and architecture trait of the host now.

        With ``[libvirt] swtpm_enabled`` and no usable emulated TPM
        (:func:`~drivers.libvirt.traits.vtpm_problem`), a warning says why no
        TPM trait is reported (nova refuses to start then).

        Args:
            connection: the agent's connection wrapper (error mapping).
            conn: the open libvirt connection.
            arch: the host CPU's arch from the host capabilities.
            caps_xml: the host capabilities document (guest architectures).

        Raises:
            LibvirtConnectionError: the connection was lost.
        """
        version = connection.call("virConnectGetLibVersion", conn.getLibVersion)
        try:
            arches = guest_arches(caps_xml) if caps_xml else frozenset()
        except LibvirtXMLError:
            arches = frozenset()  # already warned about by the capabilities parser
        domains = self.domains(connection, conn, arch, caps_xml)
        if self.settings.swtpm_enabled:
            problem = vtpm_problem(arch, domains, self.settings.virt_type)
            if problem:
                self._warn(f"[{GROUP}] swtpm_enabled: {problem}; no TPM trait is reported")
        return capability_traits(arch, arches, domains, int(version), self.settings)


class _Unsupported(Exception):
    """The connection cannot answer virConnectGetDomainCapabilities at all."""
