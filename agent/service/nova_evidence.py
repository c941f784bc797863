"""Whether nova-compute runs on this host now: ``[compute_agent] nova_compute = auto``.

Three answers, never two: **present**, **absent** (by positive evidence only) and
**cannot tell**. :mod:`.beside_nova` refuses the layouts nova-compute's resource tracker
writes back unless the answer is absent (fail safe: a layout refused by mistake costs a
one-line fix, ``nova_compute = false``; one allowed by mistake offers the host's CPUs
twice). The sources, each with its limits (docs/deployment.md, "Beside nova-compute"):

* **Processes** (psutil, which reads ``/proc``): a process named ``nova-compute`` is
  present, whatever namespace it is seen from. No such process is *absent* only when
  this process sees every process of the host: it runs in the host's initial PID
  namespace (``/proc/self/ns/pid`` is ``pid:[4026531836]``, the kernel's
  ``PROC_PID_INIT_INO``, include/linux/proc_ns.h; systemd's ``namespace_is_init`` reads
  it so), PID 1 is listed (``hidepid=invisible``, the unit's ``ProtectProc=invisible``,
  hides it from other users) and every process's name and command line can be read
  (``hidepid=noaccess`` or a security module hide them). A container with a PID
  namespace of its own (kolla's containers, unless run with the host's) sees only its
  own processes: cannot tell.
* **systemd** (``systemctl show``, which asks systemd over its D-Bus API; reading a unit's
  properties needs no privilege, and ``ProtectProc=`` does not hide it): a unit of
  ``[compute_agent] nova_compute_units`` in an active state is present. Its silence is
  not absence: nova-compute may run in a container or under another unit's name. A
  container rarely reaches the host's systemd; then it says nothing.
* Not evidence: nova's ``compute_id`` file, its lock and log directories (they stay after
  nova-compute stopped, or after a takeover); nova's service record is in nova's
  database, out of the agent's reach. Placement is evidence once the agent runs: another
  writer putting VCPU, PCPU or MEMORY_MB back on a compute node whose NUMA cells hold them
  is nova-compute's tracker (:mod:`agent.tracker.doubled`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

NOVA_COMPUTE = "nova-compute"
"""nova-compute's console script (setup.cfg ``nova-compute = nova.cmd.compute:main``)."""

PRESENT = "present"
ABSENT = "absent"
UNKNOWN = "cannot tell"

SELF_PID_NAMESPACE = "/proc/self/ns/pid"
INIT_PID_NAMESPACE = "pid:[4026531836]"
"""The host's initial PID namespace as ``readlink /proc/self/ns/pid`` names it: the kernel
gives it the fixed inode ``PROC_PID_INIT_INO`` = 0xEFFFFFFC (include/linux/proc_ns.h)."""

SYSTEMCTL = "systemctl"
SYSTEMCTL_TIMEOUT = 10.0
"""Seconds ``systemctl show`` may take (one D-Bus round trip; a hung bus must not hold
start-up)."""

ACTIVE_STATES = frozenset({"active", "activating", "reloading", "deactivating", "refreshing"})
"""systemd's ``ActiveState`` values of a unit whose processes run (``activating`` covers an
``auto-restart`` loop: nova-compute writes again once it is up)."""


@dataclass(frozen=True)
class NovaEvidence:
    """The answer and its evidence in words.

    Attributes:
        state: :data:`PRESENT`, :data:`ABSENT` or :data:`UNKNOWN`.
        words: the setting and what was seen, e.g. ``[compute_agent] nova_compute = auto:
            pid 812 is nova-compute``.
    """

    state: str
    words: str

    @property
    def present(self) -> bool:
        """nova-compute runs beside the agent (its name and ``compute_id`` are enforced)."""
        return self.state == PRESENT

    @property
    def refuses(self) -> bool:
        """The layouts nova-compute writes back are refused: present, or cannot tell."""
        return self.state != ABSENT


@dataclass(frozen=True)
class ProcessScan:
    """What the process table said.

    Attributes:
        pid: a nova-compute process, or None.
        hidden: why processes of this host may be missing from the scan, "" when none is.
    """

    pid: int | None
    hidden: str


