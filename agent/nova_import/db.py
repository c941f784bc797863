"""nova's databases, read-only: the rows the import needs.

SQLAlchemy Core over reflected tables (nova's schema as its migrations made
it; tests/fixtures/nova holds nova 34's). SQLite files are opened with
``mode=ro``; MySQL/MariaDB sessions are ``SET SESSION TRANSACTION READ ONLY``
(PyMySQL). Only ``--write-uuids`` opens a writing connection, for one
``UPDATE compute_nodes SET uuid`` per node that had none.
Soft-deleted rows (``deleted != 0``) are never imported; :func:`gone_consumers`
looks them up only to clear a stale Placement.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from agent.model.exceptions import ConfigError

Row = Mapping[str, Any]

CELL_TABLES = (
    "compute_nodes",
    "instances",
    "instance_extra",
    "pci_devices",
    "migrations",
    "block_device_mapping",
)
"""Tables of the cell database the import reads."""

API_TABLES = ("aggregates", "aggregate_hosts")
"""Tables of the API database the import reads (host aggregates)."""

MIGRATION_DONE = frozenset(
    {"accepted", "confirmed", "reverted", "error", "failed", "completed", "cancelled", "done"}
)
"""Statuses of a migration no longer in progress (nova's
``migration_get_in_progress_by_host_and_node`` leaves these out)."""

EVACUATION_OPEN = frozenset({"accepted", "pre-migrating", "done"})
"""Statuses of an evacuation whose source still holds the instance's allocation: nova
gives it back when the source compute starts again and marks the migration completed."""


def safe_url(url: str) -> str:
    """``url`` with its password masked, for logs and messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL carries no recognisable password field
        return "<unparsable database URL>"


def _sqlite_readonly(path: str) -> Engine:
    if not Path(path).is_file():
        raise ConfigError(f"nova database: no such file {path}; give sqlite:////absolute/path")
    uri = f"file:{Path(path).resolve()}?mode=ro"
    return sa.create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True))


def open_engine(url: str, what: str, write: bool = False) -> Engine:
    """An engine on nova's database at ``url``; read-only unless ``write``.

    ``mysql://`` without a driver uses PyMySQL (nova's own default).

    Raises:
        ConfigError: the URL is not a database URL, or names an in-memory or
            missing SQLite file.
    """
    try:
        parsed = make_url(url)
    except Exception as exc:  # any parse error means the URL is unusable
        raise ConfigError(f"{what} {safe_url(url)!r} is not a database URL: {exc}") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise ConfigError(f"{what}: give the SQLite file, sqlite:////absolute/path")
        if not write:
            return _sqlite_readonly(parsed.database)
        return sa.create_engine(parsed)
    if backend == "mysql" and parsed.drivername == "mysql":
        parsed = parsed.set(drivername="mysql+pymysql")
    engine = sa.create_engine(parsed, pool_pre_ping=True)
    if not write and backend == "mysql":
        sa.event.listen(engine, "connect", read_only_session)
    return engine


def read_only_session(dbapi_connection: Any, _record: Any) -> None:
    """Make a new MySQL/MariaDB connection refuse writes (a pool ``connect`` listener)."""
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION READ ONLY")


def reflect(engine: Engine, url: str, what: str, tables: Iterable[str]) -> dict[str, sa.Table]:
    """The named tables, as the database holds them.

    Raises:
        ConfigError: the database cannot be opened or lacks one of ``tables``
            (not nova's cell or API database).
    """
    wanted = list(tables)
    try:
        with engine.connect() as conn:
            present = set(sa.inspect(conn).get_table_names())
            missing = [t for t in wanted if t not in present]
            if missing:
                raise ConfigError(
                    f"{what} {safe_url(url)} has no table {', '.join(missing)}: it is not "
                    "nova's database of that kind (--cell-db: [database] connection of a cell's "
                    "nova.conf; --api-db: [api_database] connection)"
                )
            meta = sa.MetaData()
            return {t: sa.Table(t, meta, autoload_with=conn) for t in wanted}
    except sa.exc.SQLAlchemyError as exc:
        detail = " ".join(str(exc).split())[:300]
        password = make_url(url).password
        if password:  # a driver may echo its connection arguments
            detail = detail.replace(str(password), "***")
        raise ConfigError(f"{what} {safe_url(url)} cannot be opened: {detail}") from None


@dataclass(slots=True)
class CellRows:
    """What the import reads from one cell database (every row ``deleted = 0``).

    Attributes:
        compute_nodes: ``compute_nodes`` rows, by ``id``.
        instances: ``instances`` rows on those nodes, by ``uuid``.
        extras: ``instance_extra`` rows, by ``instance_uuid``.
        pci_devices: ``pci_devices`` rows of those nodes.
        migrations: ``migrations`` in progress touching those nodes (evacuations
            until nova marks them completed).
        bdms: ``block_device_mapping`` rows, by ``instance_uuid``.
        aggregates: ``{host: {aggregate UUID}}`` from the API database.
    """

    compute_nodes: dict[int, Row] = field(default_factory=dict)
    instances: dict[str, Row] = field(default_factory=dict)
    extras: dict[str, Row] = field(default_factory=dict)
    pci_devices: list[Row] = field(default_factory=list)
    migrations: list[Row] = field(default_factory=list)
    bdms: dict[str, list[Row]] = field(default_factory=dict)
    aggregates: dict[str, set[str]] = field(default_factory=dict)


