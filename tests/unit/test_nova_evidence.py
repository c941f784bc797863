"""``[compute_agent] nova_compute = auto`` where the agent is deployed (issue 40).

The shipped unit runs the agent as ``User=compute-agent`` with ``ProtectProc=invisible``.
systemd is not PID 1 on the machines these tests run on (no ``systemd-run``), so the
unit's two settings are reproduced with what the kernel offers, as systemd itself does
them: a /proc mounted with ``hidepid=invisible`` in a private mount namespace
(``unshare --mount``; systemd mounts the same option for ``ProtectProc=invisible``) and
a separate user without capabilities (``setpriv`` to ``nobody``, as ``User=`` with the
unit's empty ``CapabilityBoundingSet=``). A kolla-style container is ``unshare --pid
--fork --mount-proc``: a PID namespace of its own. The python running the tests lives
under root's 0700 home, so the sandbox gives ``nobody`` a way there by bind mounts in
the same private namespace (nothing changes outside it). ``make test`` runs as root with
util-linux (Debian's essential set): where the kernel or the tools refuse, the tests fail
saying why, never skip.

systemd over D-Bus cannot be reached here either: ``systemctl`` itself runs, and a
``systemctl`` placed first on PATH answers as systemd would for an active, an absent
and an unreachable unit (``systemctl show``'s documented output).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.service import nova_evidence
from agent.service.exit_codes import EXIT_BAD_INPUT
from tests.helpers.paths import REPO
from tests.helpers.processes import nova_compute_processes


@pytest.fixture(autouse=True)
def _one_at_a_time() -> Iterator[None]:
    """Processes named nova-compute, nobody's and root's, are started and looked for here:
    one test at a time on this machine (tests/helpers/processes.py)."""
    with nova_compute_processes():
        yield


NOBODY = 65534
FAKE = "nova-compute pid "
PYTHON_HOME = Path(os.path.realpath(sys.executable)).parents[3]
"""pyenv's root (``~/.pyenv``) when the interpreter is pyenv's, made reachable for nobody."""

GATHER = (
    "import sys; from agent.service import nova_evidence as n; "
    "e = n.gather('auto', sys.argv[1:]); print(e.state); print(e.words)"
)


def _tools() -> None:
    if os.geteuid() != 0:
        pytest.fail("the sandbox needs root (unshare --mount, mount -t proc, setpriv): run as root")
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: install util-linux")


def sandbox(
    argv: list[str],
    *,
    hidepid: bool = True,
    user: bool = True,
    own_pid_namespace: bool = False,
    path: str = "",
    nova_compute: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (in the repository) as the shipped unit would, or as a container would.

    Args:
        hidepid: /proc mounted with ``hidepid=invisible`` (``ProtectProc=invisible``).
        user: as ``nobody`` with no capability (``User=`` of an unprivileged user).
        own_pid_namespace: in a PID namespace of its own with its own /proc (a container).
        path: directories put first on PATH.
        nova_compute: a process named nova-compute runs as root on the host while ``argv``
            runs, and only then (every process of this machine sees it: other tests'
            agents under ``auto`` too); its PID is :func:`_fake_pid` of the result.
    """
    _tools()
    with tempfile.TemporaryDirectory() as shadow:
        fake = None
        if nova_compute:
            fake = Path(shadow) / "bin" / "nova-compute"
            fake.parent.mkdir()
            fake.write_text("import time\ntime.sleep(120)\n")
        return _sandboxed(argv, shadow, hidepid, user, own_pid_namespace, path, fake)


def _fake_pid(done: subprocess.CompletedProcess[str]) -> int:
    """The PID of the nova-compute :func:`sandbox` ran beside ``argv`` (its first line)."""
    return int(done.stderr.splitlines()[0].removeprefix(FAKE))


def _stderr(done: subprocess.CompletedProcess[str]) -> str:
    """What ``argv`` wrote on stderr (without :func:`_fake_pid`'s line)."""
    return "\n".join(line for line in done.stderr.splitlines() if not line.startswith(FAKE))


