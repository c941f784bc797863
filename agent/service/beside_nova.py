"""nova-compute beside the agent: the evidence that it runs now, and what is refused then.

nova-compute 34 keeps running on a host the agent tracks (it builds and moves
instances), and its resource tracker writes the host's tree at start-up and at every
claim (``ResourceTracker._update`` -> ``_update_to_placement``, whatever
``update_resources_interval`` says). A layout of the agent's that nova's tracker writes
back cannot live beside it (docs/deployment.md, "Beside nova-compute"):

* ``[numa] model_in_placement``: nova's libvirt driver puts VCPU, PCPU and MEMORY_MB on
  the compute node (``LibvirtDriver.update_provider_tree``), so every claim of nova's
  writes them back on the root while the agent holds them on NUMA cells (the host then
  offers its CPUs and memory twice until the agent's next cycle); and nova 34's scheduler
  does not ask per cell (``ResourceRequest`` puts the flavor's VCPU and MEMORY_MB in the
  unsuffixed group).
* ``[compute] resource_class_renames``: nova's drivers and its PCI translator report each
  class under nova's own name, so every claim writes OLD back beside the agent's NEW.
* DISK_GB left off the compute node for shared storage (an instances path on a shared file
  system, or ``[compute] shared_storage``): nova 34's libvirt driver reports DISK_GB on the
  compute node whatever sharing provider is associated (``update_provider_tree``: "Ignoring
  sharing provider - see bug #1784020").

The evidence is ``[compute_agent] nova_compute``: ``true``/``false`` as the operator
says, ``auto`` (the default) what this host shows (:mod:`.nova_evidence`: processes,
systemd). ``auto`` refuses those layouts unless nova-compute is absent by positive
evidence: "cannot tell" (the shipped unit's ``ProtectProc=invisible``, a container's own
PID namespace) refuses them too, in one line saying how to declare ``nova_compute =
false``.
"""

from __future__ import annotations

import logging
from typing import Protocol

from oslo_config import cfg

from agent.model.exceptions import ConfigError
from agent.service.nova_evidence import UNKNOWN, NovaEvidence, gather
from drivers.records import HostResources

LOG = logging.getLogger(__name__)

DOCS = "(docs/deployment.md, 'Beside nova-compute')"


def nova_compute_beside(conf: cfg.ConfigOpts) -> NovaEvidence:
    """Whether nova-compute runs beside the agent now, with the evidence in words.

    Returns:
        e.g. ``NovaEvidence("present", "[compute_agent] nova_compute = auto: pid 812 is
        nova-compute")``.
    """
    section = conf.compute_agent
    return gather(section.nova_compute, section.nova_compute_units)


def note_unknown(evidence: NovaEvidence) -> None:
    """Say at INFO that the agent cannot tell, once no layout was refused for it (a
    refusal says it in its own line)."""
    if evidence.state == UNKNOWN:
        LOG.info(
            "cannot tell whether nova-compute runs here (%s): the layouts its resource "
            "tracker writes back would be refused, none is configured; declare "
            "[compute_agent] nova_compute = true or false %s",
            evidence.words,
            DOCS,
        )


def _refused(evidence: NovaEvidence) -> str:
    """``refused beside nova-compute (...)``, or refused because the agent cannot tell."""
    if evidence.state == UNKNOWN:
        return (
            "refused while the agent cannot tell whether nova-compute runs on this host "
            f"({evidence.words})"
        )
    return f"refused beside nova-compute ({evidence.words})"


def _declare(evidence: NovaEvidence) -> str:
    """The way out when the agent cannot tell: declare that nova-compute does not run here."""
    if evidence.state != UNKNOWN:
        return ""
    return (
        "; if nova-compute does not run on this host, declare it in compute-agent.conf: "
        "[compute_agent] nova_compute = false"
    )


