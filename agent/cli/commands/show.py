"""``compute-agent show``: Placement's view of this host, and drift from the driver's."""

from __future__ import annotations

import argparse
from typing import Any

from rich.tree import Tree

from agent.audit import record_json
from agent.cli.commands.common import add_config_args, add_driver_args, add_format_arg, load_conf
from agent.cli.output import Output, escape
from agent.cli.render import provider_branch, provider_document
from agent.model.exceptions import ReshapeNeeded
from agent.model.provider_tree import ProviderTree
from agent.model.tree_diff import diff_trees
from agent.model.yields import FieldLedger, Yielded
from agent.placement import endpoints
from agent.placement.connect import placement_client
from agent.placement.report import ReportClient
from agent.placement.yields import settle
from agent.service.exit_codes import EXIT_DRIFT, EXIT_OK
from agent.shape.adapter import DriverAdapter, adapt
from agent.state.store import StateStore
from drivers import load_driver

NAME = "show"
HELP = "show what Placement holds for this host and how it differs from the driver's view"


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``show``."""
    parser.description = (
        "Placement's view of every node of the configured driver: providers with their "
        "generations, inventories with usage against capacity, traits and aggregates; then "
        "what differs from what the driver reports now (drift), and the fields the agent "
        "yields to another writer that disagrees. Writes nothing."
    )
    add_config_args(parser)
    add_driver_args(parser)
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"exit {EXIT_DRIFT} when there is drift or a field is yielded to another writer",
    )
    add_format_arg(parser)


def drift_lines(held: ProviderTree, desired: ProviderTree) -> list[str]:
    """One line per difference between what Placement holds and what the driver reports."""
    d = diff_trees(held, desired)

    def name(uuid: str) -> str:
        return (desired if desired.exists(uuid) else held).data(uuid).name

    lines = [f"provider {name(u)} is missing in Placement" for u in d.created]
    lines += [f"provider {name(u)} is in Placement but not on the host" for u in d.removed]
    lines += [f"provider {name(u)} has another parent in Placement" for u in d.reparented]
    for u in d.inventory:
        if u in d.created:
            continue
        old, new = held.data(u).inventory, desired.data(u).inventory
        for rc in sorted(set(old) | set(new)):
            if old.get(rc) != new.get(rc):
                was = old[rc].to_placement() if rc in old else "none"
                now = new[rc].to_placement() if rc in new else "none"
                lines.append(f"{name(u)} {rc}: Placement has {was}, the host has {now}")
    for kind in ("traits", "aggregates"):
        for u in getattr(d, kind):
            if u in d.created:
                continue
            old, new = getattr(held.data(u), kind), getattr(desired.data(u), kind)
            extra, lacking = sorted(old - new), sorted(new - old)
            lines.append(f"{name(u)} {kind}: Placement also has {extra}, lacks {lacking}")
    return lines


def yielded_fields(
    state: StateStore, nodename: str, held: ProviderTree, desired: ProviderTree
) -> list[Yielded]:
    """The fields of ``nodename``'s tree yielded to another writer, as the next cycle sees them.

    Read from the state directory (``fields/NODE.json``) and reviewed against what
    Placement holds and the driver reports now (:func:`agent.placement.yields.settle`,
    nothing saved or logged); a yielded field takes the held value in ``desired``,
    so it is not drift as well.
    """
    ledger = FieldLedger.from_json(state.fields(nodename))
    settle(ledger, held, desired, held.get_provider_uuids(), log=False)
    return ledger.yields()


def consumer_states(state: StateStore, nodename: str) -> list[dict[str, str]]:
    """Each consumer of ``nodename`` with its state and why, as the last audit found it.

    Read from the audit's record in ``state_path`` (``consumers/NODE.json``):
    ``[{"consumer", "state", "why", "drift"}]`` sorted by consumer; empty when
    no cycle has audited the node yet.
    """
    record = record_json.load(state.consumers(nodename))
    return [record.statuses[c].to_json() for c in sorted(record.statuses)]


def _print_consumers(out: Output, consumers: list[dict[str, str]], audited: bool) -> None:
    if not audited:
        out.print("consumers: not audited yet (no cycle has run on this node)")
        return
    if not consumers:
        out.print("consumers: none (as the last cycle's audit found them)")
        return
    out.print("consumers (as the last cycle's audit found them):")
    for c in consumers:
        out.print(
            f"  {escape(c['consumer'])}  [bold]{escape(c['state'])}[/bold]: {escape(c['why'])}"
        )
        if c["drift"]:
            out.print(
                f"[yellow]drift[/yellow]: instance {escape(c['consumer'])}: {escape(c['drift'])}"
            )


def _differences(
    driver: DriverAdapter, state: StateStore, nodename: str, held: ProviderTree
) -> tuple[list[str], list[Yielded]]:
    """The drift lines between ``held`` and the driver's layout, and the fields yielded."""
    desired = held.copy()
    try:
        driver.update_provider_tree(desired, nodename)
    except ReshapeNeeded as exc:
        return [f"a reshape is needed: {exc}"], []
    yielded = yielded_fields(state, nodename, held, desired)
    return drift_lines(held, desired), yielded


def run(args: argparse.Namespace) -> int:
    """Print each node's providers from Placement, then the drift."""
    conf = load_conf(args)
    driver = adapt(load_driver(conf.compute.driver, conf), conf)
    out = Output()
    as_json = args.format == "json"
    nodes: list[dict[str, Any]] = []
    drift = False
    with placement_client(conf) as client:
        state = StateStore(conf.state_path, read_only=True)  # writes nothing, state included
        report = ReportClient(client, state)
        for nodename in driver.get_nodenames():
            held = report.read_tree(nodename)
            if held is None:
                nodes.append({"nodename": nodename, "in_placement": False, "providers": []})
                nodes[-1]["drift"] = ["Placement has no compute node of this name"]
                if not as_json:
                    out.print(f"node {escape(nodename)}: {nodes[-1]['drift'][0]}")
                drift = True
                continue
            usages = {u: endpoints.get_usages(client, u) for u in held.get_provider_uuids()}
            lines, yielded = _differences(driver, state, nodename, held)
            consumers = consumer_states(state, nodename)
            drifting = [c for c in consumers if c["drift"]]
            drift = drift or bool(lines) or bool(drifting) or bool(yielded)
            nodes.append(
                {
                    "nodename": nodename,
                    "in_placement": True,
                    "providers": [
                        {
                            **provider_document(p),
                            "generation": p.generation,
                            "usages": dict(usages.get(p.uuid, {})),
                        }
                        for p in held.all_data()
                    ],
                    "drift": lines,
                    "yielded": [y.to_json() for y in yielded],
                    "consumers": consumers,
                }
            )
            if as_json:
                continue
            top = Tree(f"[bold underline]node {escape(nodename)} in Placement[/bold underline]")
            for root in held.root_uuids:
                provider_branch(held, root, top, usages)
            out.tree(top)
            _print_consumers(out, consumers, state.consumers(nodename) is not None)
            if not lines and not drifting and not yielded:
                out.print("no drift: Placement matches what the driver reports")
            for line in lines:
                out.print(f"[yellow]drift[/yellow]: {escape(line)}")
            for y in yielded:
                out.print(f"[yellow]yielded to another writer[/yellow]: {escape(y.describe())}")
    if as_json:
        out.json({"nodes": nodes, "drift": drift})
    return EXIT_DRIFT if drift and args.check else EXIT_OK
