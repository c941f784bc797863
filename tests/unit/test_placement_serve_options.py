"""``placement-serve``'s workers, threads, keep-alive and database pool (issue 40).

The flags reach gunicorn's configuration and the database pool Placement's
oslo.db engine is made with (the engine itself on MariaDB:
tests/functional/test_mariadb.py); the defaults depend on
the database (SQLite: one worker, one thread) and on the CPUs.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent.cli.commands import placement_serve
from agent.cli.main import build_parser
from agent.model.exceptions import ConfigError
from agent.placement import serve
from agent.placement.embedded import PoolSize
from agent.placement.serve import ServeSettings, gunicorn_server, settings_for

MYSQL = "mysql+pymysql://placement:pw@127.0.0.1:3306/placement"
SQLITE = "sqlite:////tmp/p.sqlite"


def test_a_database_server_gets_a_worker_per_cpu_two_threads_and_the_pool_placement_had(
    monkeypatch,
):
    monkeypatch.setattr(serve, "available_cpus", lambda: 16)
    assert settings_for(MYSQL) == ServeSettings(16, 2, 30, PoolSize(5, 10))


def test_sqlite_gets_one_worker_and_one_thread():
    settings = settings_for(SQLITE)
    assert (settings.workers, settings.threads, settings.gunicorn) == (1, 1, False)


def test_the_pool_holds_a_connection_per_thread_when_there_are_more_than_five():
    assert settings_for(MYSQL, workers=2, threads=8).pool == PoolSize(8, 10)
    assert settings_for(MYSQL, threads=8, pool_size=3, max_overflow=0).pool == PoolSize(3, 0)


def test_one_worker_of_one_thread_is_served_without_gunicorn_as_before():
    assert not settings_for(MYSQL, workers=1, threads=1).gunicorn
    assert settings_for(MYSQL, workers=1, threads=2).gunicorn


@pytest.mark.parametrize(
    "kwargs,flag",
    [
        ({"workers": 0}, "--workers 0: give 1 or more"),
        ({"threads": 0}, "--threads 0: give 1 or more"),
        ({"pool_size": 0}, "--db-pool-size 0: give 1 or more"),
        ({"keepalive": -1}, "--keepalive -1: give 0 or more"),
        ({"max_overflow": -1}, "--db-max-overflow -1: give 0 or more"),
    ],
)
def test_a_count_out_of_range_is_named(kwargs, flag):
    with pytest.raises(ConfigError, match=flag):
        settings_for(MYSQL, **kwargs)


@pytest.mark.parametrize("kwargs", [{"workers": 2}, {"threads": 2}])
def test_sqlite_refuses_several_workers_or_threads(kwargs):
    with pytest.raises(ConfigError, match="SQLite serves one writer at a time"):
        settings_for(SQLITE, **kwargs)


def test_the_settings_reach_gunicorns_configuration():
    app = gunicorn_server(lambda: None, "127.0.0.1:0", ServeSettings(3, 4, 7, PoolSize(4, 2)))
    cfg = app.cfg
    assert (cfg.workers, cfg.threads, cfg.keepalive) == (3, 4, 7)
    assert cfg.worker_class_str == "gthread" and cfg.bind == ["127.0.0.1:0"]
    assert cfg.preload_app is False  # every worker opens its own connections


def test_each_workers_app_is_made_with_the_pool(monkeypatch):
    made: dict[str, Any] = {}
    checked: list[str] = []

    class Server:
        def __init__(self, factory, bind, settings):
            assert checked == [MYSQL]  # the database is checked before any worker forks
            made["factory"], made["bind"], made["settings"] = factory, bind, settings

        def run(self):
            made["app"] = made["factory"]()  # what each worker does after the fork

    def app_for(url, create_schema=False, pool=None):
        made["url"], made["pool"] = url, pool
        return "the app"

    monkeypatch.setattr(serve, "gunicorn_server", Server)
    monkeypatch.setattr(serve, "placement_app_for_url", app_for)
    monkeypatch.setattr(serve, "check_schema", checked.append)
    settings = settings_for(MYSQL, workers=2, threads=3, pool_size=6, max_overflow=1)
    serve.serve_workers(MYSQL, "127.0.0.1", 8778, settings)
    assert made["bind"] == "127.0.0.1:8778" and made["settings"] is settings
    assert (made["url"], made["pool"], made["app"]) == (MYSQL, PoolSize(6, 1), "the app")


def parsed(*argv: str) -> Any:
    return build_parser().parse_args(["placement-serve", *argv])


def test_the_flags_reach_the_server(monkeypatch, tmp_path):
    served: list[ServeSettings] = []
    monkeypatch.setattr(placement_serve, "serve_workers", lambda url, h, p, s: served.append(s))
    (tmp_path / "c.conf").write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    args = parsed(
        "--config", str(tmp_path / "c.conf"), "--placement-db", MYSQL, "--workers", "3",
        "--threads", "4", "--keepalive", "5", "--db-pool-size", "6", "--db-max-overflow", "7",
    )  # fmt: skip
    assert placement_serve.run(args) == 0
    assert served == [ServeSettings(3, 4, 5, PoolSize(6, 7))]


def test_the_flags_default_to_the_database_servers_defaults(monkeypatch, tmp_path):
    served: list[ServeSettings] = []
    monkeypatch.setattr(placement_serve, "serve_workers", lambda url, h, p, s: served.append(s))
    monkeypatch.setattr(serve, "available_cpus", lambda: 6)
    (tmp_path / "c.conf").write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    assert (
        placement_serve.run(parsed("--config", str(tmp_path / "c.conf"), "--placement-db", MYSQL))
        == 0
    )
    assert served == [ServeSettings(6, 2, 30, PoolSize(5, 10))]