def _sandboxed(
    argv: list[str],
    shadow: str,
    hidepid: bool,
    user: bool,
    own_pid_namespace: bool,
    path: str,
    fake: Path | None,
) -> subprocess.CompletedProcess[str]:
    steps = []
    if fake is not None:
        # Started before /proc is remounted and privileges dropped, as root, on the host's
        # PID namespace (a container's own is made below, around argv only).
        steps.append(f"{{ {shlex.quote(sys.executable)} {shlex.quote(str(fake))} & }}")
        steps.append(f"fake=$! && echo {FAKE}$fake >&2")
    home = Path.home()
    if user and str(PYTHON_HOME).startswith(f"{home}/"):
        # nobody cannot pass root's 0700 home: a 0755 directory with the interpreter's
        # tree bound into it takes its place, in this mount namespace only.
        os.chmod(shadow, 0o755)
        inner = Path(shadow) / PYTHON_HOME.relative_to(home)
        inner.mkdir(parents=True, mode=0o755)
        steps += [f"mount --bind {PYTHON_HOME} {inner}", f"mount --rbind {shadow} {home}"]
    if hidepid:
        steps.append("mount -t proc -o hidepid=invisible proc /proc")
    env = f"env PATH={shlex.quote(path + ':' + os.environ['PATH'])} PYTHONPATH={REPO} HOME=/tmp"
    drop = f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups " if user else ""
    inner = ["unshare", "--pid", "--fork", "--mount-proc"] if own_pid_namespace else []
    command = f"{drop}{env} " + shlex.join([*inner, *argv])
    if fake is None:
        steps.append(f"exec {command}")
    else:
        steps.append(f"{{ {command}; rc=$?; kill $fake; wait $fake 2>/dev/null; exit $rc; }}")
    unshare = ["unshare", "--mount", "--propagation", "private"]
    done = subprocess.run(
        [*unshare, "sh", "-c", " && ".join(steps)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    if (
        done.returncode != 0
        and "Operation not permitted" in done.stderr
        and "unshare" in done.stderr
    ):
        pytest.fail(f"the kernel refuses the sandbox: {done.stderr.strip()}")
    return done


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory nobody can read and write (pytest's tmp_path is under a 0700 one)."""
    with tempfile.TemporaryDirectory() as path:
        os.chmod(path, 0o777)
        yield Path(path)


def _gathered(done: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    assert done.returncode == 0, done.stderr
    state, words = done.stdout.strip().splitlines()
    return state, words


def test_under_the_units_user_and_protectproc_a_running_nova_compute_is_unseen():
    """``User=`` + ``ProtectProc=invisible``: nova-compute (another user's) is not listed,
    nor is PID 1; ``auto`` cannot tell, where it used to say "absent"."""
    done = sandbox([sys.executable, "-c", GATHER], nova_compute=True)
    state, words = _gathered(done)
    assert state == nova_evidence.UNKNOWN, words
    assert "hidepid=invisible" in words and "ProtectProc=invisible" in words
    assert f"pid {_fake_pid(done)}" not in words


def test_under_the_unit_the_agent_refuses_numa_in_one_line(shared):
    """The whole agent (``compute-agent run --once``) under the unit's user and
    ``ProtectProc=invisible``: exit 2, one line naming the option, why, and how to declare
    ``nova_compute = false``; with that declared it runs."""
    conf = shared / "agent.conf"
    conf.write_text(
        f"[DEFAULT]\nstate_path = {shared / 'state'}\n[numa]\nmodel_in_placement = true\n"
    )
    conf.chmod(0o644)
    host = REPO / "examples" / "small-host.yaml"
    run = [sys.executable, "-m", "agent.cli.main", "run", "--once", "--config", str(conf)]
    run += ["--driver", "fake", "--fake-host", str(host)]
    done = sandbox(run, nova_compute=True)
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    (line,) = _stderr(done).strip().splitlines()
    assert "[numa] model_in_placement = true is refused while the agent cannot tell" in line
    assert "hidepid=invisible" in line
    assert line.endswith(
        "if nova-compute does not run on this host, declare it in compute-agent.conf: "
        "[compute_agent] nova_compute = false (docs/deployment.md, 'Beside nova-compute')"
    )
    conf.write_text(conf.read_text() + "[compute_agent]\nnova_compute = false\n")
    done = sandbox(run)
    assert done.returncode == 0, done.stderr


def test_under_the_unit_the_agents_own_users_nova_compute_is_seen(shared):
    """A nova-compute of the agent's own user stays visible under hidepid: present."""
    script = shared / "nova-compute"
    script.write_text("import subprocess, sys\nsubprocess.run(sys.argv[1:], check=True)\n")
    script.chmod(0o644)
    state, words = _gathered(sandbox([sys.executable, str(script), sys.executable, "-c", GATHER]))
    assert state == nova_evidence.PRESENT
    assert words.endswith("is nova-compute")


def test_under_the_unit_systemd_says_nova_compute_is_active(shared):
    """Processes hidden, systemd asked (its D-Bus API is not hidden by ``ProtectProc``):
    an active unit is present; an inactive one is not absence."""
    bin_dir = shared / "bin"
    bin_dir.mkdir(mode=0o755)
    _fake_systemctl(bin_dir, "openstack-nova-compute.service", "active", 4242)
    units = ["nova-compute.service", "openstack-nova-compute.service"]
    done = sandbox([sys.executable, "-c", GATHER, *units], path=str(bin_dir))
    state, words = _gathered(done)
    assert (state, words) == (
        nova_evidence.PRESENT,
        "[compute_agent] nova_compute = auto: systemd: openstack-nova-compute.service is "
        "active (main pid 4242)",
    )
    _fake_systemctl(bin_dir, "openstack-nova-compute.service", "inactive", 0)
    state, words = _gathered(sandbox([sys.executable, "-c", GATHER, *units], path=str(bin_dir)))
    assert state == nova_evidence.UNKNOWN
    assert words.endswith(
        "systemd: nova-compute.service not-found, inactive; openstack-nova-compute.service "
        "loaded, inactive"
    )


def test_in_a_pid_namespace_of_its_own_nova_compute_on_the_host_is_unseen():
    """The kolla case: the agent's container has its own PID namespace (root inside, every
    process of the container visible): the host's nova-compute is not, so cannot tell."""
    done = sandbox(
        [sys.executable, "-c", GATHER],
        hidepid=False,
        user=False,
        own_pid_namespace=True,
        nova_compute=True,
    )
    state, words = _gathered(done)
    assert state == nova_evidence.UNKNOWN, words
    assert "a PID namespace of its own" in words


def test_in_the_hosts_pid_namespace_with_every_process_seen_absence_is_evidence():
    """Root in the host's PID namespace, /proc without hidepid: nova-compute is seen; and
    without it, its absence is evidence (the only way ``auto`` allows the layouts)."""
    done = sandbox([sys.executable, "-c", GATHER], hidepid=False, user=False, nova_compute=True)
    state, words = _gathered(done)
    # The first nova-compute the scan meets is named: ours, unless another test's runs too.
    assert state == nova_evidence.PRESENT, words
    assert words.startswith("[compute_agent] nova_compute = auto: pid ")
    assert words.endswith(" is nova-compute")
    state, _words = _gathered(sandbox([sys.executable, "-c", GATHER], hidepid=False, user=False))
    assert state == nova_evidence.ABSENT


def _fake_systemctl(bin_dir: Path, unit: str, state: str, pid: int) -> None:
    """A ``systemctl`` answering ``show`` as systemd 252 does: one block per unit asked,
    ``unit`` loaded in ``state``, any other unit not found."""
    script = bin_dir / "systemctl"
    script.write_text(
        "#!/bin/sh\n"
        'shift 3\nfirst=1\nfor u in "$@"; do\n'
        "  [ $first = 1 ] || echo\n  first=0\n"
        f'  if [ "$u" = {unit} ]; then\n'
        f"    printf 'Id=%s\\nLoadState=loaded\\nActiveState={state}\\nMainPID={pid}\\n' \"$u\"\n"
        "  else\n"
        "    printf 'Id=%s\\nLoadState=not-found\\nActiveState=inactive\\nMainPID=0\\n' \"$u\"\n"
        "  fi\ndone\n"
    )
    script.chmod(0o755)


def test_systemd_unreachable_says_why(tmp_path, monkeypatch):
    """No systemd to ask (a container, or systemd not PID 1): the words say so, and
    nothing is concluded from it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(
        "#!/bin/sh\necho 'System has not been booted with systemd as init system (PID 1). "
        "Can'\"'\"'t operate.' >&2\necho 'Failed to connect to bus: Host is down' >&2\nexit 1\n"
    )
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert nova_evidence.systemd_units(["nova-compute.service"]) == (
        None,
        "systemd cannot be asked: System has not been booted with systemd as init system "
        "(PID 1). Can't operate. Failed to connect to bus: Host is down",
    )
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert nova_evidence.systemd_units(["nova-compute.service"]) == (
        None,
        "systemd cannot be asked: systemctl is not installed here",
    )


def test_a_zombie_is_no_process_to_read(monkeypatch):
    """An exited child not reaped yet (a zombie: psutil cannot read its command line) is
    neither nova-compute nor a process the scan failed to read: absence still stands in
    the host's PID namespace."""

    class Proc:
        def __init__(self, **info):
            self.info = info

    procs = [
        Proc(pid=1, name="init", cmdline=["/sbin/init"], status="sleeping"),
        Proc(pid=4242, name=None, cmdline=None, status="zombie"),
    ]
    monkeypatch.setattr(nova_evidence.psutil, "process_iter", lambda _attrs: iter(procs))
    monkeypatch.setattr(nova_evidence.os, "readlink", lambda _p: nova_evidence.INIT_PID_NAMESPACE)
    assert nova_evidence.scan_processes() == nova_evidence.ProcessScan(None, "")
    procs[1] = Proc(pid=4242, name=None, cmdline=None, status="sleeping")
    assert "1 processes cannot be read" in nova_evidence.scan_processes().hidden
