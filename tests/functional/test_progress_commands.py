"""``sync`` and the offline ``reshape`` report their progress (no terminal: log lines on stderr).

Run in-process against the ``served`` Placement with the progress delay set
to 0, so that even this small host's work is long enough to be reported.
"""

from __future__ import annotations

import pytest

from agent.cli.main import main
from agent.service import progress as progress_module
from tests.helpers.paths import EXAMPLES


@pytest.mark.parametrize("command", [["sync"], ["reshape"], ["reshape", "--dry-run"]])
def test_long_commands_log_that_they_are_still_running(served, tmp_path, monkeypatch, capfd,
                                                        command):  # fmt: skip
    monkeypatch.setattr(progress_module, "DEFAULT_DELAY", 0.0)
    conf = tmp_path / "c.conf"
    conf.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\n[compute]\ndriver = fake\n"
        f"[fake]\nhost_file = {EXAMPLES / 'big-host.yaml'}\n"
        f"[placement]\nauth_type = admin_token\nendpoint = {served.url}\ntoken = admin\n"
        "noauth_roles = admin,service\n"
    )
    assert main(["sync", "--config", str(conf)]) == 0  # the node exists for reshape
    capfd.readouterr()
    assert main([*command, "--config", str(conf)]) == 0
    out, err = capfd.readouterr()
    verb = "sync" if command == ["sync"] else "reshape"
    lines = [x for x in err.splitlines() if f"{verb} of node big-host: still running" in x]
    assert lines, err
    assert "placement requests" in lines[0] and "req-" in lines[0]  # the run's request id
    assert "still running" not in out
