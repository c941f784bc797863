"""nova's database connection (issue #17): read-only, drivers, passwords never shown."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from agent.model.exceptions import ConfigError
from agent.nova_import import db
from tests.helpers.nova_cell import build_cell


def test_sqlite_is_opened_read_only(tmp_path):
    path = tmp_path / "cell.sqlite"
    ids = build_cell(path, "ro")
    url = f"sqlite:///{path}"
    engine = db.open_engine(url, "--cell-db")
    tables = db.reflect(engine, url, "--cell-db", db.CELL_TABLES)
    rows = db.read_cell(engine, tables, {ids["cn1"]})
    assert [r["hypervisor_hostname"] for r in rows.compute_nodes.values()] == [ids["cn1"]]
    # the resize's instance lives on cn2 but moves from cn1: it is read too
    assert ids["i_resize"] in rows.instances and ids["i_deleted"] not in rows.instances
    assert [m["uuid"] for m in rows.migrations] == [ids["mig"]]  # the confirmed one is done
    with pytest.raises(sa.exc.OperationalError, match="readonly"), engine.begin() as conn:
        conn.execute(sa.text("UPDATE compute_nodes SET vcpus = 1"))
    engine.dispose()


def test_write_uuid_only_fills_a_null_column(tmp_path):
    path = tmp_path / "cell.sqlite"
    build_cell(path, "wu")
    url = f"sqlite:///{path}"
    engine = db.open_engine(url, "--cell-db", write=True)
    table = db.reflect(engine, url, "--cell-db", ["compute_nodes"])["compute_nodes"]
    assert db.write_uuid(engine, table, 2, "8d5b0c1e-0000-4000-8000-000000000002")
    assert not db.write_uuid(engine, table, 1, "8d5b0c1e-0000-4000-8000-000000000001")
    engine.dispose()


def test_mysql_urls_use_pymysql_and_a_read_only_session():
    engine = db.open_engine("mysql://nova:s3cret@db.example/nova_cell1", "--cell-db")
    assert engine.url.drivername == "mysql+pymysql"
    assert sa.event.contains(engine, "connect", db.read_only_session)
    writer = db.open_engine("mysql+pymysql://n:p@h/c", "x", write=True)
    assert not sa.event.contains(writer, "connect", db.read_only_session)
    assert db.safe_url("mysql+pymysql://nova:s3cret@db/nova") == "mysql+pymysql://nova:***@db/nova"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sqlite://", "give the SQLite file"),
        ("sqlite:///:memory:", "give the SQLite file"),
        ("nonsense", "is not a database URL"),
    ],
)
def test_unusable_urls_are_bad_input(url, says):
    with pytest.raises(ConfigError, match=says):
        db.open_engine(url, "--cell-db")