def _live(table: sa.Table) -> Any:
    return sa.or_(table.c.deleted == 0, table.c.deleted.is_(None))


def _rows_in(conn: sa.Connection, table: sa.Table, column: str, values: Iterable[Any]) -> list[Row]:
    """Live rows of ``table`` whose ``column`` is one of ``values`` (chunks of 500 per query)."""
    wanted = sorted(v for v in set(values) if v is not None)
    out: list[Row] = []
    for i in range(0, len(wanted), 500):
        query = sa.select(table).where(_live(table), table.c[column].in_(wanted[i : i + 500]))
        out.extend(dict(r) for r in conn.execute(query).mappings())
    return out


def read_cell(engine: Engine, tables: Mapping[str, sa.Table], hosts: set[str]) -> CellRows:
    """Read the rows of the compute nodes named in ``hosts`` (all when empty).

    A name in ``hosts`` matches ``compute_nodes.host`` or ``hypervisor_hostname``.
    Instances read: those on the nodes, and those a migration of the nodes moves.
    """
    cn = tables["compute_nodes"]
    out = CellRows()
    with engine.connect() as conn:
        for row in conn.execute(sa.select(cn).where(_live(cn)).order_by(cn.c.id)).mappings():
            if not hosts or {row["host"], row["hypervisor_hostname"]} & hosts:
                out.compute_nodes[row["id"]] = dict(row)
        nodes = {r["hypervisor_hostname"] for r in out.compute_nodes.values()}
        out.migrations = _in_progress(conn, tables["migrations"], nodes)
        found = _rows_in(conn, tables["instances"], "node", nodes)
        moved = {m["instance_uuid"] for m in out.migrations} - {r["uuid"] for r in found}
        found += _rows_in(conn, tables["instances"], "uuid", moved)
        out.instances = {r["uuid"]: r for r in sorted(found, key=lambda r: r["uuid"])}
        for row in _rows_in(conn, tables["instance_extra"], "instance_uuid", out.instances):
            out.extras[row["instance_uuid"]] = row
        for row in _rows_in(conn, tables["block_device_mapping"], "instance_uuid", out.instances):
            out.bdms.setdefault(row["instance_uuid"], []).append(row)
        pci = _rows_in(conn, tables["pci_devices"], "compute_node_id", out.compute_nodes)
        out.pci_devices = sorted(pci, key=lambda r: (r["compute_node_id"], r["address"]))
    return out


def _in_progress(conn: sa.Connection, table: sa.Table, nodes: set[str]) -> list[Row]:
    query = sa.select(table).where(_live(table)).order_by(table.c.id)
    return [
        dict(r)
        for r in conn.execute(query).mappings()
        if _open(r) and {r["source_node"], r["dest_node"]} & nodes
    ]


def _open(migration: Row) -> bool:
    status = migration["status"] or ""
    if migration["migration_type"] == "evacuation":
        return status in EVACUATION_OPEN
    return status not in MIGRATION_DONE


def gone_consumers(
    engine: Engine, tables: Mapping[str, sa.Table], uuids: set[str]
) -> dict[str, str]:
    """Which of ``uuids`` nova has as deleted instances or finished migrations.

    Returns:
        ``{uuid: reason}``, e.g. ``"instance deleted in nova"``,
        ``"migration confirmed in nova"``; a UUID nova does not know is absent.
    """
    inst, mig = tables["instances"], tables["migrations"]
    wanted = sorted(uuids)
    out: dict[str, str] = {}
    with engine.connect() as conn:
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            query = sa.select(inst.c.uuid).where(inst.c.uuid.in_(chunk), inst.c.deleted != 0)
            for (uuid,) in conn.execute(query):
                out[uuid] = "instance deleted in nova"
            query = sa.select(mig).where(mig.c.uuid.in_(chunk))
            for row in conn.execute(query).mappings():
                if row["deleted"] or not _open(row):
                    out[row["uuid"]] = f"migration {row['status']} in nova"
    return out


def read_aggregates(engine: Engine, tables: Mapping[str, sa.Table]) -> dict[str, set[str]]:
    """``{host: {aggregate UUID}}`` from nova's API database (host aggregates).

    Placement's aggregates carry the UUIDs of nova's host aggregates (what
    ``nova-manage placement sync_aggregates`` writes).
    """
    agg, hosts = tables["aggregates"], tables["aggregate_hosts"]
    query = sa.select(hosts.c.host, agg.c.uuid).join(agg, agg.c.id == hosts.c.aggregate_id)
    out: dict[str, set[str]] = {}
    with engine.connect() as conn:
        for host, uuid in conn.execute(query):
            if host and uuid:
                out.setdefault(host, set()).add(uuid)
    return out


def write_uuid(engine: Engine, table: sa.Table, node_id: int, uuid: str) -> bool:
    """``UPDATE compute_nodes SET uuid = :uuid WHERE id = :id AND uuid IS NULL``.

    Returns:
        True when the row was updated (False: someone set a UUID meanwhile).
    """
    with engine.begin() as conn:
        result = conn.execute(
            sa.update(table).where(table.c.id == node_id, table.c.uuid.is_(None)).values(uuid=uuid)
        )
    return result.rowcount == 1
