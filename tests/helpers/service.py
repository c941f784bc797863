"""The agent as a process: its configuration file, the console entry point, waiting on it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.paths import EXAMPLES, REPO


def write_conf(path: Path, state: Path, *sections: str, **default: object) -> Path:
    """A service configuration for the fake driver on examples/big-host.yaml.

    Args:
        path: the file to write.
        state: ``state_path``.
        sections: more INI text, appended (e.g. ``"[placement]\\nendpoint = ..."``).
        default: more ``[DEFAULT]`` options.

    Returns:
        ``path``.
    """
    lines = [f"[DEFAULT]\nstate_path = {state}\nupdate_jitter = 0\n"]
    lines += [f"{k} = {v}\n" for k, v in default.items()]
    lines += [
        "[compute]\ndriver = fake\n",
        f"[fake]\nhost_file = {EXAMPLES / 'big-host.yaml'}\n",
        "[devices]\nenabled_mdev_types = nvidia-35,nvidia-36\n",
        "[metrics]\nlisten =\n",
    ]
    text = "".join(lines) + "".join(f"{s.strip()}\n" for s in sections)
    path.write_text(text)
    return path


def served_conf(tmp_path: Path, state: Path, url: str, host: Path, **default: object) -> Path:
    """:func:`write_conf` for a Placement at ``url`` (admin token) and the host file ``host``."""
    conf = write_conf(
        tmp_path / "agent.conf",
        state,
        f"[placement]\nauth_type = admin_token\nendpoint = {url}\ntoken = admin",
        **default,
    )
    conf.write_text(conf.read_text().replace(str(EXAMPLES / "big-host.yaml"), str(host)))
    return conf


def agent(
    *args: str, env: dict[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen:
    """``compute-agent ARGS`` started in the background; its output goes to ``log`` (or nowhere)."""
    out = open(log, "w") if log else subprocess.DEVNULL
    return subprocess.Popen(
        [sys.executable, "-m", "agent.cli.main", *args],
        cwd=REPO,
        stdout=out,
        stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """``compute-agent ARGS`` run to its end (120 s at most), output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "agent.cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def wait_for(
    what: str,
    check: Callable[[], Any],
    timeout: float = 60.0,
    proc: subprocess.Popen | None = None,
) -> Any:
    """Poll ``check`` every 0.1 s until it returns something true; that value.

    Fails the test after ``timeout`` seconds, or as soon as ``proc`` exits.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the agent exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def last_cycle(state: Path) -> dict | None:
    """The service's ``last_cycle.json`` in ``state``; None while absent or half written."""
    try:
        return json.loads((state / "last_cycle.json").read_text())
    except (OSError, ValueError):
        return None


def stop(proc: subprocess.Popen) -> int:
    """SIGTERM (unless it already exited); its exit code, within 60 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60)
