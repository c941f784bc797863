"""The CLI read by people and by pipes: plain unwrapped lines, JSON, help, configuration search.

Commands run as processes (stdout a pipe, as in ``| grep``) or under a
pseudo-terminal (rich), on the fake driver with the embedded Placement.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.commands import common
from agent.cli.main import _commands, build_parser, main
from tests.helpers.paths import EXAMPLES, REPO

BIG = str(EXAMPLES / "big-host.yaml")
ANSI = re.compile(r"\x1b\[")
BOX = set("─│├└┌┐┘┬┴┼━")


def conf_file(tmp_path: Path, text: str = "") -> Path:
    path = tmp_path / "c.conf"
    path.write_text(f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\n{text}")
    return path


def cli(*args: str, columns: int = 40) -> subprocess.CompletedProcess:
    """The agent with stdout a pipe and a narrow COLUMNS, as a script would see it."""
    return subprocess.run(
        [sys.executable, "-m", "agent.cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": str(columns)},
        check=False,
    )


def on_terminal(*args: str) -> str:
    """The agent's stdout when it is a terminal (a pseudo-terminal 200 columns wide)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its stdout is the terminal
        os.environ["COLUMNS"] = "200"
        os.chdir(REPO)
        os.execv(sys.executable, [sys.executable, "-m", "agent.cli.main", *args])
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode(errors="replace")


def test_sync_runs_once_without_once_and_prints_unwrapped_lines(tmp_path):
    conf = str(conf_file(tmp_path))
    first = cli("sync", "--config", conf, "--driver", "fake", "--fake-host", BIG)
    assert first.returncode == 0, first.stderr
    line = first.stdout.splitlines()[0]
    # One line per node even at 40 columns (it used to break before "aggregates").
    pattern = r"big-host: 4 providers; created 3, removed 0, inventories 4, traits 4, aggregates 0"
    assert re.fullmatch(pattern, line), line
    assert not ANSI.search(first.stdout)
    again = cli("sync", "--once", "--config", conf, "--driver", "fake", "--fake-host", BIG)
    assert again.returncode == 0 and "created 0" in again.stdout  # --once still accepted


def test_discover_tree_in_a_pipe_is_plain_indented_text(tmp_path):
    conf = str(conf_file(tmp_path))
    proc = cli("discover", "--config", conf, "--driver", "fake", "--fake-host", BIG)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "node big-host"
    assert not ANSI.search(proc.stdout) and not BOX & set(proc.stdout)
    # Long lines stay whole (no wrapping mid-word at COLUMNS=40).
    inventory = [x for x in lines if x.strip().startswith("VCPU ")]
    assert inventory and all(len(x) > 40 and "units" in x for x in inventory)
    assert all(x.startswith("  ") for x in lines[1 : lines.index("allocations on big-host")])


def test_on_a_terminal_output_is_rich(tmp_path):
    conf = str(conf_file(tmp_path))
    text = on_terminal("discover", "--config", conf, "--driver", "fake", "--fake-host", BIG)
    assert BOX & set(text), text[:500]  # tree guides
    assert ANSI.search(text)  # colours


SYNCED = pytest.mark.xdist_group("cli-output-synced")
"""The tests of :func:`synced`: one pytest-xdist worker runs them, so the module's fixture
(two agent processes) is made once, not on every worker."""


@pytest.fixture(scope="module")
def synced(tmp_path_factory) -> str:
    """A configuration whose state holds a synced tree and a recorded cycle.

    Commands that open the embedded Placement run as processes: one process
    serves one database, and the functional tests' session has its own.
    """
    conf = str(conf_file(tmp_path_factory.mktemp("synced")))
    for argv in (["sync"], ["run", "--once"]):
        done = cli(*argv, "--config", conf, "--driver", "fake", "--fake-host", BIG)
        assert done.returncode == 0, done.stderr
    return conf


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["sync", "--driver", "fake", "--fake-host", BIG],
        ["show", "--driver", "fake", "--fake-host", BIG],
        ["reshape", "--dry-run", "--driver", "fake", "--fake-host", BIG],
        ["discover", "--driver", "fake", "--fake-host", BIG],
        ["discover", "--devices", "--driver", "fake", "--fake-host", BIG],
    ],
    ids=lambda argv: " ".join(a for a in argv if not a.startswith("/")),
)
@SYNCED
def test_every_command_that_prints_state_has_format_json(synced, argv):
    proc = cli(*argv, "--config", synced, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict) and doc