class HostNamed(Protocol):
    """What :func:`check_name` and :func:`check_disk` read of the driver
    (:class:`agent.shape.adapter.DriverAdapter`)."""

    def get_nodenames(self) -> list[str]: ...

    def hypervisor_hostname(self) -> str | None: ...

    def laid_out_resources(self, nodename: str) -> HostResources: ...


def check_name(adapter: HostNamed, evidence: NovaEvidence) -> None:
    """The agent's nodename must be the name nova-compute gives the compute node.

    nova 34 names a libvirt compute node after libvirt's hostname
    (``LibvirtDriver.get_available_nodes`` -> ``Host.get_hostname``), and its libvirt
    driver edits the tree by that name (``update_provider_tree(tree, nodename)``): a
    compute node the agent renamed ``[DEFAULT] host`` would make each of nova's claims
    fail. A hypervisor that cannot be asked now is let through (the driver warns).

    Raises:
        ConfigError: one line naming ``[DEFAULT] host``, both names and the fix.
    """
    nodenames = adapter.get_nodenames()
    if len(nodenames) != 1:
        return
    hostname = adapter.hypervisor_hostname()
    if hostname and hostname != nodenames[0]:
        raise ConfigError(
            f"[DEFAULT] host = {nodenames[0]} is not libvirt's hostname {hostname}, the name "
            f"nova-compute gives this compute node ({evidence.words}): set [DEFAULT] host = "
            f"{hostname} in the agent's configuration (docs/deployment.md, "
            "'Beside nova-compute')"
        )


def refuse_layouts(conf: cfg.ConfigOpts, evidence: NovaEvidence) -> None:
    """Refuse the layouts nova-compute's resource tracker writes back (module docstring):
    beside nova-compute, or when the agent cannot tell
    (:attr:`agent.service.nova_evidence.NovaEvidence.refuses`).

    Raises:
        ConfigError: one line naming the option, why, and how to return to a flat tree.
    """
    if conf.numa.model_in_placement:
        raise ConfigError(
            f"[numa] model_in_placement = true is {_refused(evidence)}: nova-compute's "
            "resource tracker writes VCPU, PCPU and MEMORY_MB back on the compute node at "
            "every claim, and nova's scheduler does not ask per NUMA cell; set [numa] "
            "model_in_placement = false and start again: the start-up cycle reshapes an "
            f"existing NUMA tree back to flat{_declare(evidence)} {DOCS}"
        )
    if conf.compute.resource_class_renames:
        renames = ", ".join(conf.compute.resource_class_renames)
        raise ConfigError(
            f"[compute] resource_class_renames = {renames} is {_refused(evidence)}: "
            "nova-compute's resource tracker reports each class under nova's own name and "
            "writes it back at every claim; remove the option and start again: the start-up "
            "cycle moves inventories and allocations back to nova's names"
            f"{_declare(evidence)} {DOCS}"
        )


def check_disk(adapter: HostNamed, evidence: NovaEvidence) -> None:
    """Refuse shared storage beside nova-compute, or when the agent cannot tell: the agent
    leaves DISK_GB off the compute node for the sharing provider, nova 34's libvirt driver
    writes it back at every claim (module docstring).

    Raises:
        ConfigError: one line naming the instances path, ``[compute] shared_storage`` and
            why.
    """
    for nodename in adapter.get_nodenames():
        if adapter.laid_out_resources(nodename).shared_storage:
            raise ConfigError(
                f"{nodename}'s instances path is on shared storage (a shared file system, or "
                f"[compute] shared_storage = true), {_refused(evidence)}: the agent reports "
                "DISK_GB on the sharing provider only, and nova-compute's resource tracker "
                "writes DISK_GB back on the compute node at every claim (nova 34 ignores "
                "sharing providers, bug 1784020); keep nova-compute's tracker alone on this "
                "host, or the agent alone ([compute_agent] nova_compute = false once "
                f"nova-compute no longer runs here) {DOCS}"
            )
