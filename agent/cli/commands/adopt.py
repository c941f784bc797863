"""``compute-agent adopt --dry-run``: what the start-up cycle will take over from nova-compute.

Reads Placement and the driver, writes nothing. For each node it lists the
providers the agent will take over (nova's compute node found by name,
nova's vGPU and PCI providers, an earlier agent's), those already the
agent's, those it leaves alone (another owner's), the providers it will
create or remove, and the consumers whose allocations are on the tree
(kept; docs/deployment.md, "Moving a host from nova-compute"). The
takeover itself is the first cycle of ``compute-agent run``.
"""

from __future__ import annotations

import argparse

from agent.cli.commands.common import add_config_args, add_driver_args, load_conf
from agent.model import ownership
from agent.model.exceptions import ReshapeNeeded
from agent.model.provider_tree import ProviderTree
from agent.placement import endpoints
from agent.placement.connect import placement_client
from agent.placement.report import ReportClient
from agent.service.exit_codes import EXIT_OK
from agent.shape.adapter import adapt
from agent.state.node_identity import nova_identity
from agent.state.store import StateStore
from drivers import load_driver

NAME = "adopt"
HELP = "say what the agent takes over from nova-compute on this host (writes nothing)"


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``adopt``."""
    parser.description = __doc__.split("\n\n")[1].replace("\n", " ").replace("``", "")
    add_config_args(parser)
    add_driver_args(parser)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        required=True,
        help="report only (required: the takeover is the start-up cycle of 'run')",
    )


def node_report(held: ProviderTree, desired: ProviderTree, nodename: str, owner: str) -> list[str]:
    """Lines for one node: taken over, already ours, left alone, created, removed."""
    lines = [
        f"take over {name} ({uuid}): {reason}"
        for name, uuid, reason in ownership.to_adopt(held, nodename, owner)
    ]
    adopt = {uuid for _, uuid, _ in ownership.to_adopt(held, nodename, owner)}
    ours = ownership.owned(held, nodename, owner) - adopt
    foreign = set(ownership.foreign(held, nodename, owner))
    for uuid in held.get_provider_uuids(held.data(nodename).uuid):
        name = held.data(uuid).name
        if uuid in ours:
            lines.append(f"already the agent's: {name} ({uuid})")
        elif uuid in foreign:
            lines.append(f"left alone (not the agent's): {name} ({uuid})")
    root = desired.data(nodename).uuid
    for uuid in desired.get_provider_uuids(root):
        if not held.exists(uuid):
            lines.append(f"create {desired.data(uuid).name}")
    for uuid in held.get_provider_uuids(held.data(nodename).uuid):
        if not desired.exists(uuid):
            lines.append(f"remove {held.data(uuid).name} ({uuid}) unless allocations hold it")
    return lines


def run(args: argparse.Namespace) -> int:
    """Print, node by node, what the next start-up cycle takes over."""
    conf = load_conf(args)
    driver = adapt(load_driver(conf.compute.driver, conf), conf)
    owner = conf.compute.owner_trait
    with placement_client(conf) as client:
        # Read-only: the mirror records what it reads, which must not reach the disk.
        report = ReportClient(
            client, StateStore(conf.state_path, read_only=True, **nova_identity(conf))
        )
        for nodename in driver.get_nodenames():
            held = report.read_tree(nodename)
            if held is None:
                print(f"node {nodename}: Placement has no compute node of this name; it is created")
                continue
            desired = held.copy()
            try:
                driver.update_provider_tree(desired, nodename)
            except ReshapeNeeded as exc:
                print(f"node {nodename}: the start-up cycle reshapes the tree: {exc}")
                desired = held.copy()
            print(f"node {nodename} (compute node {held.data(nodename).uuid}):")
            for line in node_report(held, desired, nodename, owner):
                print(f"  {line}")
            consumers = {
                c
                for u in ownership.owned(held, nodename, owner)
                for c in endpoints.get_provider_allocations(client, u)["allocations"]
            }
            print(f"  allocations kept: {len(consumers)} consumer(s) hold resources here")
    return EXIT_OK
