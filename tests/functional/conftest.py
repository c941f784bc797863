"""Real Placement for functional tests: in-process (wsgi-intercept), served on loopback,
and served on a MariaDB server (as production Placement runs).

Both run the real openstack-placement application on SQLite. The in-process
one is shared by the session (Placement's database engine is global to a
process), so tests there use their own nodenames; the served one is a
subprocess per test (``compute-agent placement-serve``) that can be stopped
and started again on the same port and database.

Under pytest-xdist (``make test`` runs ``pytest -n auto --dist loadgroup``) each
worker is a process of its own, so each has its own session: its own in-process
Placement and temporary directories, and servers on ports the kernel picked
(tests/helpers/net.py). The tests that use the session's MariaDB server are one
xdist group (:func:`pytest_collection_modifyitems`): one worker runs them all, so
the suite starts one server, not one per worker.
"""

from __future__ import annotations

import pytest

from agent.placement.embedded import EmbeddedPlacement
from tests.helpers.keystone_server import Keystone
from tests.helpers.mariadb import MARIADB_GROUP, MariaDB
from tests.helpers.served import ServedPlacement


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every test that uses the ``mariadb`` fixture (directly or through
    ``served_mariadb``) into :data:`MARIADB_GROUP`; without ``-n`` the mark does nothing."""
    for item in items:
        if "mariadb" in getattr(item, "fixturenames", ()):
            item.add_marker(MARIADB_GROUP)


@pytest.fixture(scope="session")
def embedded(tmp_path_factory) -> EmbeddedPlacement:
    with EmbeddedPlacement(tmp_path_factory.mktemp("embedded-placement")) as placement:
        yield placement


@pytest.fixture
def served(tmp_path) -> ServedPlacement:
    placement = ServedPlacement(tmp_path / "served")
    placement.start()
    yield placement
    placement.stop()


@pytest.fixture(scope="module")
def served_module(tmp_path_factory) -> ServedPlacement:
    """One ``placement-serve`` for a whole module whose tests each use nodenames and
    consumers of their own and never stop it (a module overrides ``served`` with it): the
    subprocess and its schema sync are paid once, not once per test."""
    placement = ServedPlacement(tmp_path_factory.mktemp("served-module"))
    placement.start()
    yield placement
    placement.stop()


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory) -> MariaDB:
    """A private MariaDB server for the session (tests/helpers/mariadb.py)."""
    server = MariaDB(tmp_path_factory.mktemp("mariadb"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def served_mariadb(tmp_path, mariadb) -> ServedPlacement:
    """``placement-serve`` on a fresh MariaDB database of the test's own, two workers."""
    placement = ServedPlacement(tmp_path / "served-mariadb", database=mariadb.database(), workers=2)
    placement.start()
    yield placement
    placement.stop()


@pytest.fixture(scope="session")
def keystone(tmp_path_factory) -> Keystone:
    """A real Keystone with a Keystone-backed Placement, once per run (keystone_server.py)."""
    server = Keystone(tmp_path_factory.mktemp("keystone"))
    server.start()
    yield server
    server.stop()
