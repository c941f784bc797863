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
says, ``auto`` (the default) a process named ``nova-compute`` running on this host now
(psutil). nova's ``compute_id`` file is not evidence: it stays after a takeover, when
nova-compute no longer runs.
"""

from __future__ import annotations

import logging
import os
from typing import Protocol

import psutil
from oslo_config import cfg

from agent.model.exceptions import ConfigError
from drivers.records import HostResources

LOG = logging.getLogger(__name__)

PROC = "/proc"
"""Where processes are listed (psutil reads it too); PID 1 is hidden when other users'
processes are."""

NOVA_COMPUTE = "nova-compute"
"""nova-compute's console script (setup.cfg ``nova-compute = nova.cmd.compute:main``)."""


def running_nova_compute() -> int | None:
    """The PID of a process named nova-compute on this host (its name, or its first two
    command-line words' base name: ``python3 /usr/bin/nova-compute``), or None."""
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        info = proc.info
        if info["pid"] == me:
            continue
        words = [os.path.basename(w) for w in (info.get("cmdline") or [])[:2]]
        if info.get("name") == NOVA_COMPUTE or NOVA_COMPUTE in words:
            return int(info["pid"])
    return None


def nova_compute_beside(conf: cfg.ConfigOpts) -> tuple[bool, str]:
    """Whether nova-compute runs beside the agent now, and the evidence in words.

    Returns:
        ``(beside, evidence)``, e.g. ``(True, "[compute_agent] nova_compute = auto: pid 812
        is nova-compute")``.
    """
    setting = conf.compute_agent.nova_compute
    where = f"[compute_agent] nova_compute = {setting}"
    if setting != "auto":
        return setting == "true", where
    pid = running_nova_compute()
    if pid is not None:
        return True, f"{where}: pid {pid} is nova-compute"
    if not os.path.exists(os.path.join(PROC, "1")):
        # hidepid / systemd's ProtectProc=invisible: other users' processes are not listed,
        # so their absence says nothing (the shipped unit runs so).
        LOG.warning(
            "%s cannot tell whether nova-compute runs here: other users' processes are "
            "hidden from this process (/proc mounted with hidepid, or the unit's "
            "ProtectProc=invisible); taken as not running. Set [compute_agent] nova_compute "
            "= true or false (docs/deployment.md, 'Beside nova-compute')",
            where,
        )
        return False, f"{where}: other users' processes are hidden, none seen"
    return False, f"{where}: no nova-compute process runs"


class HostNamed(Protocol):
    """What :func:`check_name` and :func:`check_disk` read of the driver
    (:class:`agent.shape.adapter.DriverAdapter`)."""

    def get_nodenames(self) -> list[str]: ...

    def hypervisor_hostname(self) -> str | None: ...

    def laid_out_resources(self, nodename: str) -> HostResources: ...


def check_name(adapter: HostNamed, evidence: str) -> None:
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
            f"nova-compute gives this compute node ({evidence}): set [DEFAULT] host = "
            f"{hostname} in the agent's configuration (docs/deployment.md, "
            "'Beside nova-compute')"
        )


def refuse_layouts(conf: cfg.ConfigOpts, evidence: str) -> None:
    """Refuse the layouts nova-compute's resource tracker writes back (module docstring).

    Raises:
        ConfigError: one line naming the option, why, and how to return to a flat tree.
    """
    if conf.numa.model_in_placement:
        raise ConfigError(
            "[numa] model_in_placement = true is refused beside nova-compute "
            f"({evidence}): nova-compute's resource tracker writes VCPU, PCPU and MEMORY_MB "
            "back on the compute node at every claim, and nova's scheduler does not ask per "
            "NUMA cell; set [numa] model_in_placement = false and start again: the start-up "
            "cycle reshapes an existing NUMA tree back to flat (docs/deployment.md, "
            "'Beside nova-compute')"
        )
    if conf.compute.resource_class_renames:
        renames = ", ".join(conf.compute.resource_class_renames)
        raise ConfigError(
            f"[compute] resource_class_renames = {renames} is refused beside nova-compute "
            f"({evidence}): nova-compute's resource tracker reports each class under nova's "
            "own name and writes it back at every claim; remove the option and start again: "
            "the start-up cycle moves inventories and allocations back to nova's names "
            "(docs/deployment.md, 'Beside nova-compute')"
        )


def check_disk(adapter: HostNamed, evidence: str) -> None:
    """Refuse shared storage beside nova-compute: the agent leaves DISK_GB off the compute
    node for the sharing provider, nova 34's libvirt driver writes it back at every claim
    (module docstring).

    Raises:
        ConfigError: one line naming the instances path, ``[compute] shared_storage`` and
            why.
    """
    for nodename in adapter.get_nodenames():
        if adapter.laid_out_resources(nodename).shared_storage:
            raise ConfigError(
                f"{nodename}'s instances path is on shared storage (a shared file system, or "
                f"[compute] shared_storage = true), refused beside nova-compute ({evidence}): "
                "the agent reports DISK_GB on the sharing provider only, and nova-compute's "
                "resource tracker writes DISK_GB back on the compute node at every claim "
                "(nova 34 ignores sharing providers, bug 1784020); keep nova-compute's "
                "tracker alone on this host, or the agent alone ([compute_agent] "
                "nova_compute = false once nova-compute no longer runs here) "
                "(docs/deployment.md, 'Beside nova-compute')"
            )
