"""Asks libvirt for what :mod:`drivers.libvirt.traits` turns into capability traits.

Calls: ``virConnectGetLibVersion`` and ``virConnectGetDomainCapabilities``
(for the host arch and ``[libvirt] virt_type``), or ``[libvirt]
domain_capabilities_file`` with the ``test:///`` driver, which cannot answer
the latter. A failure of either is warned about once and costs only the
traits that depend on it; the cycle goes on.
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
from drivers.libvirt.options import GROUP
from drivers.libvirt.traits import (
    DomainCapabilities,
    TraitSettings,
    capability_traits,
    guest_arches,
    parse_domain_capabilities,
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
        image_type_exclude_list=tuple(conf.compute.image_type_exclude_list),
    )


class CapabilityTraits:
    """Reads the capability traits of the host on each call (they follow libvirt upgrades).

    Args:
        conf: the loaded configuration.
        warn: where warnings go (the driver logs each once).

    Attributes:
        domain_text: the domain capabilities document of the last read, or None
            when libvirt could not give one (memory encryption reads it too).
    """

    def __init__(self, conf: cfg.ConfigOpts, warn: Callable[[str], None]) -> None:
        self.settings = settings_from_conf(conf)
        self.domain_file: str | None = conf[GROUP].domain_capabilities_file
        self._warn = warn
        self._told = False
        self.domain_text: str | None = None

    def _domain_text(
        self, connection: LibvirtConnection, conn: libvirt.virConnect, arch: str
    ) -> str | None:
        if self.domain_file:
            try:
                with open(self.domain_file, encoding="utf-8") as f:
                    return f.read()
            except OSError as exc:
                raise ConfigError(
                    f"[{GROUP}] domain_capabilities_file {self.domain_file}: {exc.strerror}"
                ) from None
        try:
            return connection.call(
                "virConnectGetDomainCapabilities",
                conn.getDomainCapabilities,
                None,
                arch or None,
                None,
                self.settings.virt_type,
                0,
            )
        except LibvirtConnectionError:
            raise
        except LibvirtCallError as exc:
            if exc.code == libvirt.VIR_ERR_NO_SUPPORT:
                # libvirt's test driver, or a hypervisor driver without the API:
                # nothing the operator can fix (nova logs this at debug level too).
                if not self._told:
                    self._told = True
                    LOG.info("%s; no storage-bus, video-model, TPM or secure-boot traits", exc)
                return None
            self._warn(
                f"{exc}; no storage-bus, video-model, TPM or secure-boot traits are reported"
            )
            return None

    def domain(
        self, connection: LibvirtConnection, conn: libvirt.virConnect, arch: str
    ) -> DomainCapabilities | None:
        """The host arch's domain capabilities, or None (warned) when libvirt cannot say.

        Raises:
            LibvirtConnectionError: the connection was lost.
            ConfigError: ``domain_capabilities_file`` cannot be read.
        """
        text = self.domain_text = self._domain_text(connection, conn, arch)
        if text is None:
            return None
        try:
            return parse_domain_capabilities(text)
        except LibvirtXMLError as exc:
            self._warn(f"{exc}; no storage-bus, video-model, TPM or secure-boot traits")
            return None

    def read(
        self, connection: LibvirtConnection, conn: libvirt.virConnect, arch: str, caps_xml: str
    ) -> frozenset[str]:
        """Every capability and architecture trait of the host now.

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
        domain = self.domain(connection, conn, arch)
        return capability_traits(arch, arches, domain, int(version), self.settings)