def scan_processes() -> ProcessScan:
    """Look for a process named nova-compute (its name, or its command line's first two
    words' base name: ``python3 /usr/bin/nova-compute``) and check the scan saw every
    process of the host (module docstring)."""
    me = os.getpid()
    unreadable = 0
    init_seen = False
    for proc in psutil.process_iter(["pid", "name", "cmdline", "status"]):
        info = proc.info
        init_seen |= info["pid"] == 1
        if info["pid"] == me or info.get("status") == psutil.STATUS_ZOMBIE:
            continue  # a zombie has exited (its command line is gone): not nova-compute
        if info.get("name") is None or info.get("cmdline") is None:
            unreadable += 1  # psutil's AccessDenied value
            continue
        words = [os.path.basename(w) for w in info["cmdline"][:2]]
        if info["name"] == NOVA_COMPUTE or NOVA_COMPUTE in words:
            return ProcessScan(int(info["pid"]), "")
    return ProcessScan(None, _hidden(init_seen, unreadable))


def _hidden(init_seen: bool, unreadable: int) -> str:
    """Why a scan that found nothing may have missed nova-compute, "" when it cannot have."""
    try:
        namespace = os.readlink(SELF_PID_NAMESPACE)
    except OSError as exc:
        return f"this process's PID namespace cannot be read ({exc.strerror})"
    if namespace != INIT_PID_NAMESPACE:
        return (
            f"this process runs in a PID namespace of its own ({namespace}, a container's), "
            "which shows none of the host's other processes"
        )
    if not init_seen:
        return (
            "other users' processes are hidden from this process (/proc mounted with "
            "hidepid=invisible: the unit's ProtectProc=invisible)"
        )
    if unreadable:
        return (
            f"{unreadable} processes cannot be read (/proc mounted with hidepid=noaccess, or "
            "a security module)"
        )
    return ""


def systemd_units(units: Iterable[str]) -> tuple[str | None, str]:
    """Ask systemd whether a unit of ``units`` is active (``systemctl show``).

    Returns:
        ``(active, said)``: ``active`` names the first active unit, its state and main
        PID in words, or is None; ``said`` is what systemd answered otherwise (the
        units' states, or why it could not be asked: not installed, no bus, a timeout).
    """
    names = list(units)
    if not names:
        return None, "systemd: no unit to ask ([compute_agent] nova_compute_units is empty)"
    command = [SYSTEMCTL, "show", "--property=Id,LoadState,ActiveState,MainPID", "--", *names]
    env = {**os.environ, "LC_ALL": "C", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT, env=env, check=False
        )
    except FileNotFoundError:
        return None, "systemd cannot be asked: systemctl is not installed here"
    except subprocess.TimeoutExpired:
        return None, f"systemd cannot be asked: systemctl show took over {SYSTEMCTL_TIMEOUT:g} s"
    except OSError as exc:
        return None, f"systemd cannot be asked: systemctl: {exc.strerror}"
    if done.returncode != 0:
        why = " ".join(done.stderr.split()) or f"systemctl exited {done.returncode}"
        return None, f"systemd cannot be asked: {why}"
    states = []
    for unit in _blocks(done.stdout):
        name, state = unit.get("Id", "?"), unit.get("ActiveState", "?")
        if state in ACTIVE_STATES:
            return f"systemd: {name} is {state} (main pid {unit.get('MainPID', '?')})", ""
        states.append(f"{name} {unit.get('LoadState', '?')}, {state}")
    return None, "systemd: " + "; ".join(states)


def _blocks(text: str) -> list[dict[str, str]]:
    """``systemctl show``'s output: one block of ``Key=value`` lines per unit, blocks
    apart by an empty line (systemctl(1), ``show``)."""
    blocks: list[dict[str, str]] = [{}]
    for line in text.splitlines():
        if not line.strip():
            if blocks[-1]:
                blocks.append({})
            continue
        key, _sep, value = line.partition("=")
        blocks[-1][key] = value
    return [b for b in blocks if b]


def gather(setting: str, units: Iterable[str]) -> NovaEvidence:
    """The answer for ``[compute_agent] nova_compute = setting`` (module docstring).

    Args:
        setting: ``true``, ``false`` or ``auto``.
        units: systemd units that run nova-compute (``[compute_agent] nova_compute_units``).
    """
    where = f"[compute_agent] nova_compute = {setting}"
    if setting != "auto":
        return NovaEvidence(PRESENT if setting == "true" else ABSENT, where)
    scan = scan_processes()
    if scan.pid is not None:
        return NovaEvidence(PRESENT, f"{where}: pid {scan.pid} is nova-compute")
    if not scan.hidden:
        return NovaEvidence(
            ABSENT, f"{where}: no nova-compute process runs (every process of this host is seen)"
        )
    active, said = systemd_units(units)
    if active is not None:
        return NovaEvidence(PRESENT, f"{where}: {active}")
    return NovaEvidence(
        UNKNOWN, f"{where}: no nova-compute process seen, but {scan.hidden}; {said}"
    )
