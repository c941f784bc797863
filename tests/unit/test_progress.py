"""Progress of long work: nothing for short work, log lines in a pipe, a bar on a terminal."""

from __future__ import annotations

import io
import itertools
import logging
import time

from agent.cli.main import main
from agent.conf import logs
from agent.service import progress as progress_module
from agent.service.progress import Progress
from tests.helpers.conf import make_conf
from tests.helpers.paths import REPO


def wait_until(check, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_short_work_shows_nothing(caplog):
    caplog.set_level(logging.INFO, logger="agent.service.progress")
    stream = io.StringIO()
    with Progress("quick", count=lambda: 1, delay=5, stream=stream, terminal=True) as p:
        pass
    with Progress("quick", delay=5, terminal=False) as q:
        pass
    assert stream.getvalue() == "" and p.lines == q.lines == 0 and not caplog.records


def test_without_a_terminal_long_work_logs_a_line_now_and_then(tmp_path, capfd):
    logs.setup(make_conf(tmp_path))
    counter = itertools.count()
    with logs.cycle_context() as ctx, Progress(
        "reshape of node cn1", count=lambda: next(counter), delay=0.05, interval=0.1,
        terminal=False,
    ) as p:  # fmt: skip
        wait_until(lambda: p.lines >= 3)
    err = capfd.readouterr().err
    lines = [x for x in err.splitlines() if "reshape of node cn1: still running after" in x]
    assert len(lines) == p.lines >= 3, err
    assert "placement requests" in lines[-1]
    # The watcher thread logs with the cycle's request id.
    assert all(ctx.request_id in line for line in lines)


def test_on_a_terminal_a_bar_shows_what_is_counted_then_goes_away():
    stream = io.StringIO()
    done = [0]
    with Progress(
        "capture of /", count=lambda: done[0], unit="files read", delay=0, stream=stream,
        terminal=True,
    ):  # fmt: skip
        for _ in range(5):
            done[0] += 40
            time.sleep(0.1)
    text = stream.getvalue()
    assert "capture of /" in text and "files read" in text
    assert "\x1b[" in text  # drawn with terminal controls, erased at the end (transient)


def test_capture_reports_progress_when_it_takes_long(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(progress_module, "DEFAULT_DELAY", 0.0)
    conf = tmp_path / "c.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\n")
    src = REPO / "tests" / "fixtures" / "sysfs" / "sriov-nic"
    argv = ["capture", "--config", str(conf), "--sysfs-root", str(src), str(tmp_path / "c")]
    assert main(argv) == 0
    out, err = capfd.readouterr()
    assert f"INFO agent.service.progress [-] capture of {src}: still running after 0 s" in err
    assert "files read" in err and "still running" not in out  # stdout keeps the result


def test_log_lines_during_a_bar_are_printed_above_it_not_over_it():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    log = logging.getLogger("agent.test")
    old_level = log.level
    log.setLevel(logging.INFO)
    try:
        with Progress("cycle", delay=0, stream=stream, terminal=True):
            wait_until(lambda: handler.stream is not stream)  # the bar is up
            log.info("a line while the bar runs")
            time.sleep(0.3)
        assert handler.stream is stream  # given back
    finally:
        root.removeHandler(handler)
        log.setLevel(old_level)
    text = stream.getvalue()
    before, _, after = text.partition("a line while the bar runs")
    assert after, text
    # rich erased the bar's line before printing the log line, then drew the bar again.
    assert "\x1b[2K" in before[-200:] and "cycle" in after
