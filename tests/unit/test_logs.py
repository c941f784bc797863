"""agent.conf.logs: oslo.log set up the OpenStack way, request ids per cycle, secrets masked."""

from __future__ import annotations

import logging
import os

from agent.conf import config as agent_config
from agent.conf import logs
from tests.helpers.conf import make_conf


def test_debug_turns_on_the_agent_not_the_libraries(tmp_path):
    conf = make_conf(tmp_path)
    logs.setup(conf, debug=True)
    assert logging.getLogger("agent.tracker.cycle").getEffectiveLevel() == logging.DEBUG
    for noisy in ("stevedore", "keystoneauth", "placement", "alembic", "apscheduler"):
        assert logging.getLogger(noisy).getEffectiveLevel() == logging.WARNING, noisy
    logs.setup(make_conf(tmp_path), quiet=True)
    assert logging.getLogger().level == logging.WARNING
    logs.setup(make_conf(tmp_path))
    assert logging.getLogger().level == logging.INFO


def test_logs_go_to_stderr_by_default_so_stdout_keeps_the_output(tmp_path, capfd):
    logs.setup(make_conf(tmp_path))
    logging.getLogger("agent.test").warning("to stderr")
    out, err = capfd.readouterr()
    assert "to stderr" in err and "to stderr" not in out


def test_secret_values_and_password_like_text_are_masked(tmp_path, capfd):
    ini = tmp_path / "c.conf"
    ini.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n"
        "[placement]\nauth_type = admin_token\nendpoint = http://x\ntoken = s3cr3t-tok\n"
    )
    logs.setup(agent_config.load([str(ini)]))
    log = logging.getLogger("agent.test")
    log.error("request with %s failed; password=hunter2", "s3cr3t-tok")
    try:
        raise RuntimeError("token s3cr3t-tok refused")
    except RuntimeError:
        log.exception("boom")
    err = capfd.readouterr().err
    assert "s3cr3t-tok" not in err and "hunter2" not in err
    assert "request with *** failed" in err and "token *** refused" in err


def test_each_cycle_context_has_its_own_request_id_on_the_lines(tmp_path, capfd):
    logs.setup(make_conf(tmp_path))
    log = logging.getLogger("agent.test")
    ids = []
    for _ in range(2):
        with logs.cycle_context() as ctx:
            ids.append(ctx.request_id)
            log.warning("inside")
    log.warning("outside")
    lines = capfd.readouterr().err.splitlines()
    assert ids[0] != ids[1] and all(i.startswith("req-") for i in ids)
    assert ids[0] in lines[0] and ids[1] in lines[1]
    assert not any(i in lines[2] for i in ids)
    assert logs.current_cycle_context() is None


def test_stderr_is_the_journal_only_when_journal_stream_names_it(monkeypatch, tmp_path):
    st = os.fstat(2)
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    assert logs.stderr_is_journal()
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + 1}")
    assert not logs.stderr_is_journal()
    monkeypatch.setenv("JOURNAL_STREAM", "garbage")
    assert not logs.stderr_is_journal()
    monkeypatch.delenv("JOURNAL_STREAM")
    assert not logs.stderr_is_journal()


def test_journal_is_chosen_under_systemd_unless_the_file_says_otherwise(tmp_path, monkeypatch):
    from oslo_log.handlers import OSJournalHandler

    st = os.fstat(2)
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")

    def handlers(extra: str) -> set[str]:
        ini = tmp_path / "c.conf"
        ini.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n{extra}")
        logs.setup(agent_config.load([str(ini)]))
        return {type(h).__name__ for h in logging.getLogger().handlers}

    try:
        assert handlers("") == {OSJournalHandler.__name__}
        assert handlers("use_stderr = true\n") == {"StreamHandler"}
        assert handlers("use_journal = false\n") == {"StreamHandler"}
        both = handlers("use_journal = true\nuse_stderr = true\n")
        assert both == {OSJournalHandler.__name__, "StreamHandler"}
    finally:
        monkeypatch.delenv("JOURNAL_STREAM")
        logs.setup(make_conf(tmp_path))


class Unreachable(Exception):
    pass


def test_an_error_line_says_the_exception_once(tmp_path, capfd):
    """oslo.log appends the exception being handled (": module.Class: text") to a WARNING
    or ERROR line; a line that already says it ends there (issue 35)."""
    logs.setup(make_conf(tmp_path))
    log = logging.getLogger("agent.test")
    try:
        raise Unreachable("Keystone at http://127.0.0.1:5000/v3 is unreachable")
    except Unreachable as exc:
        log.error("node n: cycle failed: %s: %s", type(exc).__name__, exc)
        log.error("the cycle stopped")  # does not say it: the summary stays
    first, second = capfd.readouterr().err.strip().splitlines()[-2:]
    assert first.endswith(
        "node n: cycle failed: Unreachable: Keystone at http://127.0.0.1:5000/v3 is unreachable"
    )
    assert first.count("is unreachable") == 1
    assert second.endswith(
        "the cycle stopped: tests.unit.test_logs.Unreachable: Keystone at "
        "http://127.0.0.1:5000/v3 is unreachable"
    )
