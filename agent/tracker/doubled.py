"""Placement as evidence of nova-compute: the host's CPUs and memory offered twice.

With ``[numa] model_in_placement`` the agent holds VCPU, PCPU and MEMORY_MB on the NUMA
cells and none on the compute node. nova 34's libvirt driver puts them on the compute
node (``LibvirtDriver.update_provider_tree``) and its resource tracker writes that at
start-up and at every claim (``ResourceTracker._update_to_placement``). So when
Placement's compute node holds any of them again while Placement's cells of the agent's
layout hold them too, another writer restored them: nova-compute's tracker, running
beside an agent told it does not (``[compute_agent] nova_compute = false``, or ``auto``
before this host showed it). No write of the agent's makes that state: its reshape
moves them in one ``POST /reshaper``, and a flat layout never creates cells.

The agent must not go on then (the host offers its CPUs twice, nova's allocations sit on
the compute node the agent empties, each side writes the three fields back): the node's
cycle fails, before anything is written, with one line naming nova-compute's tracker and
both ways out. ``compute-agent status`` then exits 2 (the cycle failed), never 1
(degraded). docs/service.md, "nova-compute beside the agent".
"""

from __future__ import annotations

from agent.model.exceptions import AgentError
from agent.model.provider_tree import ProviderTree
from agent.shape.numa_cells import CPU_MEMORY_CLASSES


class NovaTrackerBeside(AgentError):
    """nova-compute's resource tracker writes this host's tree beside the agent's NUMA
    layout (module docstring)."""


def check_not_doubled(nodename: str, held: ProviderTree, model_numa: bool) -> None:
    """Fail when Placement's compute node holds CPU or memory classes that the agent's
    NUMA layout keeps on the cells, while Placement's cells hold them too.

    Checked on the tree as read, before the layout (a start-up reshape would otherwise move
    nova's classes back onto the cells at each start, and a periodic cycle would ask for
    that reshape: exit 4, a restart, the same again).

    Args:
        nodename: the compute node's name (the root provider's).
        held: the tree as Placement holds it (read this cycle).
        model_numa: ``[numa] model_in_placement``: the layout puts every CPU and memory
            class on the cells of a host that has cells
            (:func:`agent.shape.layout.desired_providers`).

    Raises:
        NovaTrackerBeside: one line naming the classes, the cells, nova-compute's
            tracker and the two fixes.
    """
    if not model_numa or not held.exists(nodename):
        return
    root = held.data(nodename).uuid
    restored = sorted(CPU_MEMORY_CLASSES & set(held.data(root).inventory))
    cells = [u for u in held.children(root) if CPU_MEMORY_CLASSES & set(held.data(u).inventory)]
    if not cells or not restored:
        return
    names = ", ".join(sorted(held.data(u).name for u in cells))
    raise NovaTrackerBeside(
        f"compute node {nodename} ({root}) holds {', '.join(restored)} again while its NUMA "
        f"cells {names} hold them ([numa] model_in_placement = true): another writer put "
        "them back, nova-compute's resource tracker (its libvirt driver reports them on "
        "the compute node at every claim), and the host offers its CPUs and memory twice; "
        "nothing written to this node. Beside nova-compute set [numa] model_in_placement = "
        "false and [compute_agent] nova_compute = true and restart the agent (its start-up "
        "cycle lays the host out flat), or stop nova-compute on this host "
        "(docs/service.md, 'nova-compute beside the agent')"
    )