def test_capture_has_format_json(tmp_path, capsys):
    conf = str(conf_file(tmp_path))
    src = REPO / "tests" / "fixtures" / "sysfs" / "sriov-nic"
    dest = tmp_path / "capture"
    code = main(
        ["capture", "--config", conf, "--sysfs-root", str(src), str(dest), "--format", "json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["dest"] == str(dest) and doc["files"] > 0


@SYNCED
def test_status_json_says_the_monitoring_status(tmp_path, synced):
    proc = cli("status", "--config", str(conf_file(tmp_path)), "--json")
    assert proc.returncode == 3 and json.loads(proc.stdout)["status"] == "UNKNOWN"
    proc = cli("status", "--config", synced, "--format", "json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["status"] == "OK" and doc["exit_code"] == 0
    assert doc["last_cycle"]["ok"]


def help_text(parser) -> str:
    """The help as printed, with argparse's line wrapping undone."""
    return " ".join(parser.format_help().split())


def test_help_shows_defaults_and_no_rst_markup():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.choices and "run" in a.choices).choices
    assert set(subparsers) == set(_commands())
    for name, sub in subparsers.items():
        text = help_text(sub)
        assert "``" not in text and ":ref:" not in text and ".. " not in text, name
    assert "(default: 3)" in help_text(subparsers["reshape"])  # --attempts
    assert "(default: text)" in help_text(subparsers["status"])  # --format
    assert "(default: 8778)" in help_text(subparsers["placement-serve"])  # --port
    assert "(default: None)" not in help_text(subparsers["run"])
    status = help_text(subparsers["status"])
    assert "monitoring-plugin convention" in status and "[DEFAULT] status_max_age" in status


def test_default_configuration_file_and_directory(tmp_path, monkeypatch, capsys):
    etc = tmp_path / "etc"
    etc.mkdir()
    main_file = etc / "compute-agent.conf"
    main_file.write_text(f"[DEFAULT]\nstate_path = {tmp_path / 'from-etc'}\nupdate_interval = 7\n")
    drop_ins = etc / "compute-agent.conf.d"
    drop_ins.mkdir()
    (drop_ins / "10-a.conf").write_text("[DEFAULT]\nupdate_interval = 8\n")
    (drop_ins / "20-b.conf").write_text("[DEFAULT]\nupdate_interval = 9\n")
    monkeypatch.setattr(common, "DEFAULT_CONFIG_FILES", (str(main_file),))
    monkeypatch.setattr(common, "DEFAULT_CONFIG_DIRS", (str(drop_ins),))
    args = build_parser().parse_args(["status"])
    conf = common.load_conf(args)
    assert conf.state_path == str(tmp_path / "from-etc")
    assert conf.update_interval == 9  # directory files after the file, in name order
    assert main(["status"]) == 3  # runs with no option at all
    assert str(tmp_path / "from-etc") in capsys.readouterr().out
    # --config-file (and its alias --config) replace the default file.
    other = conf_file(tmp_path)
    for flag in ("--config-file", "--config"):
        conf = common.load_conf(build_parser().parse_args(["status", flag, str(other)]))
        assert conf.state_path == str(tmp_path / "state")
    only_dir = common.load_conf(build_parser().parse_args(["status", "--config-dir", str(etc)]))
    assert only_dir.state_path == str(tmp_path / "from-etc")  # etc/*.conf read
    assert main(["status", "--config-dir", str(tmp_path / "nowhere")]) == 2
    assert "configuration directory not found" in capsys.readouterr().err


def test_missing_defaults_are_not_required(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "DEFAULT_CONFIG_FILES", (str(tmp_path / "absent.conf"),))
    monkeypatch.setattr(common, "DEFAULT_CONFIG_DIRS", (str(tmp_path / "absent.d"),))
    assert common.config_sources(build_parser().parse_args(["status"])) == ([], [])
