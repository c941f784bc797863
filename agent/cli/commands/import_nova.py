"""``compute-agent import-nova``: nova's cell database into Placement (docs/import-nova.md).

Exit codes (README): 0 everything imported; 1 some rows or consumers were
refused (the rest is imported, the summary lists them); 2 bad command-line
or configuration input (an unusable database URL, a ``--host`` no compute
node has).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterable

from agent.cli.commands.common import add_config_args, load_conf
from agent.nova_import import db
from agent.nova_import.flow import import_cell
from agent.nova_import.instances import consumers
from agent.nova_import.nodes import NodeImport, compute_node
from agent.nova_import.refusal import Refusal, RowRefused
from agent.nova_import.render import summary_lines
from agent.nova_import.result import ImportResult
from agent.nova_import.stale import GoneLookup
from agent.placement.connect import placement_client
from agent.placement.report import ReportClient
from agent.service.exit_codes import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK
from agent.shape.policy import policy_from_conf
from agent.state.store import StateStore

NAME = "import-nova"
HELP = "write nova's compute nodes, instances and migrations from its cell database to Placement"


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``import-nova``."""
    parser.description = (
        "Read nova's cell database (read-only) and write one provider tree per compute node "
        "and every instance's and migration's allocations to the Placement of [placement], "
        "through the agent's own layout and report client. Idempotent. "
        f"Exit {EXIT_OK} when all was imported, {EXIT_FAILURE} when some rows were refused "
        f"(the rest is imported), {EXIT_BAD_INPUT} for bad input. See docs/import-nova.md."
    )
    add_config_args(parser)
    parser.add_argument(
        "--cell-db",
        required=True,
        metavar="URL",
        help="nova's cell database, e.g. mysql+pymysql://nova:PW@db/nova_cell1 or "
        "sqlite:////path/nova.sqlite ([database] connection in the cell's nova.conf)",
    )
    parser.add_argument(
        "--api-db",
        metavar="URL",
        help="nova's API database: host aggregates become the compute nodes' aggregates",
    )
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="import only this compute node (host or hypervisor_hostname); repeatable",
    )
    parser.add_argument(
        "--shared-storage",
        action="append",
        default=[],
        metavar="NODE",
        help="instance disks of NODE are on shared storage (no DISK_GB on it); repeatable; "
        "'all' for every node",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the diff against Placement; write nothing"
    )
    parser.add_argument(
        "--write-uuids",
        action="store_true",
        help="write the UUID given to a compute node whose compute_nodes.uuid is NULL back "
        "to that column (the one write to nova's database)",
    )


def map_nodes(rows: db.CellRows, shared: set[str], refusals: list[Refusal]) -> list[NodeImport]:
    """Every ``compute_nodes`` row as a :class:`NodeImport`; refused rows go to ``refusals``."""
    nodes = []
    for node_id, row in rows.compute_nodes.items():
        pci = [d for d in rows.pci_devices if d["compute_node_id"] == node_id]
        is_shared = "all" in shared or bool({row["host"], row["hypervisor_hostname"]} & shared)
        try:
            node = compute_node(row, pci, is_shared)
        except RowRefused as exc:
            refusals.append(exc.refusal)
            continue
        refusals.extend(node.pci_refusals)
        nodes.append(node)
    return nodes


def _unknown(names: Iterable[str], rows: db.CellRows) -> list[str]:
    known = {n for r in rows.compute_nodes.values() for n in (r["host"], r["hypervisor_hostname"])}
    return sorted(n for n in names if n not in known and n != "all")


def _write_uuids(url: str, res: ImportResult) -> list[str]:
    if not res.new_uuids:
        return []
    engine = db.open_engine(url, "--cell-db", write=True)
    try:
        table = db.reflect(engine, url, "--cell-db", ["compute_nodes"])["compute_nodes"]
        return [
            f"compute_nodes id {node_id}: uuid set to {uuid}"
            if db.write_uuid(engine, table, node_id, uuid)
            else f"compute_nodes id {node_id}: uuid not set (the row has one now)"
            for node_id, uuid in sorted(res.new_uuids.items())
        ]
    finally:
        engine.dispose()


def gone_lookup(url: str) -> GoneLookup:
    """The stale-allocation lookup on the cell database at ``url`` (read-only, on demand)."""

    def gone(uuids: set[str]) -> dict[str, str]:
        engine = db.open_engine(url, "--cell-db")
        try:
            tables = db.reflect(engine, url, "--cell-db", ["instances", "migrations"])
            return db.gone_consumers(engine, tables, uuids)
        finally:
            engine.dispose()

    return gone


def read_nova(args: argparse.Namespace) -> tuple[db.CellRows, str | None]:
    """The cell's rows and aggregates, and a bad-input message (None when the input is good).

    Raises:
        ConfigError: a database URL is unusable or names no nova database.
    """
    engine = db.open_engine(args.cell_db, "--cell-db")
    try:
        tables = db.reflect(engine, args.cell_db, "--cell-db", db.CELL_TABLES)
        rows = db.read_cell(engine, tables, set(args.host))
    finally:
        engine.dispose()
    unknown = _unknown(args.host, rows) + _unknown(args.shared_storage, rows)
    if unknown:
        return rows, f"no compute node in {db.safe_url(args.cell_db)} is named {', '.join(unknown)}"
    if args.api_db:
        api = db.open_engine(args.api_db, "--api-db")
        try:
            rows.aggregates = db.read_aggregates(
                api, db.reflect(api, args.api_db, "--api-db", db.API_TABLES)
            )
        finally:
            api.dispose()
    return rows, None


def run(args: argparse.Namespace) -> int:
    """Import (or diff) and print the summary; the exit code says how it went."""
    conf = load_conf(args)
    rows, bad = read_nova(args)
    if bad:
        print(f"compute-agent import-nova: {bad}", file=sys.stderr)
        return EXIT_BAD_INPUT
    refusals: list[Refusal] = []
    nodes = map_nodes(rows, set(args.shared_storage), refusals)
    found = consumers(rows)
    refusals.extend(found.refusals)
    with placement_client(conf) as client, tempfile.TemporaryDirectory() as state:
        # The import's own state directory: the agent's compute_nodes.json is never touched.
        report = ReportClient(client, StateStore(state))
        res = import_cell(
            report,
            nodes,
            found,
            policy_from_conf(conf),
            rows.aggregates,
            args.dry_run,
            gone=gone_lookup(args.cell_db),
        )
        requests = client.total_requests()
        writes = sum(n for (method, _), n in client.counts.items() if method != "GET")
    res.refusals[:0] = refusals
    for line in res.diff + res.removed_lines:
        print(line)
    if not args.dry_run and args.write_uuids:
        for line in _write_uuids(args.cell_db, res):
            print(line)
    for refusal in res.refusals:
        print(f"refused: {refusal.line()}", file=sys.stderr)
    for line in summary_lines(res, args.dry_run, requests, writes):
        print(line)
    return EXIT_FAILURE if res.refusals else EXIT_OK
